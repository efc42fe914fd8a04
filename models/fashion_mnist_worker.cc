#include "models/fashion_mnist_worker.h"

#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "models/batches.h"
#include "worker/dense_turns.h"

namespace pstrain {
namespace {

using data::ImageSplit;

// The three splits a worker holds.
struct FashionSplits {
  ImageSplit train;
  ImageSplit validation;
  ImageSplit test;
};

// Everything a worker needs: the data, the network, the batches, and the turns its training
// steps take from the pull to the push (worker/dense_turns.h: every weight is dense here).
// Thread-safe (the data and the network are read-only; the cursor of Next() and the turns lock
// themselves), so closures share it.
class FashionResource : public Dataset {
 public:
  FashionResource(FashionSplits splits, std::unique_ptr<const FashionNet> net,
                  ReplicaGroup* replicas, int64_t batch_size, uint64_t seed,
                  DenseTurnsOptions turns)
      : splits_(std::move(splits)),
        net_(std::move(net)),
        replicas_(replicas),
        batches_(splits_.train.size(), batch_size, seed),
        first_epoch_(batches_.steps_per_epoch()),
        turns_(turns) {}

  // The training examples in the order of the first epoch, one batch per element: images
  // (float32, FashionNet::InputShape) and labels (int64 [batch]).
  absl::StatusOr<bool> Next(std::vector<Tensor>* element) override {
    const std::optional<int64_t> step = first_epoch_.Next();
    if (!step.has_value()) return false;
    const std::vector<int64_t> rows = batches_.Batch(*step);
    std::vector<float> x;
    std::vector<int32_t> labels;
    data::GatherImages(splits_.train, rows, &x, &labels);
    const int64_t n = static_cast<int64_t>(rows.size());
    *element = {Tensor::FromVector(x, net_->InputShape(n)),
                Tensor::FromVector(std::vector<int64_t>(labels.begin(), labels.end()))};
    return true;
  }
  bool shared() const override { return true; }

  const ImageSplit& train() const { return splits_.train; }
  const ImageSplit& validation() const { return splits_.validation; }
  const ImageSplit& test() const { return splits_.test; }
  const FashionNet& net() const { return *net_; }
  // Where the steps compute (models/devices.h).
  ReplicaGroup* replicas() const { return replicas_; }
  EpochBatches& batches() { return batches_; }

  DenseTurns& turns() { return turns_; }

 private:
  const FashionSplits splits_;
  const std::unique_ptr<const FashionNet> net_;
  ReplicaGroup* const replicas_;
  EpochBatches batches_;
  FirstEpochSteps first_epoch_;
  DenseTurns turns_;
};

absl::StatusOr<FashionResource*> ResourceOf(ClosureContext& ctx, const FashionMnistNames& names,
                                            const char* closure) {
  auto* res = ctx.datasets.size() == 1 ? dynamic_cast<FashionResource*>(ctx.datasets[0]) : nullptr;
  if (res == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(closure, " takes the ", names.data, " resource"));
  }
  return res;
}

// Args: int64 step, int64 average (1: add the weights the step pulled into the averages).
// Outputs: the batch's mean loss (float32), its examples (int64).
absl::StatusOr<std::vector<Tensor>> TrainStep(const FashionMnistNames& names, ClosureContext& ctx,
                                              absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t step, IntArg(args, 0, names.train));
  ASSIGN_OR_RETURN(int64_t average, IntArg(args, 1, names.train));
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(names.train, ": step ", step, " < 0"));
  }
  ASSIGN_OR_RETURN(FashionResource * res, ResourceOf(ctx, names, names.train));
  const FashionNet& net = res->net();
  ASSIGN_OR_RETURN(std::vector<FlatVariable> vars, net.FindVariables(ctx.ps, names.weights));
  std::vector<FlatVariable> sums;
  if (average != 0) {
    ASSIGN_OR_RETURN(sums, net.FindVariables(ctx.ps, names.averages));
  }
  // This worker's share of the batch under a synchronous strategy (models/batches.h); all of it
  // under the parameter-server strategy.
  const std::vector<int64_t> rows =
      ReplicaShare(res->batches().Batch(step), ctx.replica_index, ctx.num_replicas);
  std::vector<float> x;
  std::vector<int32_t> labels;
  data::GatherImages(res->train(), rows, &x, &labels);
  // Uninitialized: the pull and the backward pass overwrite every float.
  std::unique_ptr<float[]> params(new float[net.num_params()]);
  std::unique_ptr<float[]> grads(new float[net.num_params()]);
  // From the pull to the push.
  DenseTurn turn = res->turns().Take(step + 1, ctx.steps_in_order);
  RETURN_IF_ERROR(PullFlat(vars, params.get(), turn.cache()));
  const int64_t n = static_cast<int64_t>(rows.size());
  ASSIGN_OR_RETURN(float loss, net.ForwardBackward(res->replicas(), params.get(), n, x.data(),
                                                   labels.data(), grads.get()));
  // The gradients and the averages' sums travel in one request per ps task, with the step (the
  // learning-rate schedule's argument; 1-based on the wire).
  UpdateBatch update;
  update.set_step(step + 1);
  RETURN_IF_ERROR(AddFlatOps(vars, UpdateOp::APPLY_GRADIENT, grads.get(), &update, turn.cache()));
  RETURN_IF_ERROR(AddFlatOps(sums, UpdateOp::ASSIGN_ADD, params.get(), &update));
  const float one = 1.0f;
  if (average != 0) {
    ASSIGN_OR_RETURN(ShardedVariable count, ctx.ps->Variable(names.average_count));
    RETURN_IF_ERROR(update.AddDense(count, UpdateOp::ASSIGN_ADD,
                                    absl::string_view(reinterpret_cast<const char*>(&one), 4)));
  }
  RETURN_IF_ERROR(update.Run([&turn] { turn.Release(); }));
  return std::vector<Tensor>{Tensor::Scalar<float>(loss), Tensor::Scalar<int64_t>(n)};
}

