#include "models/fashion_mnist_cnn.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "models/batches.h"
#include "models/conv_net.h"
#include "models/data/image_splits.h"
#include "models/devices.h"
#include "models/flat_params.h"
#include "ps/sharded_variable.h"
#include "worker/device/device.h"

namespace pstrain {
namespace {

using data::ImageSplit;

constexpr char kTrain[] = "fashion_mnist_cnn/train";
constexpr char kEval[] = "fashion_mnist_cnn/eval";
constexpr char kData[] = "fashion_mnist_cnn/data";
// Examples per evaluation closure.
constexpr int64_t kEvalChunk = 1000;

// The variables: the trained weights are "cnn/<param>", their sums over the averaging window
// "cnn/avg/<param>", in ConvNet::Param order; "cnn/avg/count" counts the steps the sums hold
// (float32 [1]).
constexpr char kWeights[] = "cnn/";
constexpr char kAverages[] = "cnn/avg/";
constexpr char kAverageCount[] = "cnn/avg/count";
constexpr std::array<const char*, ConvNet::kNumParams> kParamNames = {
    "conv/kernel", "conv/bias", "dense1/kernel", "dense1/bias", "dense2/kernel", "dense2/bias"};
std::string VariableName(const char* prefix, int p) { return absl::StrCat(prefix, kParamNames[p]); }

// Everything a worker needs: the data, the network, the batches, and the slots that bound its
// concurrent training steps. Thread-safe (the data and the network are read-only; the cursor of
// Next() and the slots are guarded by mutexes), so closures share it.
class CnnResource : public Dataset {
 public:
  // `steps_at_once`: training steps that may run at once (0: no limit).
  CnnResource(ImageSplit train, ImageSplit validation, ImageSplit test, ConvNet net,
              ReplicaGroup* replicas, int64_t batch_size, uint64_t seed, int64_t steps_at_once)
      : train_(std::move(train)),
        validation_(std::move(validation)),
        test_(std::move(test)),
        net_(std::move(net)),
        replicas_(replicas),
        batches_(train_.size(), batch_size, seed),
        free_step_slots_(steps_at_once > 0 ? steps_at_once
                                           : std::numeric_limits<int64_t>::max()) {}

  // The training examples in the order of the first epoch, one batch per element: images
  // (float32 [batch, height, width, channels]) and labels (int64 [batch]).
  absl::StatusOr<bool> Next(std::vector<Tensor>* element) override {
    int64_t step;
    {
      absl::MutexLock lock(&mu_);
      if (next_step_ >= batches_.steps_per_epoch()) return false;
      step = next_step_++;
    }
    const std::vector<int64_t> rows = batches_.Batch(step);
    std::vector<float> x;
    std::vector<int32_t> labels;
    data::GatherImages(train_, rows, &x, &labels);
    const ConvNetShape& s = net_.shape();
    const int64_t n = static_cast<int64_t>(rows.size());
    *element = {Tensor::FromVector(x, Shape{n, s.height, s.width, s.channels}),
                Tensor::FromVector(std::vector<int64_t>(labels.begin(), labels.end()))};
    return true;
  }
  bool shared() const override { return true; }

  const ImageSplit& train() const { return train_; }
  const ImageSplit& validation() const { return validation_; }
  const ImageSplit& test() const { return test_; }
  const ConvNet& net() const { return net_; }
  // Where the steps compute (models/devices.h).
  ReplicaGroup* replicas() const { return replicas_; }
  EpochBatches& batches() { return batches_; }

  // Holds one of the training-step slots from construction to destruction (waits for one).
  class StepSlot {
   public:
    explicit StepSlot(CnnResource* res) : res_(res) {
      absl::MutexLock lock(&res_->slots_mu_);
      res_->slots_mu_.Await(absl::Condition(
          +[](int64_t* free) { return *free > 0; }, &res_->free_step_slots_));
      --res_->free_step_slots_;
    }
    ~StepSlot() {
      absl::MutexLock lock(&res_->slots_mu_);
      ++res_->free_step_slots_;
    }
    StepSlot(const StepSlot&) = delete;
    StepSlot& operator=(const StepSlot&) = delete;

   private:
    CnnResource* const res_;
  };

