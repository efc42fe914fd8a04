#include "models/fashion_mnist_mlp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "models/batches.h"
#include "models/data/idx_reader.h"
#include "models/dense_mlp.h"
#include "models/devices.h"
#include "ps/sharded_variable.h"
#include "worker/device/device.h"

namespace pstrain {
namespace {

constexpr char kTrain[] = "fashion_mnist_mlp/train";
constexpr char kEval[] = "fashion_mnist_mlp/eval";
constexpr char kData[] = "fashion_mnist_mlp/data";
constexpr char kTrainImages[] = "train-images-idx3-ubyte.gz";
constexpr char kTrainLabels[] = "train-labels-idx1-ubyte.gz";
constexpr char kTestImages[] = "t10k-images-idx3-ubyte.gz";
constexpr char kTestLabels[] = "t10k-labels-idx1-ubyte.gz";
// Examples per evaluation closure.
constexpr int64_t kEvalChunk = 1000;

std::string DataFile(const std::string& dir, const char* name) {
  return dir.empty() ? name : absl::StrCat(dir, "/", name);
}

// One split of the data: images (one byte per pixel) and their labels.
struct Split {
  data::IdxImages images;
  std::vector<int32_t> labels;
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t pixels() const { return images.rows * images.cols; }
};

absl::StatusOr<std::vector<int32_t>> ReadLabels(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, data::ReadIdxLabels(path));
  return std::vector<int32_t>(bytes.begin(), bytes.end());
}

absl::StatusOr<Split> ReadSplit(const std::string& dir, const char* images, const char* labels) {
  Split split;
  ASSIGN_OR_RETURN(split.images, data::ReadIdxImages(DataFile(dir, images)));
  ASSIGN_OR_RETURN(split.labels, ReadLabels(DataFile(dir, labels)));
  if (split.images.count != split.size()) {
    return absl::InvalidArgumentError(absl::StrCat(DataFile(dir, images), " has ",
                                                   split.images.count, " images but ",
                                                   DataFile(dir, labels), " has ", split.size(),
                                                   " labels"));
  }
  return split;
}

// A uniform double in [0, 1) from (seed, row): splitmix64. Picks the validation examples.
double HashUnit(uint64_t seed, uint64_t row) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + row + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}
constexpr uint64_t kValidationSalt = 0x7A11DA7E00000000ull;

// Whether training example `row` is held out for validation.
bool IsValidation(uint64_t seed, int64_t row, double fraction) {
  return HashUnit(seed ^ kValidationSalt, static_cast<uint64_t>(row)) < fraction;
}

// Moves the examples of `all` that IsValidation picks into `validation`.
void SplitOffValidation(uint64_t seed, double fraction, Split* all, Split* validation) {
  const int64_t pixels = all->pixels();
  Split train;
  train.images.rows = validation->images.rows = all->images.rows;
  train.images.cols = validation->images.cols = all->images.cols;
  for (int64_t r = 0; r < all->size(); ++r) {
    Split& to = IsValidation(seed, r, fraction) ? *validation : train;
    const uint8_t* in = all->images.pixels.data() + r * pixels;
    to.images.pixels.insert(to.images.pixels.end(), in, in + pixels);
    to.labels.push_back(all->labels[r]);
  }
  train.images.count = train.size();
  validation->images.count = validation->size();
  *all = std::move(train);
}

// Examples `rows` of `split` as float inputs in [0, 1] ([rows.size(), pixels]) and their labels.
void Gather(const Split& split, absl::Span<const int64_t> rows, std::vector<float>* x,
            std::vector<int32_t>* labels) {
  const int64_t pixels = split.pixels();
  x->resize(rows.size() * pixels);
  labels->resize(rows.size());
  constexpr float kScale = 1.0f / 255.0f;
  for (size_t k = 0; k < rows.size(); ++k) {
    const uint8_t* in = split.images.pixels.data() + rows[k] * pixels;
    float* out = x->data() + k * pixels;
    for (int64_t p = 0; p < pixels; ++p) out[p] = static_cast<float>(in[p]) * kScale;
    (*labels)[k] = split.labels[rows[k]];
  }
}

