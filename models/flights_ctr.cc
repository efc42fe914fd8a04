#include "models/flights_ctr.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/batches.h"
#include "models/binary_metrics.h"
#include "models/flights_ctr_worker.h"
#include "nlohmann/json.hpp"
#include "ps/sharded_variable.h"

namespace pstrain {
namespace {

// Test examples per evaluation closure.
constexpr int64_t kEvalChunk = 16384;

class FlightsCtr final : public Model {
 public:
  explicit FlightsCtr(FlightsCtrConfig config) : config_(std::move(config)) {}

  std::string name() const override { return kFlightsCtrModel; }

  absl::Status Setup(ClusterCoordinator* coordinator) override {
    ASSIGN_OR_RETURN(data_, LoadFlights(config_.flights));
    const int64_t train = static_cast<int64_t>(data_.train.size());
    steps_per_epoch_ = (train + config_.batch_size - 1) / config_.batch_size;
    total_steps_ = steps_per_epoch_ * config_.epochs;
    if (config_.max_steps > 0) total_steps_ = std::min(total_steps_, config_.max_steps);
    for (const TableSpec& spec : FlightsCtrTables(config_)) {
      ASSIGN_OR_RETURN(DynamicTable t, coordinator->variables()->CreateTable(spec));
      if (spec.name == kCtrEmbedding) embedding_ = t;
    }
    for (const VariableSpec& spec : FlightsCtrVariables(config_, coordinator->ps()->num_ps(),
                                                        data_.train_positive_rate)) {
      ASSIGN_OR_RETURN(ShardedVariable v, coordinator->variables()->Create(spec));
      if (spec.name == kCtrEmbedding) embedding_shards_ = static_cast<int>(v.shards().size());
    }
    const FlightsOptions& f = config_.flights;
    std::vector<Tensor> args = {Tensor::String(f.path), Tensor::Scalar<int64_t>(f.test_from_month),
                                Tensor::Scalar<int64_t>(f.delay_threshold),
                                Tensor::Scalar<int64_t>(f.max_rows),
                                Tensor::Scalar<int64_t>(static_cast<int64_t>(config_.seed)),
                                Tensor::Scalar<int64_t>(config_.batch_size),
                                Tensor::Scalar<int64_t>(config_.hash_rows),
                                Tensor::Scalar<int64_t>(config_.shape.dim),
                                Tensor::Scalar<int64_t>(config_.shape.hidden),
                                Tensor::String(FlightFeatureNames(config_.features)),
                                Tensor::Scalar<int64_t>(config_.dynamic ? 1 : 0),
                                Tensor::Scalar<float>(static_cast<float>(f.validation_fraction)),
                                Tensor::String(f.validation_path),
                                Tensor::Scalar<int64_t>(config_.dense_turns)};
    for (Tensor& t : DeviceArgs(config_.devices)) args.push_back(std::move(t));
    ASSIGN_OR_RETURN(dataset_,
                     coordinator->CreatePerWorkerDataset(kFlightsCtrData, std::move(args)));
    return absl::OkStatus();
  }

  int64_t total_steps() const override { return total_steps_; }
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }
  int64_t examples_per_step() const override { return config_.batch_size; }

  absl::StatusOr<RemoteValue> ScheduleStep(ClusterCoordinator* coordinator, int64_t step) override {
    return coordinator->Schedule(kFlightsCtrTrain, {Tensor::Scalar<int64_t>(step)}, {dataset_});
  }

  bool has_validation() const override { return !data_.validation.empty(); }
  std::string validation_metric() const override { return "val_auc"; }
  absl::StatusOr<ModelMetrics> Validate(ClusterCoordinator* coordinator) override {
    std::vector<float> logits, lr_logits, labels;
    RETURN_IF_ERROR(Score(coordinator, 1, &logits, &lr_logits, &labels));
    ModelMetrics m;
    m.values["val_auc"] = BinaryAuc(logits, labels);
    m.values["val_logloss"] = BinaryLogLoss(logits, labels);
    m.values["val_baseline_lr_auc"] = BinaryAuc(lr_logits, labels);
    m.values["val_baseline_lr_logloss"] = BinaryLogLoss(lr_logits, labels);
    return m;
  }