 private:
  const ImageSplit train_;
  const ImageSplit validation_;
  const ImageSplit test_;
  const ConvNet net_;
  ReplicaGroup* const replicas_;
  EpochBatches batches_;
  absl::Mutex mu_;
  int64_t next_step_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex slots_mu_;
  int64_t free_step_slots_ ABSL_GUARDED_BY(slots_mu_);
};

absl::StatusOr<CnnResource*> ResourceOf(ClosureContext& ctx, const char* closure) {
  auto* res = ctx.datasets.size() == 1 ? dynamic_cast<CnnResource*>(ctx.datasets[0]) : nullptr;
  if (res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(closure, " takes the ", kData, " resource"));
  }
  return res;
}

// The network's variables named with `prefix` (kWeights or kAverages), each with its place in the
// parameter buffer, checked against the network's shapes. Errors: kNotFound (not created),
// kFailedPrecondition (created with other shapes).
absl::StatusOr<std::vector<FlatVariable>> FindVariables(PsConnection* ps, const ConvNet& net,
                                                        const char* prefix) {
  std::vector<FlatVariable> vars;
  for (int p = 0; p < ConvNet::kNumParams; ++p) {
    const auto param = static_cast<ConvNet::Param>(p);
    const std::string name = VariableName(prefix, p);
    ASSIGN_OR_RETURN(ShardedVariable v, ps->Variable(name));
    if (v.shape() != net.param_shape(param) || v.dtype() != DT_FLOAT32) {
      return absl::FailedPreconditionError(absl::StrCat(
          name, " on the ps has shape [", absl::StrJoin(v.shape(), ","), "], expected float32 [",
          absl::StrJoin(net.param_shape(param), ","), "] for the network ", net.ToString()));
    }
    vars.push_back({std::move(v), net.param_offset(param)});
  }
  return vars;
}

// Args: int64 step, int64 average (1: add the weights the step pulled into the averages).
// Outputs: the batch's mean loss (float32), its examples (int64).
absl::StatusOr<std::vector<Tensor>> TrainStep(ClosureContext& ctx, absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t step, IntArg(args, 0, kTrain));
  ASSIGN_OR_RETURN(int64_t average, IntArg(args, 1, kTrain));
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat(kTrain, ": step ", step, " < 0"));
  ASSIGN_OR_RETURN(CnnResource * res, ResourceOf(ctx, kTrain));
  const ConvNet& net = res->net();
  ASSIGN_OR_RETURN(std::vector<FlatVariable> vars, FindVariables(ctx.ps, net, kWeights));
  std::vector<FlatVariable> sums;
  if (average != 0) {
    ASSIGN_OR_RETURN(sums, FindVariables(ctx.ps, net, kAverages));
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
  CnnResource::StepSlot slot(res);  // from the pull to the push
  RETURN_IF_ERROR(PullFlat(vars, params.get()));
  const int64_t n = static_cast<int64_t>(rows.size());
  ASSIGN_OR_RETURN(float loss, net.ForwardBackward(res->replicas(), params.get(), n, x.data(),
                                                   labels.data(), grads.get()));
  // The gradients and the averages' sums travel in one request per ps task, with the step (the
  // learning-rate schedule's argument; 1-based on the wire).
  UpdateBatch update;
  update.set_step(step + 1);
  RETURN_IF_ERROR(AddFlatOps(vars, UpdateOp::APPLY_GRADIENT, grads.get(), &update));
  RETURN_IF_ERROR(AddFlatOps(sums, UpdateOp::ASSIGN_ADD, params.get(), &update));
  const float one = 1.0f;
  if (average != 0) {
    ASSIGN_OR_RETURN(ShardedVariable count, ctx.ps->Variable(kAverageCount));
    RETURN_IF_ERROR(update.AddDense(count, UpdateOp::ASSIGN_ADD,
                                    absl::string_view(reinterpret_cast<const char*>(&one), 4)));
  }
  RETURN_IF_ERROR(update.Run());
  return std::vector<Tensor>{Tensor::Scalar<float>(loss), Tensor::Scalar<int64_t>(n)};
}