// The trained weights are "mlp/w{l+1}", "mlp/b{l+1}" for layer l (0-based); the sums of the
// weights over the averaging window are "mlp/avg/w{l+1}", "mlp/avg/b{l+1}".
constexpr char kWeights[] = "mlp/";
constexpr char kAverages[] = "mlp/avg/";
std::string WeightName(const char* prefix, int l) { return absl::StrCat(prefix, "w", l + 1); }
std::string BiasName(const char* prefix, int l) { return absl::StrCat(prefix, "b", l + 1); }
// How many steps' weights the averages' sums hold (float32 [1]).
constexpr char kAverageCount[] = "mlp/avg/count";

// Everything a worker needs: the data, the network, the batches, and the slots that bound its
// concurrent training steps. Thread-safe (the data and the network are read-only; the cursor of
// Next() and the slots are guarded by mutexes), so closures share it.
class FashionResource : public Dataset {
 public:
  // `steps_at_once`: training steps that may run at once (0: no limit).
  FashionResource(Split train, Split validation, Split test, DenseMlp mlp, ReplicaGroup* replicas,
                  int64_t batch_size, uint64_t seed, int64_t steps_at_once)
      : train_(std::move(train)),
        validation_(std::move(validation)),
        test_(std::move(test)),
        mlp_(std::move(mlp)),
        replicas_(replicas),
        batches_(train_.size(), batch_size, seed),
        free_step_slots_(steps_at_once > 0 ? steps_at_once
                                           : std::numeric_limits<int64_t>::max()) {}

  // The training examples in the order of the first epoch, one batch per element: images
  // (float32 [batch, pixels]) and labels (int64 [batch]).
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
    Gather(train_, rows, &x, &labels);
    const int64_t n = static_cast<int64_t>(rows.size());
    *element = {Tensor::FromVector(x, Shape{n, train_.pixels()}),
                Tensor::FromVector(std::vector<int64_t>(labels.begin(), labels.end()))};
    return true;
  }
  bool shared() const override { return true; }

  const Split& train() const { return train_; }
  const Split& test() const { return test_; }
  const Split& validation() const { return validation_; }
  const DenseMlp& mlp() const { return mlp_; }
  // Where the steps compute (models/devices.h).
  ReplicaGroup* replicas() const { return replicas_; }
  EpochBatches& batches() { return batches_; }

  // Holds one of the training-step slots from construction to destruction (waits for one).
  class StepSlot {
   public:
    explicit StepSlot(FashionResource* res) : res_(res) {
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
    FashionResource* const res_;
  };

 private:
  const Split train_;
  const Split validation_;
  const Split test_;
  const DenseMlp mlp_;
  ReplicaGroup* const replicas_;
  EpochBatches batches_;
  absl::Mutex mu_;
  int64_t next_step_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex slots_mu_;
  int64_t free_step_slots_ ABSL_GUARDED_BY(slots_mu_);
};

absl::StatusOr<FashionResource*> ResourceOf(ClosureContext& ctx, const char* closure) {
  auto* res = ctx.datasets.size() == 1 ? dynamic_cast<FashionResource*>(ctx.datasets[0]) : nullptr;
  if (res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(closure, " takes the ", kData, " resource"));
  }
  return res;
}

// The network's variables named with `prefix` (kWeights or kAverages) in parameter-buffer order
// (w1, b1, w2, b2, ...), checked against its shape. Errors: kNotFound (not created),
// kFailedPrecondition (created with other shapes).
absl::StatusOr<std::vector<ShardedVariable>> FindVariables(PsConnection* ps, const DenseMlp& mlp,
                                                           const char* prefix) {
  std::vector<ShardedVariable> vars;
  for (int l = 0; l < mlp.num_layers(); ++l) {
    const int64_t fan_in = mlp.widths()[l], fan_out = mlp.widths()[l + 1];
    ASSIGN_OR_RETURN(ShardedVariable w, ps->Variable(WeightName(prefix, l)));
    ASSIGN_OR_RETURN(ShardedVariable b, ps->Variable(BiasName(prefix, l)));
    if (w.shape() != std::vector<int64_t>{fan_in, fan_out} ||
        b.shape() != std::vector<int64_t>{fan_out} || w.dtype() != DT_FLOAT32 ||
        b.dtype() != DT_FLOAT32) {
      return absl::FailedPreconditionError(absl::StrCat(
          WeightName(prefix, l), " / ", BiasName(prefix, l), " on the ps have shapes [",
          absl::StrJoin(w.shape(), ","), "] / [", absl::StrJoin(b.shape(), ","),
          "], expected float32 [", fan_in, ",", fan_out, "] / [", fan_out, "] for the network ",
          mlp.ToString()));
    }
    vars.push_back(std::move(w));
    vars.push_back(std::move(b));
  }
  return vars;
}

