#include "models/movielens_mf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "models/batches.h"
#include "models/ratings_data.h"
#include "ps/sharded_variable.h"
#include "worker/device/device.h"

namespace pstrain {
namespace {

constexpr char kTrain[] = "movielens_mf/train";
constexpr char kEval[] = "movielens_mf/eval";
constexpr char kData[] = "movielens_mf/data";
constexpr char kUserEmb[] = "mf/user_embedding";
constexpr char kItemEmb[] = "mf/item_embedding";
constexpr char kUserBias[] = "mf/user_bias";
constexpr char kItemBias[] = "mf/item_bias";

// Everything a worker needs to train and evaluate: the data and the hyperparameters. Read-only
// after creation, so closures share it.
class RatingsResource : public Dataset {
 public:
  RatingsResource(RatingsData data, Device* device, int64_t batch_size, uint64_t seed, double l2,
                  double bias_l2, double reg_power, int64_t dim, bool dynamic)
      : data_(std::move(data)),
        device_(device),
        batches_(static_cast<int64_t>(data_.train.size()), batch_size, seed),
        l2_(l2),
        bias_l2_(bias_l2),
        reg_power_(reg_power),
        dim_(dim),
        dynamic_(dynamic) {
    user_count_.assign(data_.num_users, 0);
    item_count_.assign(data_.num_items, 0);
    for (size_t k = 0; k < data_.train.size(); ++k) {
      ++user_count_[data_.train.user[k]];
      ++item_count_[data_.train.item[k]];
    }
  }

  // The training examples in epoch order, one batch per element: users, items, ratings.
  absl::StatusOr<bool> Next(std::vector<Tensor>* element) override {
    absl::MutexLock lock(&mu_);
    if (next_step_ >= batches_.steps_per_epoch()) return false;
    std::vector<int64_t> users, items;
    std::vector<float> ratings;
    for (int64_t k : batches_.Batch(next_step_++)) {
      users.push_back(data_.train.user[k]);
      items.push_back(data_.train.item[k]);
      ratings.push_back(data_.train.rating[k]);
    }
    *element = {Tensor::FromVector(users), Tensor::FromVector(items), Tensor::FromVector(ratings)};
    return true;
  }
  bool shared() const override { return true; }

  const RatingsData& data() const { return data_; }
  // The CPU, where the steps compute.
  Device* device() const { return device_; }
  // tables=dynamic: the tables are keyed by the raw ids' keys.
  bool dynamic() const { return dynamic_; }
  EpochBatches& batches() { return batches_; }
  double l2() const { return l2_; }
  double bias_l2() const { return bias_l2_; }
  double reg_power() const { return reg_power_; }
  int64_t dim() const { return dim_; }
  double Clip(double p) const {
    return std::clamp<double>(p, data_.min_rating, data_.max_rating);
  }
  // Training ratings of each user and item.
  int64_t user_count(int64_t u) const { return user_count_[u]; }
  int64_t item_count(int64_t i) const { return item_count_[i]; }