// Args: int64 split (0: test, 1: train, 2: validation), begin, end, averaged_steps (0: evaluate
// the trained weights; n > 0: the averages, i.e. the sums over n steps divided by n). Outputs over
// examples [begin, end): the loss sum (float32), the correct predictions and the examples (int64).
absl::StatusOr<std::vector<Tensor>> EvalChunk(const FashionMnistNames& names, ClosureContext& ctx,
                                              absl::Span<const Tensor> args) {
  const char* const closure = names.eval;
  ASSIGN_OR_RETURN(int64_t split_index, IntArg(args, 0, closure));
  ASSIGN_OR_RETURN(int64_t begin, IntArg(args, 1, closure));
  ASSIGN_OR_RETURN(int64_t end, IntArg(args, 2, closure));
  ASSIGN_OR_RETURN(int64_t averaged_steps, IntArg(args, 3, closure));
  if (averaged_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(closure, ": averaged_steps ", averaged_steps, " < 0"));
  }
  ASSIGN_OR_RETURN(FashionResource * res, ResourceOf(ctx, names, closure));
  if (split_index < 0 || split_index > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        closure, ": split ", split_index, " is not 0 (test), 1 (train) or 2 (validation)"));
  }
  const ImageSplit& split = split_index == 0   ? res->test()
                            : split_index == 1 ? res->train()
                                               : res->validation();
  if (begin < 0 || end <= begin || end > split.size()) {
    return absl::InvalidArgumentError(absl::StrCat(closure, ": rows [", begin, ", ", end,
                                                   ") are not a nonempty range of the ",
                                                   split.size(), " examples"));
  }
  const FashionNet& net = res->net();
  ASSIGN_OR_RETURN(std::vector<FlatVariable> vars,
                   net.FindVariables(ctx.ps, averaged_steps > 0 ? names.averages : names.weights));
  std::vector<int64_t> rows(end - begin);
  for (int64_t k = begin; k < end; ++k) rows[k - begin] = k;
  std::vector<float> x;
  std::vector<int32_t> labels;
  data::GatherImages(split, rows, &x, &labels);
  std::unique_ptr<float[]> params(new float[net.num_params()]);
  RETURN_IF_ERROR(PullFlat(vars, params.get()));
  if (averaged_steps > 0) {
    const float scale = 1.0f / static_cast<float>(averaged_steps);
    for (int64_t i = 0; i < net.num_params(); ++i) params[i] *= scale;
  }
  ASSIGN_OR_RETURN(FashionEvalSums sums, net.Evaluate(res->replicas(), params.get(), end - begin,
                                                      x.data(), labels.data()));
  return std::vector<Tensor>{Tensor::Scalar<float>(static_cast<float>(sums.loss_sum)),
                             Tensor::Scalar<int64_t>(sums.correct),
                             Tensor::Scalar<int64_t>(end - begin)};
}

// The splits of `dir`: its training examples (less the validation examples the seed picks, when
// `validation_dir` is empty), those of `validation_dir`'s training files, and its test examples.
// Errors: the reader's.
absl::StatusOr<FashionSplits> ReadSplits(const std::string& dir, uint64_t seed,
                                         double validation_fraction,
                                         const std::string& validation_dir) {
  FashionSplits s;
  ASSIGN_OR_RETURN(s.train,
                   data::ReadImageSplit(dir, data::kTrainImagesFile, data::kTrainLabelsFile));
  ASSIGN_OR_RETURN(s.test, data::ReadImageSplit(dir, data::kTestImagesFile, data::kTestLabelsFile));
  if (validation_dir.empty()) {
    data::SplitOffValidation(seed, validation_fraction, &s.train, &s.validation);
  } else {
    ASSIGN_OR_RETURN(s.validation, data::ReadImageSplit(validation_dir, data::kTrainImagesFile,
                                                        data::kTrainLabelsFile));
  }
  return s;
}