// Where variable i of FindVariables starts in the parameter buffer.
int64_t ParamOffset(const DenseMlp& mlp, size_t i) {
  const int l = static_cast<int>(i / 2);
  return i % 2 == 0 ? mlp.weight_offset(l) : mlp.bias_offset(l);
}

// Reads every shard of `vars` into `params` with ONE Read request per ps task, all in parallel.
absl::Status PullParams(const std::vector<ShardedVariable>& vars, const DenseMlp& mlp,
                        float* params) {
  struct PerPs {
    PsClient* client = nullptr;
    ReadRequest request;
    ReadResponse response;
    std::vector<std::pair<char*, int64_t>> dests;  // per op: where its rows go, and their bytes
  };
  std::map<PsClient*, PerPs> per_ps;
  for (size_t i = 0; i < vars.size(); ++i) {
    const ShardedVariable& v = vars[i];
    char* base = reinterpret_cast<char*>(params + ParamOffset(mlp, i));
    for (const ShardLocation& s : v.shards()) {
      PsClient* client = v.ps(s.ps_task);
      PerPs& p = per_ps[client];
      p.client = client;
      p.request.add_ops()->set_shard(s.name);  // empty range: the whole shard
      p.dests.emplace_back(base + s.row_offset * v.row_bytes(), s.num_rows * v.row_bytes());
    }
  }
  std::vector<PerPs*> entries;
  for (auto& [client, p] : per_ps) entries.push_back(&p);
  RETURN_IF_ERROR(CallAll(static_cast<int>(entries.size()), [&](int i, PsClient::Done done) {
    entries[i]->client->ReadAsync(&entries[i]->request, &entries[i]->response, std::move(done));
  }));
  for (PerPs* p : entries) {
    if (p->response.values_size() != p->request.ops_size()) {
      return absl::InternalError(absl::StrCat(p->client->name(), ": ", p->response.values_size(),
                                              " values for ", p->request.ops_size(), " reads"));
    }
    for (int k = 0; k < p->request.ops_size(); ++k) {
      const std::string& bytes = p->response.values(k);
      if (static_cast<int64_t>(bytes.size()) != p->dests[k].second) {
        return absl::InternalError(absl::StrCat(p->client->name(), ": shard \"",
                                                p->request.ops(k).shard(), "\" returned ",
                                                bytes.size(), " bytes, expected ",
                                                p->dests[k].second));
      }
      std::memcpy(p->dests[k].first, bytes.data(), bytes.size());
    }
  }
  return absl::OkStatus();
}

// Adds one op per variable of `vars` to `update`: `kind` with `values` (a parameter buffer).
absl::Status AddDenseOps(const std::vector<ShardedVariable>& vars, const DenseMlp& mlp,
                         UpdateOp::Kind kind, const float* values, UpdateBatch* update) {
  for (size_t i = 0; i < vars.size(); ++i) {
    const ShardedVariable& v = vars[i];
    absl::string_view bytes(reinterpret_cast<const char*>(values + ParamOffset(mlp, i)),
                            v.num_rows() * v.row_bytes());
    RETURN_IF_ERROR(update->AddDense(v, kind, bytes));
  }
  return absl::OkStatus();
}