 private:
  const RatingsData data_;
  Device* const device_;
  EpochBatches batches_;
  const double l2_;
  const double bias_l2_;
  const double reg_power_;
  const int64_t dim_;
  const bool dynamic_;
  std::vector<int64_t> user_count_, item_count_;
  absl::Mutex mu_;
  int64_t next_step_ ABSL_GUARDED_BY(mu_) = 0;
};

// One of the model's four tables: a fixed variable indexed by the dense ids, or a dynamic table
// keyed by the raw ids' keys.
struct MfTable {
  std::optional<ShardedVariable> fixed;
  std::optional<DynamicTable> dynamic;
};

// The model's four tables, found by name on the ps tasks.
struct Tables {
  MfTable user_emb, item_emb, user_bias, item_bias;
};

absl::StatusOr<Tables> FindTables(PsConnection* ps, bool dynamic) {
  Tables t;
  for (auto [table, name] : {std::pair{&t.user_emb, kUserEmb}, std::pair{&t.item_emb, kItemEmb},
                             std::pair{&t.user_bias, kUserBias}, std::pair{&t.item_bias, kItemBias}}) {
    if (dynamic) {
      ASSIGN_OR_RETURN(table->dynamic, ps->Table(name));
    } else {
      ASSIGN_OR_RETURN(table->fixed, ps->Variable(name));
    }
  }
  return t;
}

// The ids a table takes for examples `rows` of `ratings`: users' (or items') keys or dense ids.
void Ids(const Ratings& ratings, absl::Span<const int64_t> rows, bool dynamic, bool users,
         std::vector<int64_t>* out) {
  out->resize(rows.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    const int64_t r = rows[k];
    (*out)[k] = dynamic ? (users ? ratings.user_key[r] : ratings.item_key[r])
                        : (users ? ratings.user[r] : ratings.item[r]);
  }
}

absl::Status AddLookup(LookupBatch& batch, const MfTable& t, absl::Span<const int64_t> ids,
                       float* out, LookupMode mode) {
  if (t.dynamic.has_value()) {
    return batch.Add(*t.dynamic, ids, reinterpret_cast<char*>(out), mode);
  }
  return batch.Add(*t.fixed, ids, reinterpret_cast<char*>(out));
}

absl::Status AddGradients(UpdateBatch& batch, const MfTable& t, absl::Span<const int64_t> ids,
                          const std::vector<float>& grads) {
  const char* g = reinterpret_cast<const char*>(grads.data());
  if (t.dynamic.has_value()) return batch.AddSparse(*t.dynamic, UpdateOp::APPLY_GRADIENT, ids, g);
  return batch.AddSparse(*t.fixed, UpdateOp::APPLY_GRADIENT, ids, g);
}

// Predictions for examples `rows` of `ratings`, with the rows pulled from the ps; keeps the pulled
// rows in `pulled` for the backward pass.
struct Forward {
  std::vector<int64_t> users, items;
  std::vector<float> pu, qi, bu, bi, dot, pred;
};

// `step` > 0: a training step's pull (dynamic tables store the ids they lack); 0: evaluation.
absl::Status RunForward(const Tables& t, const Ratings& ratings, absl::Span<const int64_t> rows,
                        int64_t dim, double mean, bool dynamic, int64_t step, Device* device,
                        Forward* f) {
  const int64_t n = static_cast<int64_t>(rows.size());
  Ids(ratings, rows, dynamic, /*users=*/true, &f->users);
  Ids(ratings, rows, dynamic, /*users=*/false, &f->items);
  f->pu.resize(n * dim);
  f->qi.resize(n * dim);
  f->bu.resize(n);
  f->bi.resize(n);
  const LookupMode mode = step > 0 ? LookupMode::kTrain : LookupMode::kEval;
  LookupBatch lookup;
  lookup.set_step(step);
  RETURN_IF_ERROR(AddLookup(lookup, t.user_emb, f->users, f->pu.data(), mode));
  RETURN_IF_ERROR(AddLookup(lookup, t.item_emb, f->items, f->qi.data(), mode));
  RETURN_IF_ERROR(AddLookup(lookup, t.user_bias, f->users, f->bu.data(), mode));
  RETURN_IF_ERROR(AddLookup(lookup, t.item_bias, f->items, f->bi.data(), mode));
  RETURN_IF_ERROR(lookup.Run());
  f->dot.resize(n);
  RETURN_IF_ERROR(device->RowDot(n, dim, f->pu.data(), f->qi.data(), f->dot.data()));
  f->pred.resize(n);
  for (int64_t k = 0; k < n; ++k) {
    f->pred[k] = static_cast<float>(mean) + f->bu[k] + f->bi[k] + f->dot[k];
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> TrainStep(ClosureContext& ctx, absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t step, IntArg(args, 0, kTrain));
  if (ctx.datasets.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(kTrain, " takes the ", kData, " resource"));
  }
  auto* res = dynamic_cast<RatingsResource*>(ctx.datasets[0]);
  if (res == nullptr) return absl::InvalidArgumentError(absl::StrCat(kTrain, " needs ", kData));
  ASSIGN_OR_RETURN(Tables t, FindTables(ctx.ps, res->dynamic()));
  const int64_t dim = res->dim();
  const std::vector<int64_t> rows =
      ReplicaShare(res->batches().Batch(step), ctx.replica_index, ctx.num_replicas);
  const Ratings& train = res->data().train;
  Device* device = res->device();
  Forward f;
  const int64_t global_step = step + 1;  // 1-based: 0 means "no step" to a dynamic table
  RETURN_IF_ERROR(RunForward(t, train, rows, dim, res->data().train_mean, res->dynamic(),
                             global_step, device, &f));

  // Squared error plus L2 on the rows used; gradients per example (the ps sums repeated ids).
  const int64_t n = static_cast<int64_t>(rows.size());
  const float l2 = static_cast<float>(res->l2());
  const float bias_l2 = static_cast<float>(res->bias_l2());
  std::vector<float> err(n);
  double loss = 0;
  for (int64_t k = 0; k < n; ++k) {
    err[k] = f.pred[k] - train.rating[rows[k]];
    loss += static_cast<double>(err[k]) * err[k];
  }
  std::vector<float> dout(n), gp(n * dim), gq(n * dim), gbu(n), gbi(n);
  for (int64_t k = 0; k < n; ++k) dout[k] = 2 * err[k];
  RETURN_IF_ERROR(device->RowDotGrad(n, dim, f.pu.data(), f.qi.data(), dout.data(), gp.data(),
                                     gq.data()));
  // L2 per occurrence, l2 / count^reg_power: with reg_power 0 every rating of a user adds the same
  // pull towards 0 (frequent users are held hardest); with 1 each user's total pull is the same.
  const double power = res->reg_power();
  for (int64_t k = 0; k < n; ++k) {
    const float ru =
        static_cast<float>(2 * l2 / std::pow(res->user_count(train.user[rows[k]]), power));
    const float ri =
        static_cast<float>(2 * l2 / std::pow(res->item_count(train.item[rows[k]]), power));
    RETURN_IF_ERROR(device->Axpy(dim, ru, &f.pu[k * dim], &gp[k * dim]));
    RETURN_IF_ERROR(device->Axpy(dim, ri, &f.qi[k * dim], &gq[k * dim]));
  }
  for (int64_t k = 0; k < n; ++k) {
    gbu[k] = dout[k] + 2 * bias_l2 * f.bu[k];
    gbi[k] = dout[k] + 2 * bias_l2 * f.bi[k];
  }
  UpdateBatch update;
  update.set_step(global_step);
  RETURN_IF_ERROR(AddGradients(update, t.user_emb, f.users, gp));
  RETURN_IF_ERROR(AddGradients(update, t.item_emb, f.items, gq));
  RETURN_IF_ERROR(AddGradients(update, t.user_bias, f.users, gbu));
  RETURN_IF_ERROR(AddGradients(update, t.item_bias, f.items, gbi));
  RETURN_IF_ERROR(update.Run());
  return std::vector<Tensor>{Tensor::Scalar<float>(static_cast<float>(loss / std::max<int64_t>(n, 1))),
                             Tensor::Scalar<int64_t>(n)};
}

// Sum of squared errors (clipped predictions) over examples [begin, end) of the test set (split 0),
// the training set (split 1) or the validation set (split 2).
absl::StatusOr<std::vector<Tensor>> EvalChunk(ClosureContext& ctx, absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t split, IntArg(args, 0, kEval));
  ASSIGN_OR_RETURN(int64_t begin, IntArg(args, 1, kEval));
  ASSIGN_OR_RETURN(int64_t end, IntArg(args, 2, kEval));
  auto* res = ctx.datasets.size() == 1 ? dynamic_cast<RatingsResource*>(ctx.datasets[0]) : nullptr;
  if (res == nullptr) return absl::InvalidArgumentError(absl::StrCat(kEval, " needs ", kData));
  if (split < 0 || split > 2) {
    return absl::InvalidArgumentError(absl::StrCat(kEval, ": split ", split, " is not 0, 1 or 2"));
  }
  const Ratings& ratings = split == 0   ? res->data().test
                           : split == 1 ? res->data().train
                                        : res->data().validation;
  if (begin < 0 || end < begin || end > static_cast<int64_t>(ratings.size())) {
    return absl::InvalidArgumentError(absl::StrCat(kEval, ": rows [", begin, ", ", end,
                                                   ") outside the ", ratings.size(), " examples"));
  }
  ASSIGN_OR_RETURN(Tables t, FindTables(ctx.ps, res->dynamic()));
  std::vector<int64_t> rows(end - begin);
  for (int64_t k = begin; k < end; ++k) rows[k - begin] = k;
  Forward f;
  RETURN_IF_ERROR(RunForward(t, ratings, rows, res->dim(), res->data().train_mean, res->dynamic(),
                             /*step=*/0, res->device(), &f));
  double sse = 0;
  for (int64_t k = 0; k < end - begin; ++k) {
    const double e = res->Clip(f.pred[k]) - ratings.rating[begin + k];
    sse += e * e;
  }
  return std::vector<Tensor>{Tensor::Scalar<float>(static_cast<float>(sse)),
                             Tensor::Scalar<int64_t>(end - begin)};
}

struct MfConfig {
  RatingsOptions ratings;
  int epochs = 40;
  int64_t max_steps = 0;
  int64_t batch_size = 256;
  double learning_rate = 0.05;
  int64_t dim = 32;
  double l2 = 1.2;
  double bias_l2 = 0.01;
  double reg_power = 0.5;
  int64_t shards = 0;  // 0: one per ps task
  OptimizerDef::Kind optimizer = OptimizerDef::ADAGRAD;
  bool dynamic = true;  // tables=dynamic: keyed by the raw ids
  RelativeSchedule lr_schedule;
};

class MatrixFactorization final : public Model {
 public:
  explicit MatrixFactorization(MfConfig config) : config_(std::move(config)) {}