  absl::StatusOr<std::string> ServingConfig() const override {
    nlohmann::json j;
    j["features"] = FlightFeatureNames(config_.features);
    j["dynamic"] = config_.dynamic;
    j["hash_rows"] = config_.hash_rows;
    j["dim"] = config_.shape.dim;
    j["hidden"] = config_.shape.hidden;
    // The days of year training had: any other day reads as unknown (as the test flights do).
    std::vector<bool> days(367);
    for (const Flight& f : data_.train) days[f.day_of_year] = true;
    nlohmann::json known = nlohmann::json::array();
    for (int d = 1; d <= 366; ++d) {
      if (days[d]) known.push_back(d);
    }
    j["known_days"] = known;
    return j.dump();
  }

  absl::StatusOr<ModelMetrics> Evaluate(ClusterCoordinator* coordinator) override {
    std::vector<float> logits, lr_logits, labels;
    RETURN_IF_ERROR(Score(coordinator, 0, &logits, &lr_logits, &labels));
    const int64_t n = static_cast<int64_t>(labels.size());
    ModelMetrics m;
    m.values["test_auc"] = BinaryAuc(logits, labels);
    m.values["test_logloss"] = BinaryLogLoss(logits, labels);
    m.values["baseline_lr_test_auc"] = BinaryAuc(lr_logits, labels);
    m.values["baseline_lr_test_logloss"] = BinaryLogLoss(lr_logits, labels);
    // What always predicting the training positive rate would score.
    const double p = data_.train_positive_rate;
    std::vector<float> prior(n, static_cast<float>(std::log(p / (1 - p))));
    m.values["prior_test_logloss"] = BinaryLogLoss(prior, labels);
    m.notes["train_flights"] = absl::StrCat(data_.train.size());
    m.notes["test_flights"] = absl::StrCat(data_.test.size());
    m.notes["validation_flights"] = absl::StrCat(data_.validation.size());
    m.notes["train_positive_rate"] = absl::StrCat(data_.train_positive_rate);
    m.notes["test_positive_rate"] = absl::StrCat(data_.test_positive_rate);
    m.notes["airports"] = absl::StrCat(data_.airports);
    m.notes["features"] = FlightFeatureNames(config_.features);
    if (embedding_.has_value()) {
      ASSIGN_OR_RETURN(int64_t keys, embedding_->Size());
      m.notes["embedding"] = absl::StrCat("dynamic, ", keys, " keys x ", config_.shape.dim,
                                          " in ", embedding_->num_shards(), " shards");
      m.notes["baseline"] = "logistic regression on the same keys, trained in the same steps";
    } else {
      m.notes["embedding"] = absl::StrCat("hashed, ", config_.hash_rows, "x", config_.shape.dim,
                                          " in ", embedding_shards_, " shards");
      m.notes["baseline"] =
          "logistic regression on the same hashed rows, trained in the same steps";
    }
    return m;
  }