// Args: int64 step, int64 average (1: add the weights the step pulled into the averages).
// Outputs: the batch's mean loss (float32), its examples (int64).
absl::StatusOr<std::vector<Tensor>> TrainStep(ClosureContext& ctx, absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t step, IntArg(args, 0, kTrain));
  ASSIGN_OR_RETURN(int64_t average, IntArg(args, 1, kTrain));
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat(kTrain, ": step ", step, " < 0"));
  ASSIGN_OR_RETURN(FashionResource * res, ResourceOf(ctx, kTrain));
  const DenseMlp& mlp = res->mlp();
  ASSIGN_OR_RETURN(std::vector<ShardedVariable> vars, FindVariables(ctx.ps, mlp, kWeights));
  std::vector<ShardedVariable> sums;
  if (average != 0) {
    ASSIGN_OR_RETURN(sums, FindVariables(ctx.ps, mlp, kAverages));
  }
  const std::vector<int64_t> rows =
      ReplicaShare(res->batches().Batch(step), ctx.replica_index, ctx.num_replicas);
  std::vector<float> x;
  std::vector<int32_t> labels;
  Gather(res->train(), rows, &x, &labels);
  // Uninitialized: the pull and the backward pass overwrite every float.
  std::unique_ptr<float[]> params(new float[mlp.num_params()]);
  std::unique_ptr<float[]> grads(new float[mlp.num_params()]);
  FashionResource::StepSlot slot(res);  // from the pull to the push
  RETURN_IF_ERROR(PullParams(vars, mlp, params.get()));
  const int64_t n = static_cast<int64_t>(rows.size());
  ASSIGN_OR_RETURN(float loss, mlp.ForwardBackward(res->replicas(), params.get(), n, x.data(),
                                                   labels.data(), grads.get()));
  // The gradients and the averages' sums travel in one request per ps task, with the step (the
  // learning-rate schedule's argument; 1-based on the wire).
  UpdateBatch update;
  update.set_step(step + 1);
  RETURN_IF_ERROR(AddDenseOps(vars, mlp, UpdateOp::APPLY_GRADIENT, grads.get(), &update));
  RETURN_IF_ERROR(AddDenseOps(sums, mlp, UpdateOp::ASSIGN_ADD, params.get(), &update));
  const float one = 1.0f;
  if (average != 0) {
    ASSIGN_OR_RETURN(ShardedVariable count, ctx.ps->Variable(kAverageCount));
    RETURN_IF_ERROR(update.AddDense(count, UpdateOp::ASSIGN_ADD,
                                    absl::string_view(reinterpret_cast<const char*>(&one), 4)));
  }
  RETURN_IF_ERROR(update.Run());
  return std::vector<Tensor>{Tensor::Scalar<float>(loss), Tensor::Scalar<int64_t>(n)};
}

// Args: int64 split (0: test, 1: train, 2: validation), begin, end, averaged_steps (0: evaluate the trained
// weights; n > 0: the averages, i.e. the sums over n steps divided by n). Outputs over examples
// [begin, end): the loss sum (float32), the correct predictions and the examples (int64).
absl::StatusOr<std::vector<Tensor>> EvalChunk(ClosureContext& ctx, absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t split_index, IntArg(args, 0, kEval));
  ASSIGN_OR_RETURN(int64_t begin, IntArg(args, 1, kEval));
  ASSIGN_OR_RETURN(int64_t end, IntArg(args, 2, kEval));
  ASSIGN_OR_RETURN(int64_t averaged_steps, IntArg(args, 3, kEval));
  if (averaged_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kEval, ": averaged_steps ", averaged_steps, " < 0"));
  }
  ASSIGN_OR_RETURN(FashionResource * res, ResourceOf(ctx, kEval));
  if (split_index < 0 || split_index > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        kEval, ": split ", split_index, " is not 0 (test), 1 (train) or 2 (validation)"));
  }
  const Split& split = split_index == 0   ? res->test()
                       : split_index == 1 ? res->train()
                                          : res->validation();
  if (begin < 0 || end <= begin || end > split.size()) {
    return absl::InvalidArgumentError(absl::StrCat(kEval, ": rows [", begin, ", ", end,
                                                   ") are not a nonempty range of the ",
                                                   split.size(), " examples"));
  }
  const DenseMlp& mlp = res->mlp();
  ASSIGN_OR_RETURN(std::vector<ShardedVariable> vars,
                   FindVariables(ctx.ps, mlp, averaged_steps > 0 ? kAverages : kWeights));
  std::vector<int64_t> rows(end - begin);
  for (int64_t k = begin; k < end; ++k) rows[k - begin] = k;
  std::vector<float> x;
  std::vector<int32_t> labels;
  Gather(split, rows, &x, &labels);
  std::unique_ptr<float[]> params(new float[mlp.num_params()]);
  RETURN_IF_ERROR(PullParams(vars, mlp, params.get()));
  if (averaged_steps > 0) {
    const float scale = 1.0f / static_cast<float>(averaged_steps);
    for (int64_t i = 0; i < mlp.num_params(); ++i) params[i] *= scale;
  }
  ASSIGN_OR_RETURN(MlpEvalSums sums, mlp.Evaluate(res->replicas(), params.get(), end - begin,
                                                  x.data(), labels.data()));
  return std::vector<Tensor>{Tensor::Scalar<float>(static_cast<float>(sums.loss_sum)),
                             Tensor::Scalar<int64_t>(sums.correct),
                             Tensor::Scalar<int64_t>(end - begin)};
}