  std::string name() const override { return kMatrixFactorizationModel; }

  absl::Status Setup(ClusterCoordinator* coordinator) override {
    ASSIGN_OR_RETURN(data_, LoadRatings(config_.ratings));
    steps_per_epoch_ =
        (static_cast<int64_t>(data_.train.size()) + config_.batch_size - 1) / config_.batch_size;
    total_steps_ = steps_per_epoch_ * config_.epochs;
    if (config_.max_steps > 0) total_steps_ = std::min(total_steps_, config_.max_steps);

    OptimizerDef optimizer;
    optimizer.set_kind(config_.optimizer);
    optimizer.set_learning_rate(config_.learning_rate);
    ApplyLrSchedule(config_.lr_schedule, &optimizer);
    const int shards = static_cast<int>(
        config_.shards > 0 ? config_.shards : coordinator->ps()->num_ps());
    auto table = [&](const char* name, int64_t rows, int64_t width, bool random) {
      if (config_.dynamic) {
        TableSpec spec;
        spec.name = name;
        spec.dim = width;
        spec.num_shards = shards;
        if (random) {
          spec.initializer.set_kind(InitializerDef::TRUNCATED_NORMAL);
          spec.initializer.set_stddev(0.05);
          spec.initializer.set_seed(config_.ratings.seed * 1000 + (name == kUserEmb ? 1 : 2));
        }
        spec.optimizer = optimizer;
        return coordinator->variables()->CreateTable(spec).status();
      }
      VariableSpec spec;
      spec.name = name;
      spec.shape = {rows, width};
      spec.partitioner.kind = PartitionerKind::kFixed;
      spec.partitioner.num_shards = shards;
      if (random) {
        spec.initializer.set_kind(InitializerDef::TRUNCATED_NORMAL);
        spec.initializer.set_stddev(0.05);
        spec.initializer.set_seed(config_.ratings.seed + rows);
      }
      spec.optimizer = optimizer;
      return coordinator->variables()->Create(spec).status();
    };
    // The user embeddings start at zero and the biases at the bias baseline's: the untrained model
    // IS the baseline (its dot products are 0), so the step-0 validation scores the baseline and
    // the best checkpoint never ends worse than it on validation. The item embeddings' noise
    // breaks the symmetry (the users' gradients are err * item rows).
    RETURN_IF_ERROR(table(kUserEmb, data_.num_users, config_.dim, false));
    RETURN_IF_ERROR(table(kItemEmb, data_.num_items, config_.dim, true));
    RETURN_IF_ERROR(table(kUserBias, data_.num_users, 1, false));
    RETURN_IF_ERROR(table(kItemBias, data_.num_items, 1, false));
    RETURN_IF_ERROR(WarmStartBiases(coordinator));
    ASSIGN_OR_RETURN(
        dataset_,
        coordinator->CreatePerWorkerDataset(
            kData, {Tensor::String(config_.ratings.path), Tensor::String(config_.ratings.user_col),
                    Tensor::String(config_.ratings.item_col),
                    Tensor::String(config_.ratings.rating_col),
                    Tensor::Scalar<int64_t>(static_cast<int64_t>(config_.ratings.seed)),
                    Tensor::Scalar<int64_t>(config_.batch_size),
                    Tensor::Scalar<float>(static_cast<float>(config_.l2)),
                    Tensor::Scalar<float>(static_cast<float>(config_.bias_l2)),
                    Tensor::Scalar<float>(static_cast<float>(config_.reg_power)),
                    Tensor::Scalar<int64_t>(config_.dim),
                    Tensor::Scalar<int64_t>(config_.dynamic ? 1 : 0),
                    Tensor::Scalar<float>(static_cast<float>(config_.ratings.validation_fraction)),
                    Tensor::String(config_.ratings.validation_path)}));
    return absl::OkStatus();
  }