// Args: int64 split (0: test, 1: train, 2: validation), begin, end, averaged_steps (0: evaluate
// the trained weights; n > 0: the averages, i.e. the sums over n steps divided by n). Outputs over
// examples [begin, end): the loss sum (float32), the correct predictions and the examples (int64).
absl::StatusOr<std::vector<Tensor>> EvalChunk(ClosureContext& ctx, absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t split_index, IntArg(args, 0, kEval));
  ASSIGN_OR_RETURN(int64_t begin, IntArg(args, 1, kEval));
  ASSIGN_OR_RETURN(int64_t end, IntArg(args, 2, kEval));
  ASSIGN_OR_RETURN(int64_t averaged_steps, IntArg(args, 3, kEval));
  if (averaged_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kEval, ": averaged_steps ", averaged_steps, " < 0"));
  }
  ASSIGN_OR_RETURN(CnnResource * res, ResourceOf(ctx, kEval));
  if (split_index < 0 || split_index > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        kEval, ": split ", split_index, " is not 0 (test), 1 (train) or 2 (validation)"));
  }
  const ImageSplit& split = split_index == 0   ? res->test()
                            : split_index == 1 ? res->train()
                                               : res->validation();
  if (begin < 0 || end <= begin || end > split.size()) {
    return absl::InvalidArgumentError(absl::StrCat(kEval, ": rows [", begin, ", ", end,
                                                   ") are not a nonempty range of the ",
                                                   split.size(), " examples"));
  }
  const ConvNet& net = res->net();
  ASSIGN_OR_RETURN(std::vector<FlatVariable> vars,
                   FindVariables(ctx.ps, net, averaged_steps > 0 ? kAverages : kWeights));
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
  ASSIGN_OR_RETURN(ConvNetEvalSums sums, net.Evaluate(res->replicas(), params.get(), end - begin,
                                                      x.data(), labels.data()));
  return std::vector<Tensor>{Tensor::Scalar<float>(static_cast<float>(sums.loss_sum)),
                             Tensor::Scalar<int64_t>(sums.correct),
                             Tensor::Scalar<int64_t>(end - begin)};
}

struct CnnConfig {
  std::string data_dir = "data/fashion_mnist";
  int epochs = 12;
  int64_t max_steps = 0;
  int64_t batch_size = 32;
  double learning_rate = 0;  // set from the optimizer's default when not given
  RelativeSchedule lr_schedule;
  ConvNetShape shape;  // height, width, channels and classes come from the data
  int64_t shards = 0;  // 0: one per ps task
  int64_t train_eval_examples = 10000;
  int64_t steps_per_worker = 1;  // 0: no limit
  double average_epochs = 3;     // 0: evaluate the trained weights only
  double validation_fraction = 0.1;
  std::string validation_dir;  // "": split off validation_fraction of the training examples
  OptimizerDef::Kind optimizer = OptimizerDef::SGD;
  uint64_t seed = 1;
  WorkerDevices devices;
};

// Sums of one evaluation over a split.
struct EvalTotals {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t count = 0;
};

class FashionMnistCnn final : public Model {
 public:
  explicit FashionMnistCnn(CnnConfig config) : config_(std::move(config)) {}

  std::string name() const override { return kFashionMnistCnnModel; }

  absl::Status Setup(ClusterCoordinator* coordinator) override {
    // The coordinator needs the counts, the image size and the classes, not the training images.
    ASSIGN_OR_RETURN(std::vector<int32_t> train_labels,
                     data::ReadImageLabels(data::DataFile(config_.data_dir,
                                                          data::kTrainLabelsFile)));
    ASSIGN_OR_RETURN(ImageSplit test, data::ReadImageSplit(config_.data_dir,
                                                           data::kTestImagesFile,
                                                           data::kTestLabelsFile));
    num_train_ = 0;
    num_validation_ = 0;
    if (config_.validation_dir.empty()) {
      for (int64_t r = 0; r < static_cast<int64_t>(train_labels.size()); ++r) {
        ++(data::IsValidationExample(config_.seed, r, config_.validation_fraction)
               ? num_validation_
               : num_train_);
      }
    } else {
      num_train_ = static_cast<int64_t>(train_labels.size());
      ASSIGN_OR_RETURN(std::vector<int32_t> labels,
                       data::ReadImageLabels(data::DataFile(config_.validation_dir,
                                                            data::kTrainLabelsFile)));
      num_validation_ = static_cast<int64_t>(labels.size());
    }
    num_test_ = test.size();
    if (num_train_ == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(data::DataFile(config_.data_dir, data::kTrainLabelsFile),
                       " has no training examples"));
    }
    int32_t max_label = 0;
    for (int32_t y : train_labels) max_label = std::max(max_label, y);
    for (int32_t y : test.labels) max_label = std::max(max_label, y);
    ConvNetShape shape = config_.shape;
    shape.height = test.images.rows;
    shape.width = test.images.cols;
    shape.channels = 1;
    shape.classes = max_label + 1;
    ASSIGN_OR_RETURN(ConvNet net, ConvNet::Create(shape));
    net_ = std::make_unique<ConvNet>(std::move(net));

