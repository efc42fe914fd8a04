// The worker side fashion_mnist_mlp and fashion_mnist_cnn share, with a fake network: the dataset
// reads the splits, holds out the validation examples, checks the data against the network and
// yields the first epoch's batches; the closures check their arguments. (Training and evaluation
// against real ps tasks: fashion_mnist_cnn_test and tests/fashion_mnist_mlp_training_test.)
#include "models/fashion_mnist_worker.h"

#include <memory>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/data/idx_test_util.h"
#include "models/data/image_splits.h"
#include "worker/closure_registry.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr FashionMnistNames kNames = {"toy/train", "toy/eval", "toy/data",
                                      "toy/",      "toy/avg/", "toy/avg/count"};

// A network that takes `pixels` inputs and has `classes` classes, and computes nothing.
class FakeNet final : public FashionNet {
 public:
  FakeNet(int64_t pixels, int64_t classes) : pixels_(pixels), classes_(classes) {}
  int64_t num_params() const override { return 1; }
  int64_t classes() const override { return classes_; }
  Shape InputShape(int64_t n) const override { return Shape{n, pixels_}; }
  absl::Status CheckImages(const data::ImageSplit& split, const char* dataset) const override {
    if (split.size() > 0 && split.pixels() != pixels_) {
      return absl::InvalidArgumentError(absl::StrCat(dataset, ": not ", pixels_, " pixels"));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<FlatVariable>> FindVariables(
      PsConnection* /*ps*/, const std::string& /*prefix*/) const override {
    return absl::NotFoundError("no ps");
  }
  absl::StatusOr<float> ForwardBackward(ReplicaGroup*, const float*, int64_t, const float*,
                                        const int32_t*, float*) const override {
    return absl::UnimplementedError("fake");
  }
  absl::StatusOr<FashionEvalSums> Evaluate(ReplicaGroup*, const float*, int64_t, const float*,
                                           const int32_t*) const override {
    return absl::UnimplementedError("fake");
  }

 private:
  const int64_t pixels_;
  const int64_t classes_;
};

// The network arguments: pixels, classes.
absl::StatusOr<std::unique_ptr<FashionNet>> MakeFakeNet(absl::Span<const Tensor> args) {
  if (args.size() != kFashionMnistNetArgs + 2) {
    return absl::InvalidArgumentError("toy/data: want pixels and classes");
  }
  return std::unique_ptr<FashionNet>(new FakeNet(args[kFashionMnistNetArgs].scalar<int64_t>(),
                                                 args[kFashionMnistNetArgs + 1].scalar<int64_t>()));
}

// `count` 2x3 images, labels index % 3, as `dir`'s training or test files.
void WriteSplit(const std::string& dir, bool train, uint32_t count) {
  std::vector<uint8_t> pixels, labels;
  for (uint32_t i = 0; i < count; ++i) {
    pixels.insert(pixels.end(), 6, static_cast<uint8_t>(i));
    labels.push_back(static_cast<uint8_t>(i % 3));
  }
  data::WriteIdx(data::DataFile(dir, train ? data::kTrainImagesFile : data::kTestImagesFile), 0x803,
                 {count, 2, 3}, pixels);
  data::WriteIdx(data::DataFile(dir, train ? data::kTrainLabelsFile : data::kTestLabelsFile), 0x801,
                 {count}, labels);
}

class FashionMnistWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterFashionMnistModel(kNames, MakeFakeNet, &registry_,
                                          std::make_shared<ReplicaGroups>())
                    .ok());
    dir_ = FreshTempDir("fashion_worker");
    WriteSplit(dir_, /*train=*/true, /*count=*/50);
    WriteSplit(dir_, /*train=*/false, /*count=*/10);
  }

  // The dataset's arguments: CPU, one step at a time, the fake network's two.
  std::vector<Tensor> Args(int64_t batch_size, float validation_fraction,
                           const std::string& validation_dir = "", int64_t pixels = 6,
                           int64_t classes = 3) {
    WorkerDevices cpu;
    cpu.kind = DeviceOptions::Kind::kCpu;
    std::vector<Tensor> args =
        FashionMnistDataArgs(dir_, /*seed=*/7, batch_size,
                             /*steps_at_once=*/1, validation_fraction, validation_dir, cpu);
    args.push_back(Tensor::Scalar<int64_t>(pixels));
    args.push_back(Tensor::Scalar<int64_t>(classes));
    return args;
  }

  absl::StatusOr<std::unique_ptr<Dataset>> MakeDataset(const std::vector<Tensor>& args) {
    const DatasetFn* fn = registry_.FindDataset(kNames.data);
    if (fn == nullptr) return absl::NotFoundError("no dataset");
    return (*fn)(/*worker_index=*/0, /*num_workers=*/1, args);
  }

  absl::StatusOr<std::vector<Tensor>> Call(const char* closure, Dataset* dataset,
                                           const std::vector<Tensor>& args) {
    const ClosureFn* fn = registry_.FindClosure(closure);
    if (fn == nullptr) return absl::NotFoundError("no closure");
    ClosureContext ctx;
    if (dataset != nullptr) ctx.datasets = {dataset};
    return (*fn)(ctx, args);
  }

  // The examples of every batch Next() yields, checking each batch's shapes.
  static int64_t CountExamples(Dataset* dataset, int64_t batch_size) {
    int64_t examples = 0;
    std::vector<Tensor> element;
    while (true) {
      absl::StatusOr<bool> more = dataset->Next(&element);
      EXPECT_TRUE(more.ok()) << more.status();
      if (!more.ok() || !*more) break;
      EXPECT_EQ(element.size(), 2u);
      const int64_t n = element[1].num_elements();
      EXPECT_LE(n, batch_size);
      EXPECT_EQ(element[0].shape, (Shape{n, 6}));
      for (int64_t y : element[1].ToVector<int64_t>()) EXPECT_LT(y, 3);
      examples += n;
    }
    return examples;
  }

  ClosureRegistry registry_;
  std::string dir_;
};