  int64_t total_steps() const override { return total_steps_; }
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }
  int64_t examples_per_step() const override { return config_.batch_size; }

  absl::StatusOr<RemoteValue> ScheduleStep(ClusterCoordinator* coordinator, int64_t step) override {
    return coordinator->Schedule(kTrain, {Tensor::Scalar<int64_t>(step)}, {dataset_});
  }

  absl::StatusOr<ModelMetrics> Evaluate(ClusterCoordinator* coordinator) override {
    ModelMetrics m;
    ASSIGN_OR_RETURN(m.values["test_rmse"], SplitRmse(coordinator, 0));
    ASSIGN_OR_RETURN(m.values["train_rmse"], SplitRmse(coordinator, 1));
    m.values["baseline_test_rmse"] =
        Rmse(data_.test, [&](int32_t u, int32_t i) { return baseline_.Predict(u, i); },
             data_.min_rating, data_.max_rating);
    m.notes["users"] = absl::StrCat(data_.num_users);
    m.notes["items"] = absl::StrCat(data_.num_items);
    m.notes["train_ratings"] = absl::StrCat(data_.train.size());
    m.notes["test_ratings"] = absl::StrCat(data_.test.size());
    m.notes["test_excluded_unseen"] = absl::StrCat(data_.test_excluded);
    m.notes["validation_ratings"] = absl::StrCat(data_.validation.size());
    m.notes["validation_excluded_unseen"] = absl::StrCat(data_.validation_excluded);
    m.notes["id_tables"] = config_.dynamic ? "dynamic (keyed by the raw ids)" : "fixed (ids remapped)";
    return m;
  }