    steps_per_epoch_ = (num_train_ + config_.batch_size - 1) / config_.batch_size;
    total_steps_ = steps_per_epoch_ * config_.epochs;
    if (config_.max_steps > 0) total_steps_ = std::min(total_steps_, config_.max_steps);
    train_eval_examples_ = std::min(config_.train_eval_examples, num_train_);
    averaged_steps_ = std::min<int64_t>(
        total_steps_,
        static_cast<int64_t>(std::llround(config_.average_epochs * steps_per_epoch_)));

    OptimizerDef optimizer;
    optimizer.set_kind(config_.optimizer);
    optimizer.set_learning_rate(config_.learning_rate);
    ApplyLrSchedule(config_.lr_schedule, &optimizer);
    const int shards =
        static_cast<int>(config_.shards > 0 ? config_.shards : coordinator->ps()->num_ps());
    // `trained`: the weights (initialized, with `optimizer`); else their sums (zeros, no
    // optimizer).
    auto create = [&](const char* prefix, bool trained) -> absl::Status {
      for (int p = 0; p < ConvNet::kNumParams; ++p) {
        const auto param = static_cast<ConvNet::Param>(p);
        const std::vector<int64_t>& dims = net_->param_shape(param);
        VariableSpec v;
        v.name = VariableName(prefix, p);
        v.shape = dims;
        if (param == ConvNet::kW1) {  // the one large matrix: split over the ps tasks
          v.partitioner.kind = PartitionerKind::kFixed;
          v.partitioner.num_shards = shards;
        }
        if (trained) {
          if (dims.size() > 1) {
            // Glorot uniform (Keras' default for dense and convolution kernels): fan in and out
            // are the input and output units times the window (the leading dimensions).
            int64_t window = 1;
            for (size_t d = 0; d + 2 < dims.size(); ++d) window *= dims[d];
            const double fan_in = static_cast<double>(window * dims[dims.size() - 2]);
            const double fan_out = static_cast<double>(window * dims.back());
            const double limit = std::sqrt(6.0 / (fan_in + fan_out));
            v.initializer.set_kind(InitializerDef::UNIFORM);
            v.initializer.set_minval(-limit);
            v.initializer.set_maxval(limit);
            v.initializer.set_seed(config_.seed * 1000 + p);
          }
          v.optimizer = optimizer;
        }
        RETURN_IF_ERROR(coordinator->variables()->Create(v).status());
      }
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(create(kWeights, /*trained=*/true));
    if (averaged_steps_ > 0) {
      RETURN_IF_ERROR(create(kAverages, /*trained=*/false));
      VariableSpec count;
      count.name = kAverageCount;
      count.shape = {1};
      RETURN_IF_ERROR(coordinator->variables()->Create(count).status());
    }

    std::vector<Tensor> args = {
        Tensor::String(config_.data_dir),
        Tensor::Scalar<int64_t>(static_cast<int64_t>(config_.seed)),
        Tensor::Scalar<int64_t>(config_.batch_size),
        Tensor::Scalar<int64_t>(config_.steps_per_worker),
        Tensor::Scalar<float>(static_cast<float>(config_.validation_fraction)),
        Tensor::String(config_.validation_dir)};
    for (Tensor& t : DeviceArgs(config_.devices)) args.push_back(std::move(t));
    for (int64_t v : {shape.height, shape.width, shape.channels, shape.filters, shape.kernel,
                      shape.pool, shape.hidden, shape.classes}) {
      args.push_back(Tensor::Scalar<int64_t>(v));
    }
    ASSIGN_OR_RETURN(dataset_, coordinator->CreatePerWorkerDataset(kData, std::move(args)));
    return absl::OkStatus();
  }

