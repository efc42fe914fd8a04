#include "models/movielens_mf.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/batches.h"
#include "models/devices.h"
#include "models/movielens_mf_worker.h"
#include "models/ratings_data.h"
#include "ps/sharded_variable.h"

namespace pstrain {
namespace {

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
          spec.initializer.set_seed(config_.ratings.seed * 1000 + (name == kMfUserEmbedding ? 1 : 2));
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
    RETURN_IF_ERROR(table(kMfUserEmbedding, data_.num_users, config_.dim, false));
    RETURN_IF_ERROR(table(kMfItemEmbedding, data_.num_items, config_.dim, true));
    RETURN_IF_ERROR(table(kMfUserBias, data_.num_users, 1, false));
    RETURN_IF_ERROR(table(kMfItemBias, data_.num_items, 1, false));
    RETURN_IF_ERROR(WarmStartBiases(coordinator));
    ASSIGN_OR_RETURN(
        dataset_,
        coordinator->CreatePerWorkerDataset(
            kMfData, {Tensor::String(config_.ratings.path), Tensor::String(config_.ratings.user_col),
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
    return coordinator->Schedule(kMfTrain, {Tensor::Scalar<int64_t>(step)}, {dataset_});
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
                     ScheduleChunks(coordinator, kMfEval, static_cast<int64_t>(ratings.size()),
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
      const char* name = users ? kMfUserBias : kMfItemBias;
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