  bool has_validation() const override { return data_.validation.size() > 0; }
  std::string validation_metric() const override { return "val_rmse"; }
  absl::StatusOr<ModelMetrics> Validate(ClusterCoordinator* coordinator) override {
    ModelMetrics m;
    ASSIGN_OR_RETURN(m.values["val_rmse"], SplitRmse(coordinator, 2));
    m.values["val_baseline_rmse"] =
        Rmse(data_.validation, [&](int32_t u, int32_t i) { return baseline_.Predict(u, i); },
             data_.min_rating, data_.max_rating);
    return m;
  }

 private:
  // The RMSE of the current tables on split 0 (test), 1 (train) or 2 (validation), in chunks
  // over the workers.
  absl::StatusOr<double> SplitRmse(ClusterCoordinator* coordinator, int split) {
    const Ratings& ratings = split == 0 ? data_.test : split == 1 ? data_.train : data_.validation;
    ASSIGN_OR_RETURN(std::vector<RemoteValue> values,
                     ScheduleChunks(coordinator, kEval, static_cast<int64_t>(ratings.size()),
                                    /*chunk=*/4096,
                                    [split](int64_t begin, int64_t end) {
                                      return std::vector<Tensor>{Tensor::Scalar<int64_t>(split),
                                                                 Tensor::Scalar<int64_t>(begin),
                                                                 Tensor::Scalar<int64_t>(end)};
                                    },
                                    dataset_));
    double sse = 0;
    int64_t count = 0;
    for (const RemoteValue& v : values) {
      ASSIGN_OR_RETURN(std::vector<Tensor> out, v.Fetch());
      sse += out[0].scalar<float>();
      count += out[1].scalar<int64_t>();
    }
    return count > 0 ? std::sqrt(sse / static_cast<double>(count)) : 0;
  }