struct MlpConfig {
  std::string data_dir = "data/fashion_mnist";
  int epochs = 10;
  int64_t max_steps = 0;
  int64_t batch_size = 128;
  double learning_rate = 0;  // set from the optimizer's default when not given
  RelativeSchedule lr_schedule;
  std::vector<int64_t> hidden = {256, 128};
  int64_t shards = 0;  // 0: one per ps task
  int64_t train_eval_examples = 10000;
  int64_t steps_per_worker = 1;  // 0: no limit
  double average_epochs = 3;     // 0: evaluate the trained weights only
  double validation_fraction = 0.1;
  std::string validation_dir;  // "": split off validation_fraction of the training examples
  OptimizerDef::Kind optimizer = OptimizerDef::ADAM;
  uint64_t seed = 1;
  WorkerDevices devices;
};

// Sums of one evaluation over a split.
struct EvalTotals {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t count = 0;
};

class FashionMnistMlp final : public Model {
 public:
  explicit FashionMnistMlp(MlpConfig config) : config_(std::move(config)) {}

  std::string name() const override { return kFashionMnistMlpModel; }

  absl::Status Setup(ClusterCoordinator* coordinator) override {
    // The coordinator needs the counts, the image size and the classes, not the training images.
    ASSIGN_OR_RETURN(std::vector<int32_t> train_labels,
                     ReadLabels(DataFile(config_.data_dir, kTrainLabels)));
    ASSIGN_OR_RETURN(Split test, ReadSplit(config_.data_dir, kTestImages, kTestLabels));
    num_train_ = 0;
    num_validation_ = 0;
    if (config_.validation_dir.empty()) {
      for (int64_t r = 0; r < static_cast<int64_t>(train_labels.size()); ++r) {
        ++(IsValidation(config_.seed, r, config_.validation_fraction) ? num_validation_
                                                                      : num_train_);
      }
    } else {
      num_train_ = static_cast<int64_t>(train_labels.size());
      ASSIGN_OR_RETURN(std::vector<int32_t> labels,
                       ReadLabels(DataFile(config_.validation_dir, kTrainLabels)));
      num_validation_ = static_cast<int64_t>(labels.size());
    }
    num_test_ = test.size();
    if (num_train_ == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          DataFile(config_.data_dir, kTrainLabels), " has no training examples"));
    }
    int32_t max_label = 0;
    for (int32_t y : train_labels) max_label = std::max(max_label, y);
    for (int32_t y : test.labels) max_label = std::max(max_label, y);
    std::vector<int64_t> widths = {test.pixels()};
    widths.insert(widths.end(), config_.hidden.begin(), config_.hidden.end());
    widths.push_back(max_label + 1);
    ASSIGN_OR_RETURN(DenseMlp mlp, DenseMlp::Create(widths));
    mlp_ = std::make_unique<DenseMlp>(std::move(mlp));

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
    // `trained`: the weights (initialized, with `optimizer`); else their sums (zeros, no optimizer).
    auto create = [&](const char* prefix, bool trained) -> absl::Status {
      for (int l = 0; l < mlp_->num_layers(); ++l) {
        const int64_t fan_in = widths[l], fan_out = widths[l + 1];
        VariableSpec w;
        w.name = WeightName(prefix, l);
        w.shape = {fan_in, fan_out};
        w.partitioner.kind = PartitionerKind::kFixed;
        w.partitioner.num_shards = shards;
        if (trained) {
          // Glorot uniform (Keras' default for dense kernels).
          const double limit = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
          w.initializer.set_kind(InitializerDef::UNIFORM);
          w.initializer.set_minval(-limit);
          w.initializer.set_maxval(limit);
          w.initializer.set_seed(config_.seed * 1000 + l);
          w.optimizer = optimizer;
        }
        RETURN_IF_ERROR(coordinator->variables()->Create(w).status());
        VariableSpec b;  // zeros, one shard
        b.name = BiasName(prefix, l);
        b.shape = {fan_out};
        if (trained) b.optimizer = optimizer;
        RETURN_IF_ERROR(coordinator->variables()->Create(b).status());
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

    std::vector<Tensor> args = {Tensor::String(config_.data_dir),
                                Tensor::Scalar<int64_t>(static_cast<int64_t>(config_.seed)),
                                Tensor::Scalar<int64_t>(config_.batch_size),
                                Tensor::Scalar<int64_t>(config_.steps_per_worker),
                                Tensor::Scalar<float>(static_cast<float>(config_.validation_fraction)),
                                Tensor::String(config_.validation_dir)};
    for (Tensor& t : DeviceArgs(config_.devices)) args.push_back(std::move(t));
    for (int64_t w : widths) args.push_back(Tensor::Scalar<int64_t>(w));
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

  // With averaging, the test_* and train_* metrics are the averaged weights'; last_test_* are the
  // trained weights' as they ended. The averages are those the ps holds (mlp/avg/count steps' worth:
  // fewer when a best checkpoint from before the end was restored; none, and the trained weights
  // are evaluated, when it is from before the averaging began).
  absl::StatusOr<ModelMetrics> Evaluate(ClusterCoordinator* coordinator) override {
    ASSIGN_OR_RETURN(int64_t averaged, AveragedSteps(coordinator));
    std::vector<Run> runs = {{"test", num_test_, 0, averaged, {}},
                             {"train", train_eval_examples_, 1, averaged, {}}};
    if (averaged > 0) runs.push_back({"last_test", num_test_, 0, 0, {}});
    ModelMetrics m;
    RETURN_IF_ERROR(Score(coordinator, std::move(runs), &m));
    m.notes["layers"] = mlp_->ToString();
    m.notes["parameters"] = absl::StrCat(mlp_->num_params());
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

  const MlpConfig config_;
  std::unique_ptr<DenseMlp> mlp_;
  int64_t num_train_ = 0;
  int64_t num_validation_ = 0;
  int64_t num_test_ = 0;
  int64_t train_eval_examples_ = 0;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  int64_t averaged_steps_ = 0;
  PerWorkerDataset dataset_;
};

absl::StatusOr<std::vector<int64_t>> ParseHidden(const std::string& text) {
  std::vector<int64_t> widths;
  if (text.empty()) return widths;  // no hidden layer: softmax regression
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t w = 0;
    if (!absl::SimpleAtoi(part, &w) || w < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          kFashionMnistMlpModel, ": hidden=", text, ": \"", part,
          "\" is not a positive width (want comma-separated widths, e.g. 256,128)"));
    }
    widths.push_back(w);
  }
  return widths;
}

}  // namespace