 private:
  // The logits of the model and the baseline on split 0 (test) or 1 (validation), and its labels.
  absl::Status Score(ClusterCoordinator* coordinator, int split, std::vector<float>* logits,
                     std::vector<float>* lr_logits, std::vector<float>* labels) {
    const std::vector<Flight>& flights = split == 0 ? data_.test : data_.validation;
    const int64_t n = static_cast<int64_t>(flights.size());
    ASSIGN_OR_RETURN(std::vector<RemoteValue> values,
                     ScheduleChunks(coordinator, kFlightsCtrEval, n, kEvalChunk,
                                    [split](int64_t begin, int64_t end) {
                                      return std::vector<Tensor>{Tensor::Scalar<int64_t>(split),
                                                                 Tensor::Scalar<int64_t>(begin),
                                                                 Tensor::Scalar<int64_t>(end)};
                                    },
                                    dataset_));
    logits->clear();
    lr_logits->clear();
    logits->reserve(n);
    lr_logits->reserve(n);
    for (const RemoteValue& v : values) {
      ASSIGN_OR_RETURN(std::vector<Tensor> out, v.Fetch());
      if (out.size() != 2 || !out[0].Is<float>() || !out[1].Is<float>()) {
        return absl::InternalError(
            absl::StrCat(kFlightsCtrEval, " did not return two float tensors"));
      }
      const std::vector<float> a = out[0].ToVector<float>(), b = out[1].ToVector<float>();
      logits->insert(logits->end(), a.begin(), a.end());
      lr_logits->insert(lr_logits->end(), b.begin(), b.end());
    }
    if (static_cast<int64_t>(logits->size()) != n || static_cast<int64_t>(lr_logits->size()) != n) {
      return absl::InternalError(
          absl::StrCat(kFlightsCtrEval, ": ", logits->size(), " predictions for ", n, " flights"));
    }
    labels->clear();
    labels->reserve(n);
    for (const Flight& f : flights) labels->push_back(f.label);
    return absl::OkStatus();
  }

  const FlightsCtrConfig config_;
  FlightsData data_;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  int embedding_shards_ = 0;
  std::optional<DynamicTable> embedding_;
  PerWorkerDataset dataset_;
};

}  // namespace