  // Sets every training user's and item's bias row to the bias baseline's.
  absl::Status WarmStartBiases(ClusterCoordinator* coordinator) {
    baseline_ = FitBiasBaseline(data_);
    for (bool users : {true, false}) {
      const std::vector<double>& bias = users ? baseline_.user_bias : baseline_.item_bias;
      const std::vector<int32_t>& index = users ? data_.train.user : data_.train.item;
      const std::vector<int64_t>& key = users ? data_.train.user_key : data_.train.item_key;
      // Each id once: its dense index and (dynamic tables) its key.
      std::vector<int64_t> key_of(bias.size(), -1);
      std::vector<bool> seen(bias.size());
      std::vector<int64_t> ids;
      std::vector<float> values;
      for (size_t k = 0; k < index.size(); ++k) {
        if (seen[index[k]]) continue;
        seen[index[k]] = true;
        ids.push_back(config_.dynamic ? key[k] : index[k]);
        values.push_back(static_cast<float>(bias[index[k]]));
      }
      const char* name = users ? kUserBias : kItemBias;
      if (config_.dynamic) {
        ASSIGN_OR_RETURN(DynamicTable t, coordinator->ps()->Table(name));
        RETURN_IF_ERROR(t.Assign(ids, values.data()));
      } else {
        ASSIGN_OR_RETURN(ShardedVariable v, coordinator->ps()->Variable(name));
        RETURN_IF_ERROR(v.Assign(ids, values.data()));
      }
    }
    return absl::OkStatus();
  }

  const MfConfig config_;
  RatingsData data_;
  BiasBaseline baseline_;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  PerWorkerDataset dataset_;
};

}  // namespace

absl::Status RegisterMatrixFactorization(ClosureRegistry* registry,
                                         std::shared_ptr<ReplicaGroups> replica_groups) {
  RETURN_IF_ERROR(registry->RegisterClosure(kTrain, TrainStep));
  RETURN_IF_ERROR(registry->RegisterClosure(kEval, EvalChunk));
  return registry->RegisterDataset(
      kData,
      [replica_groups](int /*worker_index*/, int /*num_workers*/,
                       absl::Span<const Tensor> args) -> absl::StatusOr<std::unique_ptr<Dataset>> {
        RatingsOptions options;
        ASSIGN_OR_RETURN(options.path, StringArg(args, 0, kData));
        ASSIGN_OR_RETURN(options.user_col, StringArg(args, 1, kData));
        ASSIGN_OR_RETURN(options.item_col, StringArg(args, 2, kData));
        ASSIGN_OR_RETURN(options.rating_col, StringArg(args, 3, kData));
        ASSIGN_OR_RETURN(int64_t seed, IntArg(args, 4, kData));
        options.seed = static_cast<uint64_t>(seed);
        ASSIGN_OR_RETURN(int64_t batch_size, IntArg(args, 5, kData));
        ASSIGN_OR_RETURN(double l2, FloatArg(args, 6, kData));
        ASSIGN_OR_RETURN(double bias_l2, FloatArg(args, 7, kData));
        ASSIGN_OR_RETURN(double reg_power, FloatArg(args, 8, kData));
        ASSIGN_OR_RETURN(int64_t dim, IntArg(args, 9, kData));
        ASSIGN_OR_RETURN(int64_t dynamic, IntArg(args, 10, kData));
        ASSIGN_OR_RETURN(options.validation_fraction, FloatArg(args, 11, kData));
        ASSIGN_OR_RETURN(options.validation_path, StringArg(args, 12, kData));
        ASSIGN_OR_RETURN(RatingsData data, LoadRatings(options));
        ASSIGN_OR_RETURN(Device * device, replica_groups->Cpu());
        return std::unique_ptr<Dataset>(new RatingsResource(std::move(data), device, batch_size,
                                                            options.seed, l2, bias_l2, reg_power,
                                                            dim, dynamic != 0));
      });
}