TEST_F(FashionMnistWorkerTest, Dataset_NoValidation_YieldsEveryTrainingExampleOnce) {
  auto dataset = MakeDataset(Args(/*batch_size=*/16, /*validation_fraction=*/0));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE((*dataset)->shared());
  EXPECT_EQ(CountExamples(dataset->get(), 16), 50);
}

TEST_F(FashionMnistWorkerTest, Dataset_ValidationFraction_HoldsOutTheSeedsExamples) {
  auto dataset = MakeDataset(Args(/*batch_size=*/16, /*validation_fraction=*/0.3f));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  int64_t held_out = 0;
  for (int64_t r = 0; r < 50; ++r) held_out += data::IsValidationExample(7, r, 0.3f) ? 1 : 0;
  ASSERT_GT(held_out, 0);
  EXPECT_EQ(CountExamples(dataset->get(), 16), 50 - held_out);
  // The held-out examples are the validation split (split 2): its rows end at held_out.
  EXPECT_THAT(Call(kNames.eval, dataset->get(),
                   {Tensor::Scalar<int64_t>(2), Tensor::Scalar<int64_t>(0),
                    Tensor::Scalar<int64_t>(held_out + 1), Tensor::Scalar<int64_t>(0)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("of the ", held_out, " examples"))));
}

TEST_F(FashionMnistWorkerTest, Dataset_ValidationDirectory_TrainsOnEveryExample) {
  const std::string validation = FreshTempDir("fashion_worker_validation");
  WriteSplit(validation, /*train=*/true, /*count=*/7);
  auto dataset = MakeDataset(Args(/*batch_size=*/16, /*validation_fraction=*/0.3f, validation));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(CountExamples(dataset->get(), 16), 50);
}

TEST_F(FashionMnistWorkerTest, Dataset_LabelOverTheClasses_InvalidArgumentNamingTheDataset) {
  EXPECT_THAT(MakeDataset(Args(/*batch_size=*/16, /*validation_fraction=*/0, "", /*pixels=*/6,
                               /*classes=*/2)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("toy/data: label 2 but the network has 2 classes")));
}

TEST_F(FashionMnistWorkerTest, Dataset_ImagesTheNetworkDoesNotTake_NetworksError) {
  EXPECT_THAT(MakeDataset(Args(/*batch_size=*/16, /*validation_fraction=*/0, "", /*pixels=*/5)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("toy/data: not 5 pixels")));
}

TEST_F(FashionMnistWorkerTest, Dataset_EveryExampleHeldOut_InvalidArgument) {
  EXPECT_THAT(
      MakeDataset(Args(/*batch_size=*/16, /*validation_fraction=*/0.9999999f)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("toy/data: no training examples")));
}

TEST_F(FashionMnistWorkerTest, Dataset_BatchSizeZero_InvalidArgument) {
  EXPECT_THAT(MakeDataset(Args(/*batch_size=*/0, /*validation_fraction=*/0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("toy/data: batch size 0")));
}

TEST_F(FashionMnistWorkerTest, Dataset_NoData_NotFoundNamingTheFile) {
  std::vector<Tensor> args = Args(/*batch_size=*/16, /*validation_fraction=*/0);
  args[0] = Tensor::String(FreshTempDir("fashion_worker_empty"));
  EXPECT_THAT(MakeDataset(args),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(data::kTrainImagesFile)));
}

TEST_F(FashionMnistWorkerTest, Closures_WithoutTheDataset_InvalidArgumentNamingIt) {
  EXPECT_THAT(Call(kNames.train, nullptr, {Tensor::Scalar<int64_t>(0), Tensor::Scalar<int64_t>(0)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("toy/train takes the toy/data resource")));
  EXPECT_THAT(Call(kNames.eval, nullptr,
                   {Tensor::Scalar<int64_t>(0), Tensor::Scalar<int64_t>(0),
                    Tensor::Scalar<int64_t>(1), Tensor::Scalar<int64_t>(0)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("toy/eval takes the toy/data resource")));
}

TEST_F(FashionMnistWorkerTest, Closures_BadArguments_InvalidArgument) {
  auto dataset = MakeDataset(Args(/*batch_size=*/16, /*validation_fraction=*/0));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_THAT(
      Call(kNames.train, dataset->get(), {Tensor::Scalar<int64_t>(-1), Tensor::Scalar<int64_t>(0)}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("toy/train: step -1 < 0")));
  auto eval = [&](int64_t split, int64_t begin, int64_t end, int64_t averaged) {
    return Call(kNames.eval, dataset->get(),
                {Tensor::Scalar<int64_t>(split), Tensor::Scalar<int64_t>(begin),
                 Tensor::Scalar<int64_t>(end), Tensor::Scalar<int64_t>(averaged)});
  };
  EXPECT_THAT(eval(/*split=*/3, 0, 1, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("toy/eval: split 3"), HasSubstr("2 (validation)"))));
  EXPECT_THAT(eval(/*split=*/0, 5, 11, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rows [5, 11) are not a nonempty range of the 10 examples")));
  EXPECT_THAT(
      eval(/*split=*/0, 0, 1, /*averaged=*/-1),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("toy/eval: averaged_steps -1 < 0")));
  // Good arguments reach the ps: the fake network finds no variables there.
  EXPECT_THAT(eval(/*split=*/1, 0, 50, 0), StatusIs(absl::StatusCode::kNotFound, "no ps"));
}

}  // namespace
}  // namespace pstrain