absl::StatusOr<FlightsCtrConfig> FlightsCtrConfigFromOptions(const ModelOptions& options) {
  FlightsCtrConfig c;
  ExtraOptions extra(kFlightsCtrModel, options.extra);
  const std::string embedding = extra.GetString("embedding", "dynamic");
  ASSIGN_OR_RETURN(int64_t min_count, extra.GetInt("min_count", 0));
  ASSIGN_OR_RETURN(c.ttl_steps, extra.GetInt("ttl_steps", 0));
  ASSIGN_OR_RETURN(c.max_keys, extra.GetInt("max_keys", 0));
  const std::string row_format = extra.GetString("row_format", "float32");
  const std::string slot_format = extra.GetString("slot_format", "float32");
  ASSIGN_OR_RETURN(c.features, ParseFlightFeatures(extra.GetString("features", "all")));
  c.shape.features = static_cast<int64_t>(c.features.size());
  c.flights.path = options.data.empty() ? "data/flights/flights.csv" : options.data;
  // Rounded to float as the workers get it (a float32 closure argument): the same split everywhere.
  c.flights.validation_fraction = static_cast<float>(options.validation_fraction);
  c.flights.validation_path = options.validation_data;
  ASSIGN_OR_RETURN(c.hash_rows, extra.GetInt("hash_rows", c.hash_rows));
  ASSIGN_OR_RETURN(c.shape.hidden, extra.GetInt("hidden", c.shape.hidden));
  ASSIGN_OR_RETURN(c.partitioner,
                   ParsePartitionerKind(extra.GetString("partitioner", "min_size")));
  ASSIGN_OR_RETURN(c.min_shard_bytes, extra.GetInt("min_shard_bytes", c.min_shard_bytes));
  ASSIGN_OR_RETURN(c.max_shard_bytes, extra.GetInt("max_shard_bytes", c.max_shard_bytes));
  ASSIGN_OR_RETURN(int64_t max_shards, extra.GetInt("max_shards", 0));
  ASSIGN_OR_RETURN(c.init_stddev, extra.GetDouble("init_stddev", c.init_stddev));
  ASSIGN_OR_RETURN(c.dense_learning_rate,
                   extra.GetDouble("dense_learning_rate", c.dense_learning_rate));
  ASSIGN_OR_RETURN(int64_t test_from_month, extra.GetInt("test_from_month", 6));
  ASSIGN_OR_RETURN(int64_t delay_threshold, extra.GetInt("delay_threshold", 15));
  RETURN_IF_ERROR(extra.Finish());
  if (options.epochs > 0) c.epochs = options.epochs;
  if (options.batch_size > 0) c.batch_size = options.batch_size;
  if (options.learning_rate > 0) c.learning_rate = options.learning_rate;
  c.lr_schedule = options.lr_schedule;
  if (options.embedding_dim > 0) c.shape.dim = options.embedding_dim;
  c.max_steps = options.max_steps;
  c.seed = options.seed;
  c.devices = options.devices;
  c.dense_turns = options.dense_turns;
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(kFlightsCtrModel, ": ", what));
  };
  if (embedding != "dynamic" && embedding != "hashed") {
    return bad(absl::StrCat("embedding=", embedding, " must be dynamic or hashed"));
  }
  c.dynamic = embedding == "dynamic";
  if (c.dynamic) {
    for (const char* hashed_only :
         {"hash_rows", "partitioner", "min_shard_bytes", "max_shard_bytes", "max_shards"}) {
      if (options.extra.count(hashed_only)) {
        return bad(absl::StrCat(hashed_only, " is for embedding=hashed (the default, dynamic, "
                                "has no rows to split)"));
      }
    }
  }
  if (!c.dynamic && (min_count != 0 || c.ttl_steps != 0 || c.max_keys != 0)) {
    return bad("min_count, ttl_steps and max_keys are for embedding=dynamic");
  }
  if (min_count < 0 || min_count > 255) return bad("min_count must be in [0, 255]");
  c.admit_min_count = static_cast<int>(min_count);
  if (c.ttl_steps < 0 || c.max_keys < 0) return bad("ttl_steps and max_keys must be >= 0");
  if (!ParseRowFormat(row_format, &c.row_format).ok()) {
    return bad(absl::StrCat("row_format=", row_format, " must be float32, float16, bfloat16 or int8"));
  }
  if (!ParseSlotFormat(slot_format, &c.slot_format).ok()) {
    return bad(absl::StrCat("slot_format=", slot_format, " must be float32, float16 or bfloat16"));
  }
  if (!c.dynamic && (c.row_format != ROW_FLOAT32 || c.slot_format != ROW_FLOAT32)) {
    return bad("row_format and slot_format are for embedding=dynamic");
  }
  if (c.hash_rows < 1 || c.hash_rows > (int64_t{1} << 40)) {
    return bad("hash_rows must be in [1, 2^40]");
  }
  if (c.shape.hidden < 1) return bad("hidden must be >= 1");
  if (c.partitioner != PartitionerKind::kMinSize && c.partitioner != PartitionerKind::kMaxSize) {
    return bad("partitioner must be min_size or max_size");
  }
  if (c.min_shard_bytes < 1 || c.max_shard_bytes < 1) {
    return bad("min_shard_bytes and max_shard_bytes must be >= 1");
  }
  if (max_shards < 0 || max_shards > 1 << 20) return bad("max_shards must be in [0, 2^20]");
  c.max_shards = static_cast<int>(max_shards);
  if (!(c.init_stddev >= 0)) return bad("init_stddev must be >= 0");
  if (!(c.dense_learning_rate > 0)) return bad("dense_learning_rate must be > 0");
  if (test_from_month < 2 || test_from_month > 12) return bad("test_from_month must be in [2, 12]");
  c.flights.test_from_month = static_cast<int>(test_from_month);
  if (delay_threshold < -100000 || delay_threshold > 100000) {
    return bad("delay_threshold must be within +-100000 minutes");
  }
  c.flights.delay_threshold = static_cast<int>(delay_threshold);
  return c;
}