absl::StatusOr<std::unique_ptr<Model>> CreateMatrixFactorization(const ModelOptions& options) {
  MfConfig c;
  ExtraOptions extra(kMatrixFactorizationModel, options.extra);
  c.ratings.path = options.data.empty() ? "data/movielens/ratings.csv" : options.data;
  c.ratings.user_col = extra.GetString("user_col", "userId");
  c.ratings.item_col = extra.GetString("item_col", "movieId");
  c.ratings.rating_col = extra.GetString("rating_col", "rating");
  c.ratings.seed = options.seed;
  // Rounded to float as the workers get it (a float32 closure argument): the same split everywhere.
  c.ratings.validation_fraction = static_cast<float>(options.validation_fraction);
  c.ratings.validation_path = options.validation_data;
  ASSIGN_OR_RETURN(c.l2, extra.GetDouble("l2", c.l2));
  ASSIGN_OR_RETURN(c.bias_l2, extra.GetDouble("bias_l2", c.bias_l2));
  ASSIGN_OR_RETURN(c.reg_power, extra.GetDouble("reg_power", c.reg_power));
  ASSIGN_OR_RETURN(c.shards, extra.GetInt("shards", 0));
  const std::string tables = extra.GetString("tables", "dynamic");
  if (tables != "dynamic" && tables != "fixed") {
    return absl::InvalidArgumentError(
        absl::StrCat("movielens_mf: tables=", tables, " must be dynamic or fixed"));
  }
  c.dynamic = tables == "dynamic";
  const std::string optimizer = extra.GetString("optimizer", "adagrad");
  if (optimizer == "adam") {
    c.optimizer = OptimizerDef::ADAM;
  } else if (optimizer == "sgd") {
    c.optimizer = OptimizerDef::SGD;
  } else if (optimizer != "adagrad") {
    return absl::InvalidArgumentError(absl::StrCat(
        "movielens_mf: optimizer=", optimizer, " is not one of adagrad, adam, sgd"));
  }
  RETURN_IF_ERROR(extra.Finish());
  if (options.epochs > 0) c.epochs = options.epochs;
  if (options.batch_size > 0) c.batch_size = options.batch_size;
  if (options.learning_rate > 0) c.learning_rate = options.learning_rate;
  c.lr_schedule = options.lr_schedule;
  if (options.embedding_dim > 0) c.dim = options.embedding_dim;
  if (options.devices.kind == DeviceOptions::Kind::kCuda || options.devices.replicas > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "movielens_mf runs one replica on the CPU (asked: device ",
        DeviceKindName(options.devices.kind), ", ", options.devices.replicas,
        " replicas): its step is a few hundred dot products, less work than one GPU round trip; "
        "use --device=cpu or auto"));
  }
  c.max_steps = options.max_steps;
  if (c.l2 < 0 || c.bias_l2 < 0) {
    return absl::InvalidArgumentError("movielens_mf: l2 and bias_l2 must be >= 0");
  }
  if (c.shards < 0) return absl::InvalidArgumentError("movielens_mf: shards must be >= 0");
  return std::unique_ptr<Model>(new MatrixFactorization(std::move(c)));
}

}  // namespace pstrain