absl::Status RegisterFashionMnistMlp(ClosureRegistry* registry,
                                     std::shared_ptr<ReplicaGroups> replica_groups) {
  RETURN_IF_ERROR(registry->RegisterClosure(kTrain, TrainStep));
  RETURN_IF_ERROR(registry->RegisterClosure(kEval, EvalChunk));
  // Args: string data directory, int64 seed, batch size, training steps at once (0: no limit),
  // float validation fraction, string validation directory, the devices (DeviceArgs), then the
  // network's widths.
  return registry->RegisterDataset(
      kData,
      [replica_groups](int /*worker_index*/, int /*num_workers*/,
         absl::Span<const Tensor> args) -> absl::StatusOr<std::unique_ptr<Dataset>> {
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
        std::vector<int64_t> widths;
        for (size_t i = 8; i < args.size(); ++i) {
          ASSIGN_OR_RETURN(int64_t w, IntArg(args, i, kData));
          widths.push_back(w);
        }
        ASSIGN_OR_RETURN(DenseMlp mlp, DenseMlp::Create(widths));
        ASSIGN_OR_RETURN(Split train, ReadSplit(dir, kTrainImages, kTrainLabels));
        ASSIGN_OR_RETURN(Split test, ReadSplit(dir, kTestImages, kTestLabels));
        Split validation;
        if (validation_dir.empty()) {
          SplitOffValidation(static_cast<uint64_t>(seed), validation_fraction, &train,
                             &validation);
        } else {
          ASSIGN_OR_RETURN(validation, ReadSplit(validation_dir, kTrainImages, kTrainLabels));
        }
        for (const Split* s : {&train, &validation, &test}) {
          if (s->size() > 0 && s->pixels() != mlp.inputs()) {
            return absl::InvalidArgumentError(absl::StrCat(
                kData, ": images of ", s->pixels(), " pixels, but the network takes ",
                mlp.inputs(), " inputs"));
          }
        }
        for (const Split* s : {&train, &validation, &test}) {
          for (int32_t y : s->labels) {
            if (y >= mlp.classes()) {
              return absl::InvalidArgumentError(absl::StrCat(
                  kData, ": label ", y, " but the network has ", mlp.classes(), " classes"));
            }
          }
        }
        if (train.size() == 0) {
          return absl::InvalidArgumentError(absl::StrCat(kData, ": no training examples"));
        }
        ASSIGN_OR_RETURN(ReplicaGroup * replicas, replica_groups->Get(devices));
        return std::unique_ptr<Dataset>(new FashionResource(
            std::move(train), std::move(validation), std::move(test), std::move(mlp), replicas,
            batch_size,
            static_cast<uint64_t>(seed), steps_at_once));
      });
}