  int64_t total_steps() const override { return total_steps_; }
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }
  int64_t examples_per_step() const override { return config_.batch_size; }

  bool has_validation() const override { return num_validation_ > 0; }
  std::string validation_metric() const override { return "val_accuracy"; }
  // On the averaged weights once averaging has begun (the averages so far), else the trained ones.
  absl::StatusOr<ModelMetrics> Validate(ClusterCoordinator* coordinator) override {
    ASSIGN_OR_RETURN(int64_t averaged, AveragedSteps(coordinator));
    ModelMetrics m;
    RETURN_IF_ERROR(Score(coordinator, {{"val", num_validation_, 2, averaged, {}}}, &m));
    return m;
  }

  // The last averaged_steps_ steps add the weights they pulled into the averages' sums.
  absl::StatusOr<RemoteValue> ScheduleStep(ClusterCoordinator* coordinator, int64_t step) override {
    const int64_t average = step >= total_steps_ - averaged_steps_ ? 1 : 0;
    return coordinator->Schedule(
        kTrain, {Tensor::Scalar<int64_t>(step), Tensor::Scalar<int64_t>(average)}, {dataset_});
  }

  // With averaging, the test_* and train_* metrics are the averaged weights'; last_test_* are
  // the trained weights' as they ended. The averages are those the ps holds (cnn/avg/count steps'
  // worth: fewer when a best checkpoint from before the end was restored; none, and the trained
  // weights are evaluated, when it is from before the averaging began).
  absl::StatusOr<ModelMetrics> Evaluate(ClusterCoordinator* coordinator) override {
    ASSIGN_OR_RETURN(int64_t averaged, AveragedSteps(coordinator));
    std::vector<Run> runs = {{"test", num_test_, 0, averaged, {}},
                             {"train", train_eval_examples_, 1, averaged, {}}};
    if (averaged > 0) runs.push_back({"last_test", num_test_, 0, 0, {}});
    ModelMetrics m;
    RETURN_IF_ERROR(Score(coordinator, std::move(runs), &m));
    m.notes["network"] = net_->ToString();
    m.notes["parameters"] = absl::StrCat(net_->num_params());
    m.notes["train_examples"] = absl::StrCat(num_train_);
    m.notes["test_examples"] = absl::StrCat(num_test_);
    m.notes["train_eval_examples"] = absl::StrCat(train_eval_examples_);
    m.notes["averaged_steps"] = absl::StrCat(averaged);
    m.notes["validation_examples"] = absl::StrCat(num_validation_);
    return m;
  }

 private:
  // One evaluation over a split.
  struct Run {
    const char* metric_prefix;
    int64_t examples;
    int64_t split;           // 0 test, 1 train, 2 validation
    int64_t averaged_steps;  // 0: the trained weights
    std::vector<RemoteValue> values;
  };

  // The steps the averages' sums hold now (0 without averaging).
  absl::StatusOr<int64_t> AveragedSteps(ClusterCoordinator* coordinator) {
    if (averaged_steps_ == 0) return 0;
    ASSIGN_OR_RETURN(ShardedVariable count, coordinator->ps()->Variable(kAverageCount));
    ASSIGN_OR_RETURN(std::string bytes, count.ReadAll());
    float value = 0;
    if (bytes.size() != sizeof(value)) {
      return absl::InternalError(absl::StrCat(kAverageCount, ": ", bytes.size(), " bytes"));
    }
    std::memcpy(&value, bytes.data(), sizeof(value));
    return static_cast<int64_t>(std::llround(value));
  }

  // Each run's accuracy and loss into `m` ("<prefix>_accuracy", "<prefix>_loss").
  absl::Status Score(ClusterCoordinator* coordinator, std::vector<Run> runs, ModelMetrics* m) {
    // Schedule every chunk of every run before fetching any, so that every worker takes a share.
    for (Run& run : runs) {
      ASSIGN_OR_RETURN(run.values,
                       ScheduleChunks(coordinator, kEval, run.examples, kEvalChunk,
                                      [&run](int64_t begin, int64_t end) {
                                        return std::vector<Tensor>{
                                            Tensor::Scalar<int64_t>(run.split),
                                            Tensor::Scalar<int64_t>(begin),
                                            Tensor::Scalar<int64_t>(end),
                                            Tensor::Scalar<int64_t>(run.averaged_steps)};
                                      },
                                      dataset_));
    }
    for (const Run& run : runs) {
      if (run.examples == 0) continue;
      EvalTotals totals;
      for (const RemoteValue& v : run.values) {
        ASSIGN_OR_RETURN(std::vector<Tensor> out, v.Fetch());
        totals.loss_sum += out[0].scalar<float>();
        totals.correct += out[1].scalar<int64_t>();
        totals.count += out[2].scalar<int64_t>();
      }
      const std::string prefix = run.metric_prefix;
      m->values[prefix + "_accuracy"] =
          static_cast<double>(totals.correct) / static_cast<double>(totals.count);
      m->values[prefix + "_loss"] = totals.loss_sum / static_cast<double>(totals.count);
    }
    return absl::OkStatus();
  }

  const CnnConfig config_;
  std::unique_ptr<ConvNet> net_;
  int64_t num_train_ = 0;
  int64_t num_validation_ = 0;
  int64_t num_test_ = 0;
  int64_t train_eval_examples_ = 0;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  int64_t averaged_steps_ = 0;
  PerWorkerDataset dataset_;
};