// OK when every split's images and labels fit `net` and there are training examples. Errors:
// kInvalidArgument naming `dataset`.
absl::Status CheckSplits(const FashionSplits& s, const FashionNet& net, const char* dataset) {
  for (const ImageSplit* split : {&s.train, &s.validation, &s.test}) {
    RETURN_IF_ERROR(net.CheckImages(*split, dataset));
  }
  for (const ImageSplit* split : {&s.train, &s.validation, &s.test}) {
    for (int32_t y : split->labels) {
      if (y >= net.classes()) {
        return absl::InvalidArgumentError(absl::StrCat(
            dataset, ": label ", y, " but the network has ", net.classes(), " classes"));
      }
    }
  }
  if (s.train.size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(dataset, ": no training examples"));
  }
  return absl::OkStatus();
}

// The dataset: the shared arguments (kFashionMnistNetArgs of them, FashionMnistDataArgs), then the
// network's (read by `make_net`).
absl::StatusOr<std::unique_ptr<Dataset>> MakeResource(const FashionMnistNames& names,
                                                      const FashionNetFactory& make_net,
                                                      ReplicaGroups* replica_groups,
                                                      absl::Span<const Tensor> args) {
  const char* const dataset = names.data;
  ASSIGN_OR_RETURN(std::string dir, StringArg(args, 0, dataset));
  ASSIGN_OR_RETURN(int64_t seed, IntArg(args, 1, dataset));
  ASSIGN_OR_RETURN(int64_t batch_size, IntArg(args, 2, dataset));
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(dataset, ": batch size ", batch_size));
  }
  ASSIGN_OR_RETURN(int64_t dense_turns, IntArg(args, 3, dataset));
  if (dense_turns < 0) {
    return absl::InvalidArgumentError(absl::StrCat(dataset, ": dense_turns ", dense_turns, " < 0"));
  }
  DenseTurnsOptions turns;
  turns.turns = static_cast<int>(dense_turns);
  ASSIGN_OR_RETURN(double validation_fraction, FloatArg(args, 4, dataset));
  ASSIGN_OR_RETURN(std::string validation_dir, StringArg(args, 5, dataset));
  ASSIGN_OR_RETURN(WorkerDevices devices, DevicesFromArgs(args, 6, dataset));
  ASSIGN_OR_RETURN(std::unique_ptr<FashionNet> net, make_net(args));
  ASSIGN_OR_RETURN(FashionSplits splits, ReadSplits(dir, static_cast<uint64_t>(seed),
                                                    validation_fraction, validation_dir));
  RETURN_IF_ERROR(CheckSplits(splits, *net, dataset));
  ASSIGN_OR_RETURN(ReplicaGroup * replicas, replica_groups->Get(devices));
  return std::unique_ptr<Dataset>(new FashionResource(std::move(splits), std::move(net), replicas,
                                                      batch_size, static_cast<uint64_t>(seed),
                                                      turns));
}

}  // namespace

std::vector<Tensor> FashionMnistDataArgs(const std::string& data_dir, uint64_t seed,
                                         int64_t batch_size, int64_t dense_turns,
                                         float validation_fraction,
                                         const std::string& validation_dir,
                                         const WorkerDevices& devices) {
  std::vector<Tensor> args = {Tensor::String(data_dir),
                              Tensor::Scalar<int64_t>(static_cast<int64_t>(seed)),
                              Tensor::Scalar<int64_t>(batch_size),
                              Tensor::Scalar<int64_t>(dense_turns),
                              Tensor::Scalar<float>(validation_fraction),
                              Tensor::String(validation_dir)};
  for (Tensor& t : DeviceArgs(devices)) args.push_back(std::move(t));
  return args;
}

absl::Status RegisterFashionMnistModel(const FashionMnistNames& names, FashionNetFactory make_net,
                                       ClosureRegistry* registry,
                                       std::shared_ptr<ReplicaGroups> replica_groups) {
  RETURN_IF_ERROR(registry->RegisterClosure(
      names.train, [names](ClosureContext& ctx, absl::Span<const Tensor> args) {
        return TrainStep(names, ctx, args);
      }));
  RETURN_IF_ERROR(registry->RegisterClosure(
      names.eval, [names](ClosureContext& ctx, absl::Span<const Tensor> args) {
        return EvalChunk(names, ctx, args);
      }));
  return registry->RegisterDataset(
      names.data, [names, make_net = std::move(make_net), replica_groups](
                      int /*worker_index*/, int /*num_workers*/, absl::Span<const Tensor> args) {
        return MakeResource(names, make_net, replica_groups.get(), args);
      });
}

}  // namespace pstrain