std::vector<VariableSpec> FlightsCtrVariables(const FlightsCtrConfig& c, int num_ps,
                                              double train_positive_rate) {
  OptimizerDef adagrad;
  adagrad.set_kind(OptimizerDef::ADAGRAD);
  adagrad.set_learning_rate(c.learning_rate);
  OptimizerDef dense_adagrad = adagrad;
  dense_adagrad.set_learning_rate(c.dense_learning_rate);
  ApplyLrSchedule(c.lr_schedule, &adagrad);
  ApplyLrSchedule(c.lr_schedule, &dense_adagrad);
  PartitionerOptions partitioner;
  partitioner.kind = c.partitioner;
  partitioner.min_shard_bytes = c.min_shard_bytes;
  partitioner.max_shard_bytes = c.max_shard_bytes;
  if (c.partitioner == PartitionerKind::kMinSize) {
    partitioner.max_shards = c.max_shards > 0 ? c.max_shards : std::max(num_ps, 1);
  } else {
    partitioner.max_shards = c.max_shards;  // 0: no limit
  }
  auto normal = [&](double stddev, uint64_t salt) {
    InitializerDef init;
    init.set_kind(InitializerDef::TRUNCATED_NORMAL);
    init.set_stddev(stddev);
    init.set_seed(c.seed * 1000 + salt);
    return init;
  };
  InitializerDef prior;
  const double p = std::clamp(train_positive_rate, 1e-6, 1 - 1e-6);
  prior.set_kind(InitializerDef::CONSTANT);
  prior.set_value(std::log(p / (1 - p)));
  auto spec = [&](const char* name, Shape shape, InitializerDef init, bool hashed) {
    VariableSpec s;
    s.name = name;
    s.shape = std::move(shape);
    s.initializer = std::move(init);
    s.optimizer = hashed ? adagrad : dense_adagrad;
    if (hashed) s.partitioner = partitioner;
    return s;
  };
  const CtrNetShape& shape = c.shape;
  std::vector<VariableSpec> specs;
  if (!c.dynamic) {
    specs.push_back(spec(kCtrEmbedding, {c.hash_rows, shape.dim}, normal(c.init_stddev, 1), true));
    specs.push_back(spec(kCtrLrWeights, {c.hash_rows, 1}, InitializerDef(), true));
  }
  for (VariableSpec& s : std::vector<VariableSpec>{
      spec(kCtrW1, {shape.input(), shape.hidden},
           normal(std::sqrt(2.0 / static_cast<double>(shape.input())), 2), false),
      spec(kCtrB1, {1, shape.hidden}, InitializerDef(), false),
      spec(kCtrW2, {shape.hidden, 1}, normal(1.0 / std::sqrt(static_cast<double>(shape.hidden)), 3),
           false),
      spec(kCtrB2, {1, 1}, prior, false),
      spec(kCtrLrBias, {1, 1}, prior, false),
  }) {
    specs.push_back(std::move(s));
  }
  return specs;
}

std::vector<TableSpec> FlightsCtrTables(const FlightsCtrConfig& c) {
  if (!c.dynamic) return {};
  OptimizerDef adagrad;
  adagrad.set_kind(OptimizerDef::ADAGRAD);
  adagrad.set_learning_rate(c.learning_rate);
  ApplyLrSchedule(c.lr_schedule, &adagrad);
  DynamicTableDef options;
  options.set_admit_min_count(c.admit_min_count);
  options.set_ttl_steps(c.ttl_steps);
  options.set_max_rows(c.max_keys);
  options.set_row_format(c.row_format);
  options.set_slot_format(c.slot_format);
  TableSpec emb;
  emb.name = kCtrEmbedding;
  emb.dim = c.shape.dim;
  emb.initializer.set_kind(InitializerDef::TRUNCATED_NORMAL);
  emb.initializer.set_stddev(c.init_stddev);
  emb.initializer.set_seed(c.seed * 1000 + 1);
  emb.optimizer = adagrad;
  emb.options = options;
  TableSpec lr = emb;
  lr.name = kCtrLrWeights;
  lr.dim = 1;
  lr.initializer = InitializerDef();
  return {emb, lr};
}

absl::StatusOr<std::unique_ptr<Model>> CreateFlightsCtr(const ModelOptions& options) {
  ASSIGN_OR_RETURN(FlightsCtrConfig config, FlightsCtrConfigFromOptions(options));
  return std::unique_ptr<Model>(new FlightsCtr(std::move(config)));
}

}  // namespace pstrain