// The worker's dataset: args are the data directory (string), seed, batch size, training steps at
// once (0: no limit) (int64), the validation fraction (float), the validation directory (string),
// the devices (DeviceArgs), then the network's height, width, channels, filters, kernel, pool,
// hidden units and classes (int64).
absl::StatusOr<std::unique_ptr<Dataset>> MakeResource(absl::Span<const Tensor> args,
                                                      ReplicaGroups* replica_groups) {
  ASSIGN_OR_RETURN(std::string dir, StringArg(args, 0, kData));
  ASSIGN_OR_RETURN(int64_t seed, IntArg(args, 1, kData));
  ASSIGN_OR_RETURN(int64_t batch_size, IntArg(args, 2, kData));
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kData, ": batch size ", batch_size));
  }
  ASSIGN_OR_RETURN(int64_t steps_at_once, IntArg(args, 3, kData));
  ASSIGN_OR_RETURN(double validation_fraction, FloatArg(args, 4, kData));
  ASSIGN_OR_RETURN(std::string validation_dir, StringArg(args, 5, kData));
  ASSIGN_OR_RETURN(WorkerDevices devices, DevicesFromArgs(args, 6, kData));
  constexpr size_t kShapeArgs = 8;
  if (args.size() != 8 + kShapeArgs) {
    return absl::InvalidArgumentError(
        absl::StrCat(kData, ": ", args.size(), " arguments, expected ", 8 + kShapeArgs));
  }
  std::array<int64_t, kShapeArgs> dims;
  for (size_t i = 0; i < kShapeArgs; ++i) {
    ASSIGN_OR_RETURN(dims[i], IntArg(args, 8 + i, kData));
  }
  ConvNetShape shape;
  shape.height = dims[0];
  shape.width = dims[1];
  shape.channels = dims[2];
  shape.filters = dims[3];
  shape.kernel = dims[4];
  shape.pool = dims[5];
  shape.hidden = dims[6];
  shape.classes = dims[7];
  ASSIGN_OR_RETURN(ConvNet net, ConvNet::Create(shape));
  ASSIGN_OR_RETURN(ImageSplit train,
                   data::ReadImageSplit(dir, data::kTrainImagesFile, data::kTrainLabelsFile));
  ASSIGN_OR_RETURN(ImageSplit test,
                   data::ReadImageSplit(dir, data::kTestImagesFile, data::kTestLabelsFile));
  ImageSplit validation;
  if (validation_dir.empty()) {
    data::SplitOffValidation(static_cast<uint64_t>(seed), validation_fraction, &train,
                             &validation);
  } else {
    ASSIGN_OR_RETURN(validation, data::ReadImageSplit(validation_dir, data::kTrainImagesFile,
                                                      data::kTrainLabelsFile));
  }
  for (const ImageSplit* s : {&train, &validation, &test}) {
    if (s->size() > 0 && (s->images.rows != shape.height || s->images.cols != shape.width)) {
      return absl::InvalidArgumentError(absl::StrCat(
          kData, ": images of ", s->images.rows, "x", s->images.cols,
          " pixels, but the network takes ", shape.height, "x", shape.width));
    }
    for (int32_t y : s->labels) {
      if (y >= shape.classes) {
        return absl::InvalidArgumentError(absl::StrCat(
            kData, ": label ", y, " but the network has ", shape.classes, " classes"));
      }
    }
  }
  if (train.size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(kData, ": no training examples"));
  }
  ASSIGN_OR_RETURN(ReplicaGroup * replicas, replica_groups->Get(devices));
  return std::unique_ptr<Dataset>(new CnnResource(
      std::move(train), std::move(validation), std::move(test), std::move(net), replicas,
      batch_size, static_cast<uint64_t>(seed), steps_at_once));
}

}  // namespace