absl::StatusOr<std::unique_ptr<Model>> CreateFashionMnistMlp(const ModelOptions& options) {
  MlpConfig c;
  ExtraOptions extra(kFashionMnistMlpModel, options.extra);
  if (!options.data.empty()) c.data_dir = options.data;
  const std::string optimizer = extra.GetString("optimizer", "adam");
  ASSIGN_OR_RETURN(c.hidden, ParseHidden(extra.GetString("hidden", "256,128")));
  ASSIGN_OR_RETURN(c.shards, extra.GetInt("shards", 0));
  ASSIGN_OR_RETURN(c.train_eval_examples, extra.GetInt("train_eval_examples", 10000));
  ASSIGN_OR_RETURN(c.steps_per_worker, extra.GetInt("steps_per_worker", 1));
  ASSIGN_OR_RETURN(c.average_epochs, extra.GetDouble("average_epochs", c.average_epochs));
  RETURN_IF_ERROR(extra.Finish());
  double default_rate;
  if (optimizer == "adam") {
    c.optimizer = OptimizerDef::ADAM;
    default_rate = 0.001;
  } else if (optimizer == "adagrad") {
    c.optimizer = OptimizerDef::ADAGRAD;
    default_rate = 0.05;
  } else if (optimizer == "momentum") {
    c.optimizer = OptimizerDef::MOMENTUM;
    default_rate = 0.01;
  } else if (optimizer == "sgd") {
    c.optimizer = OptimizerDef::SGD;
    default_rate = 0.1;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(kFashionMnistMlpModel, ": optimizer=",
                                                   optimizer,
                                                   " is not one of adam, adagrad, momentum, sgd"));
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
    return absl::InvalidArgumentError(absl::StrCat(kFashionMnistMlpModel, ": validation_fraction ",
                                                   options.validation_fraction,
                                                   " is outside [0, 1)"));
  }
  if (c.shards < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFashionMnistMlpModel, ": shards=", c.shards, " must be >= 0"));
  }
  if (c.train_eval_examples < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFashionMnistMlpModel, ": train_eval_examples=", c.train_eval_examples, " must be >= 0"));
  }
  if (!(c.average_epochs >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFashionMnistMlpModel, ": average_epochs=", c.average_epochs, " must be >= 0"));
  }
  if (c.steps_per_worker < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFashionMnistMlpModel, ": steps_per_worker=", c.steps_per_worker, " must be >= 0"));
  }
  return std::unique_ptr<Model>(new FashionMnistMlp(std::move(c)));
}

}  // namespace pstrain