absl::Status RegisterFashionMnistCnn(ClosureRegistry* registry,
                                     std::shared_ptr<ReplicaGroups> replica_groups) {
  RETURN_IF_ERROR(registry->RegisterClosure(kTrain, TrainStep));
  RETURN_IF_ERROR(registry->RegisterClosure(kEval, EvalChunk));
  return registry->RegisterDataset(
      kData,
      [replica_groups](int /*worker_index*/, int /*num_workers*/,
                       absl::Span<const Tensor> args) -> absl::StatusOr<std::unique_ptr<Dataset>> {
        return MakeResource(args, replica_groups.get());
      });
}

absl::StatusOr<std::unique_ptr<Model>> CreateFashionMnistCnn(const ModelOptions& options) {
  CnnConfig c;
  ExtraOptions extra(kFashionMnistCnnModel, options.extra);
  if (!options.data.empty()) c.data_dir = options.data;
  const std::string optimizer = extra.GetString("optimizer", "sgd");
  ASSIGN_OR_RETURN(c.shape.filters, extra.GetInt("filters", c.shape.filters));
  ASSIGN_OR_RETURN(c.shape.kernel, extra.GetInt("kernel", c.shape.kernel));
  ASSIGN_OR_RETURN(c.shape.pool, extra.GetInt("pool", c.shape.pool));
  ASSIGN_OR_RETURN(c.shape.hidden, extra.GetInt("hidden", c.shape.hidden));
  ASSIGN_OR_RETURN(c.shards, extra.GetInt("shards", 0));
  ASSIGN_OR_RETURN(c.train_eval_examples, extra.GetInt("train_eval_examples", 10000));
  ASSIGN_OR_RETURN(c.steps_per_worker, extra.GetInt("steps_per_worker", 1));
  ASSIGN_OR_RETURN(c.average_epochs, extra.GetDouble("average_epochs", c.average_epochs));
  RETURN_IF_ERROR(extra.Finish());
  double default_rate;
  if (optimizer == "sgd") {
    c.optimizer = OptimizerDef::SGD;
    default_rate = 0.05;
  } else if (optimizer == "momentum") {
    c.optimizer = OptimizerDef::MOMENTUM;
    default_rate = 0.01;
  } else if (optimizer == "adam") {
    c.optimizer = OptimizerDef::ADAM;
    default_rate = 0.001;
  } else if (optimizer == "adagrad") {
    c.optimizer = OptimizerDef::ADAGRAD;
    default_rate = 0.05;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(kFashionMnistCnnModel, ": optimizer=",
                                                   optimizer,
                                                   " is not one of sgd, momentum, adam, adagrad"));
  }
  c.learning_rate = options.learning_rate > 0 ? options.learning_rate : default_rate;
  c.lr_schedule = options.lr_schedule;
  if (options.epochs > 0) c.epochs = options.epochs;
  if (options.batch_size > 0) c.batch_size = options.batch_size;
  c.max_steps = options.max_steps;
  c.seed = options.seed;
  c.devices = options.devices;
  // Rounded to float as the workers get it (a float32 closure argument): the same split everywhere.
  c.validation_fraction = static_cast<float>(options.validation_fraction);
  c.validation_dir = options.validation_data;
  if (!(c.validation_fraction >= 0 && c.validation_fraction < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(kFashionMnistCnnModel,
                                                   ": validation_fraction ",
                                                   options.validation_fraction,
                                                   " is outside [0, 1)"));
  }
  struct Positive {
    const char* name;
    int64_t value;
  };
  for (const Positive& p : {Positive{"filters", c.shape.filters}, Positive{"kernel", c.shape.kernel},
                            Positive{"pool", c.shape.pool}, Positive{"hidden", c.shape.hidden}}) {
    if (p.value < 1 || p.value > (int64_t{1} << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(kFashionMnistCnnModel, ": ", p.name, "=",
                                                     p.value, " must be in [1, 2^20]"));
    }
  }
  struct NonNegative {
    const char* name;
    int64_t value;
  };
  for (const NonNegative& n : {NonNegative{"shards", c.shards},
                               NonNegative{"train_eval_examples", c.train_eval_examples},
                               NonNegative{"steps_per_worker", c.steps_per_worker}}) {
    if (n.value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kFashionMnistCnnModel, ": ", n.name, "=", n.value, " must be >= 0"));
    }
  }
  if (!(c.average_epochs >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFashionMnistCnnModel, ": average_epochs=", c.average_epochs, " must be >= 0"));
  }
  return std::unique_ptr<Model>(new FashionMnistCnn(std::move(c)));
}

}  // namespace pstrain
