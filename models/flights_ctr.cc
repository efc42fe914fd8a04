#include "models/flights_ctr.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_parse.h"
#include "common/status_macros.h"
#include "models/batches.h"
#include "models/binary_metrics.h"
#include "models/devices.h"
#include "ps/sharded_variable.h"
#include "worker/device/device.h"
#include "nlohmann/json.hpp"

namespace pstrain {
namespace {

constexpr char kTrain[] = "flights_ctr/train";
constexpr char kEval[] = "flights_ctr/eval";
constexpr char kData[] = "flights_ctr/data";

// Test examples per evaluation closure.
constexpr int64_t kEvalChunk = 16384;

// How flights become table rows and what the net looks like: what a training step, an
// evaluation and the serving head share. Immutable.
class CtrKeying {
 public:
  CtrKeying(std::vector<int> features, int64_t hash_rows, bool dynamic, CtrNetShape shape)
      : features_(std::move(features)),
        hash_rows_(hash_rows),
        dynamic_(dynamic),
        shape_(shape),
        dense_ids_(std::max(shape.input(), shape.hidden)) {
    std::iota(dense_ids_.begin(), dense_ids_.end(), int64_t{0});
  }

  const std::vector<int>& features() const { return features_; }
  int64_t hash_rows() const { return hash_rows_; }
  // embedding=dynamic: the tables take the features' 64-bit keys.
  bool dynamic() const { return dynamic_; }
  // The rows' ids: 64-bit keys (dynamic) or hashed rows.
  void Ids(absl::Span<const Flight> flights, absl::Span<const int64_t> rows, int64_t* out) const {
    if (dynamic_) {
      KeyFlights(flights, rows, features_, out);
    } else {
      HashFlights(flights, rows, features_, hash_rows_, out);
    }
  }
  const CtrNetShape& shape() const { return shape_; }
  // 0, 1, 2, ...: the row ids of a whole dense variable.
  absl::Span<const int64_t> DenseIds(int64_t rows) const {
    return absl::MakeConstSpan(dense_ids_.data(), static_cast<size_t>(rows));
  }

 private:
  const std::vector<int> features_;
  const int64_t hash_rows_;
  const bool dynamic_;
  const CtrNetShape shape_;
  std::vector<int64_t> dense_ids_;
};

// What a worker needs to train and evaluate: the flights and the settings. Read-only after
// creation (EpochBatches locks itself), so closures share it.
class FlightsResource : public Dataset {
 public:
  FlightsResource(FlightsData data, ReplicaGroup* replicas, Device* host, int64_t batch_size,
                  uint64_t seed, CtrKeying keying)
      : data_(std::move(data)),
        replicas_(replicas),
        host_(host),
        batches_(static_cast<int64_t>(data_.train.size()), batch_size, seed),
        keying_(std::move(keying)) {}

  // The training batches of the first epoch in order: hashed rows [n, features] and labels [n].
  absl::StatusOr<bool> Next(std::vector<Tensor>* element) override {
    int64_t step;
    {
      absl::MutexLock lock(&mu_);
      if (next_step_ >= batches_.steps_per_epoch()) return false;
      step = next_step_++;
    }
    const std::vector<int64_t> rows = batches_.Batch(step);
    const int64_t nf = static_cast<int64_t>(keying_.features().size());
    std::vector<int64_t> ids(rows.size() * nf);
    keying_.Ids(data_.train, rows, ids.data());
    std::vector<float> labels;
    for (int64_t r : rows) labels.push_back(data_.train[r].label);
    const int64_t n = static_cast<int64_t>(rows.size());
    *element = {Tensor::FromVector(ids, Shape{n, nf}), Tensor::FromVector(labels)};
    return true;
  }
  bool shared() const override { return true; }

  const FlightsData& data() const { return data_; }
  // Where the steps compute (models/devices.h).
  ReplicaGroup* replicas() const { return replicas_; }
  // The CPU, where the ids are deduplicated.
  Device* host() const { return host_; }
  EpochBatches& batches() { return batches_; }
  const CtrKeying& keying() const { return keying_; }

 private:
  const FlightsData data_;
  ReplicaGroup* const replicas_;
  Device* const host_;
  EpochBatches batches_;
  const CtrKeying keying_;
  absl::Mutex mu_;
  int64_t next_step_ ABSL_GUARDED_BY(mu_) = 0;
};

// The model's variables, found by name on the ps tasks: the two tables as fixed (hashed) variables
// or dynamic tables, and the dense weights.
struct CtrVars {
  std::optional<ShardedVariable> emb, lr;
  std::optional<DynamicTable> emb_table, lr_table;
  ShardedVariable w1, b1, w2, b2, lr_bias;
};

absl::StatusOr<CtrVars> FindVars(PsConnection* ps, bool dynamic) {
  ASSIGN_OR_RETURN(ShardedVariable w1, ps->Variable(kCtrW1));
  ASSIGN_OR_RETURN(ShardedVariable b1, ps->Variable(kCtrB1));
  ASSIGN_OR_RETURN(ShardedVariable w2, ps->Variable(kCtrW2));
  ASSIGN_OR_RETURN(ShardedVariable b2, ps->Variable(kCtrB2));
  ASSIGN_OR_RETURN(ShardedVariable lr_bias, ps->Variable(kCtrLrBias));
  CtrVars v{std::nullopt, std::nullopt, std::nullopt, std::nullopt, w1, b1, w2, b2, lr_bias};
  if (dynamic) {
    ASSIGN_OR_RETURN(v.emb_table, ps->Table(kCtrEmbedding));
    ASSIGN_OR_RETURN(v.lr_table, ps->Table(kCtrLrWeights));
  } else {
    ASSIGN_OR_RETURN(v.emb, ps->Variable(kCtrEmbedding));
    ASSIGN_OR_RETURN(v.lr, ps->Variable(kCtrLrWeights));
  }
  return v;
}

// The dense weights as pulled for one step.
struct DenseWeights {
  std::vector<float> w1, b1, w2, b2, lr_bias;
  CtrDenseParams params() const {
    return {w1.data(), b1.data(), w2.data(), b2.data(), lr_bias.data()};
  }
};

// One batch's inputs: its flights' hashed rows deduplicated, and what the ps tasks hold for them.
struct Pulled {
  std::vector<int64_t> ids;     // [n, features]
  std::vector<int64_t> unique;  // the first num_unique entries are the distinct ids
  std::vector<int32_t> index;   // [n, features] into unique
  int64_t num_unique = 0;
  std::vector<float> emb, lr, labels;
  DenseWeights dense;
  CtrBatch batch() const {
    return {static_cast<int64_t>(labels.size()), num_unique, index.data(), emb.data(), lr.data(),
            labels.data()};
  }
};

// Keys (or hashes) and dedupes flights[rows], then pulls their rows and every dense weight: one
// lookup request per ps. `step`: the global step of a training pull (dynamic tables store the keys
// they lack then), 0 for evaluation. The ids are deduplicated on `host` (a CPU device), where the
// pull needs them.
absl::Status Pull(const CtrVars& v, const CtrKeying& res, Device* host,
                  absl::Span<const Flight> flights, absl::Span<const int64_t> rows, int64_t step,
                  Pulled* p) {
  const int64_t n = static_cast<int64_t>(rows.size());
  const CtrNetShape& shape = res.shape();
  const int64_t f = shape.features;
  p->ids.resize(n * f);
  res.Ids(flights, rows, p->ids.data());
  p->labels.resize(n);
  for (int64_t i = 0; i < n; ++i) p->labels[i] = flights[rows[i]].label;
  p->unique.resize(n * f);
  p->index.resize(n * f);
  ASSIGN_OR_RETURN(p->num_unique,
                   host->Unique(n * f, p->ids.data(), p->unique.data(), p->index.data()));
  const auto unique = absl::MakeConstSpan(p->unique.data(), static_cast<size_t>(p->num_unique));
  p->emb.resize(p->num_unique * shape.dim);
  p->lr.resize(p->num_unique);
  DenseWeights& d = p->dense;
  d.w1.resize(shape.w1_size());
  d.b1.resize(shape.hidden);
  d.w2.resize(shape.hidden);
  d.b2.resize(1);
  d.lr_bias.resize(1);
  auto out = [](std::vector<float>& x) { return reinterpret_cast<char*>(x.data()); };
  LookupBatch lookup;
  if (v.emb_table.has_value()) {
    const LookupMode mode = step > 0 ? LookupMode::kTrain : LookupMode::kEval;
    lookup.set_step(step);
    RETURN_IF_ERROR(lookup.Add(*v.emb_table, unique, out(p->emb), mode));
    RETURN_IF_ERROR(lookup.Add(*v.lr_table, unique, out(p->lr), mode));
  } else {
    RETURN_IF_ERROR(lookup.Add(*v.emb, unique, out(p->emb)));
    RETURN_IF_ERROR(lookup.Add(*v.lr, unique, out(p->lr)));
  }
  RETURN_IF_ERROR(lookup.Add(v.w1, res.DenseIds(shape.input()), out(d.w1)));
  RETURN_IF_ERROR(lookup.Add(v.b1, res.DenseIds(1), out(d.b1)));
  RETURN_IF_ERROR(lookup.Add(v.w2, res.DenseIds(shape.hidden), out(d.w2)));
  RETURN_IF_ERROR(lookup.Add(v.b2, res.DenseIds(1), out(d.b2)));
  RETURN_IF_ERROR(lookup.Add(v.lr_bias, res.DenseIds(1), out(d.lr_bias)));
  return lookup.Run();
}

FlightsResource* ResourceOf(ClosureContext& ctx) {
  return ctx.datasets.size() == 1 ? dynamic_cast<FlightsResource*>(ctx.datasets[0]) : nullptr;
}

// Args: the step. Returns {mean loss, examples, the baseline's mean loss}.
absl::StatusOr<std::vector<Tensor>> TrainStep(ClosureContext& ctx, absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t step, IntArg(args, 0, kTrain));
  FlightsResource* res = ResourceOf(ctx);
  if (res == nullptr) return absl::InvalidArgumentError(absl::StrCat(kTrain, " needs ", kData));
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat(kTrain, ": step ", step, " < 0"));
  ASSIGN_OR_RETURN(CtrVars v, FindVars(ctx.ps, res->keying().dynamic()));
  const std::vector<int64_t> rows =
      ReplicaShare(res->batches().Batch(step), ctx.replica_index, ctx.num_replicas);
  Pulled p;
  const int64_t global_step = step + 1;  // 1-based: 0 means "no step" to a dynamic table
  RETURN_IF_ERROR(Pull(v, res->keying(), res->host(), res->data().train, rows, global_step, &p));
  std::vector<float> grads;
  float loss = 0, lr_loss = 0;
  RETURN_IF_ERROR(CtrReplicatedStep(res->replicas(), res->keying().shape(), p.batch(),
                                    p.dense.params(), &grads, &loss, &lr_loss));

  const CtrGradLayout layout(res->keying().shape(), p.num_unique);
  auto bytes = [&](int64_t begin, int64_t end) {
    return absl::string_view(reinterpret_cast<const char*>(grads.data() + begin),
                             (end - begin) * sizeof(float));
  };
  const auto unique = absl::MakeConstSpan(p.unique.data(), static_cast<size_t>(p.num_unique));
  UpdateBatch update;
  update.set_step(global_step);  // recency and TTL of dynamic tables; every schedule's argument
  if (v.emb_table.has_value()) {
    RETURN_IF_ERROR(update.AddSparse(*v.emb_table, UpdateOp::APPLY_GRADIENT, unique,
                                     bytes(layout.emb, layout.lr).data()));
    RETURN_IF_ERROR(update.AddSparse(*v.lr_table, UpdateOp::APPLY_GRADIENT, unique,
                                     bytes(layout.lr, layout.w1).data()));
  } else {
    RETURN_IF_ERROR(update.AddSparse(*v.emb, UpdateOp::APPLY_GRADIENT, unique,
                                     bytes(layout.emb, layout.lr).data()));
    RETURN_IF_ERROR(update.AddSparse(*v.lr, UpdateOp::APPLY_GRADIENT, unique,
                                     bytes(layout.lr, layout.w1).data()));
  }
  RETURN_IF_ERROR(
      update.AddDense(v.w1, UpdateOp::APPLY_GRADIENT, bytes(layout.w1, layout.b1)));
  RETURN_IF_ERROR(
      update.AddDense(v.b1, UpdateOp::APPLY_GRADIENT, bytes(layout.b1, layout.w2)));
  RETURN_IF_ERROR(
      update.AddDense(v.w2, UpdateOp::APPLY_GRADIENT, bytes(layout.w2, layout.b2)));
  RETURN_IF_ERROR(
      update.AddDense(v.b2, UpdateOp::APPLY_GRADIENT, bytes(layout.b2, layout.lr_bias)));
  RETURN_IF_ERROR(update.AddDense(v.lr_bias, UpdateOp::APPLY_GRADIENT,
                                  bytes(layout.lr_bias, layout.size)));
  RETURN_IF_ERROR(update.Run());
  return std::vector<Tensor>{Tensor::Scalar<float>(loss),
                             Tensor::Scalar<int64_t>(static_cast<int64_t>(rows.size())),
                             Tensor::Scalar<float>(lr_loss)};
}

// Args: the split (0: test, 1: validation), its rows [begin, end). Returns {the model's logits, the
// baseline's logits}, one per row.
absl::StatusOr<std::vector<Tensor>> EvalChunk(ClosureContext& ctx, absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t split, IntArg(args, 0, kEval));
  ASSIGN_OR_RETURN(int64_t begin, IntArg(args, 1, kEval));
  ASSIGN_OR_RETURN(int64_t end, IntArg(args, 2, kEval));
  FlightsResource* res = ResourceOf(ctx);
  if (res == nullptr) return absl::InvalidArgumentError(absl::StrCat(kEval, " needs ", kData));
  if (split != 0 && split != 1) {
    return absl::InvalidArgumentError(absl::StrCat(kEval, ": split ", split, " is not 0 or 1"));
  }
  const std::vector<Flight>& test = split == 0 ? res->data().test : res->data().validation;
  if (begin < 0 || end < begin || end > static_cast<int64_t>(test.size())) {
    return absl::InvalidArgumentError(absl::StrCat(kEval, ": rows [", begin, ", ", end,
                                                   ") outside the ", test.size(), " flights"));
  }
  ASSIGN_OR_RETURN(CtrVars v, FindVars(ctx.ps, res->keying().dynamic()));
  std::vector<int64_t> rows(end - begin);
  std::iota(rows.begin(), rows.end(), begin);
  Pulled p;
  RETURN_IF_ERROR(Pull(v, res->keying(), res->host(), test, rows, /*step=*/0, &p));
  std::vector<float> logits, lr_logits;
  RETURN_IF_ERROR(CtrReplicatedForward(res->replicas(), res->keying().shape(), p.batch(),
                                       p.dense.params(), &logits, &lr_logits));
  return std::vector<Tensor>{Tensor::FromVector(logits), Tensor::FromVector(lr_logits)};
}

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
                                Tensor::String(f.validation_path)};
    for (Tensor& t : DeviceArgs(config_.devices)) args.push_back(std::move(t));
    ASSIGN_OR_RETURN(dataset_, coordinator->CreatePerWorkerDataset(kData, std::move(args)));
    return absl::OkStatus();
  }

  int64_t total_steps() const override { return total_steps_; }
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }
  int64_t examples_per_step() const override { return config_.batch_size; }

  absl::StatusOr<RemoteValue> ScheduleStep(ClusterCoordinator* coordinator, int64_t step) override {
    return coordinator->Schedule(kTrain, {Tensor::Scalar<int64_t>(step)}, {dataset_});
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
      m.notes["baseline"] = "logistic regression on the same hashed rows, trained in the same steps";
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
                     ScheduleChunks(coordinator, kEval, n, kEvalChunk,
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
        return absl::InternalError(absl::StrCat(kEval, " did not return two float tensors"));
      }
      const std::vector<float> a = out[0].ToVector<float>(), b = out[1].ToVector<float>();
      logits->insert(logits->end(), a.begin(), a.end());
      lr_logits->insert(lr_logits->end(), b.begin(), b.end());
    }
    if (static_cast<int64_t>(logits->size()) != n || static_cast<int64_t>(lr_logits->size()) != n) {
      return absl::InternalError(
          absl::StrCat(kEval, ": ", logits->size(), " predictions for ", n, " flights"));
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

absl::Status RegisterFlightsCtr(ClosureRegistry* registry,
                                std::shared_ptr<ReplicaGroups> replica_groups) {
  RETURN_IF_ERROR(registry->RegisterClosure(kTrain, TrainStep));
  RETURN_IF_ERROR(registry->RegisterClosure(kEval, EvalChunk));
  return registry->RegisterDataset(
      kData,
      [replica_groups](int /*worker_index*/, int /*num_workers*/,
                       absl::Span<const Tensor> args) -> absl::StatusOr<std::unique_ptr<Dataset>> {
        FlightsOptions options;
        ASSIGN_OR_RETURN(options.path, StringArg(args, 0, kData));
        ASSIGN_OR_RETURN(int64_t test_from_month, IntArg(args, 1, kData));
        ASSIGN_OR_RETURN(int64_t delay_threshold, IntArg(args, 2, kData));
        ASSIGN_OR_RETURN(options.max_rows, IntArg(args, 3, kData));
        ASSIGN_OR_RETURN(int64_t seed, IntArg(args, 4, kData));
        ASSIGN_OR_RETURN(int64_t batch_size, IntArg(args, 5, kData));
        ASSIGN_OR_RETURN(int64_t hash_rows, IntArg(args, 6, kData));
        CtrNetShape shape;
        ASSIGN_OR_RETURN(shape.dim, IntArg(args, 7, kData));
        ASSIGN_OR_RETURN(shape.hidden, IntArg(args, 8, kData));
        ASSIGN_OR_RETURN(std::string feature_names, StringArg(args, 9, kData));
        ASSIGN_OR_RETURN(std::vector<int> features, ParseFlightFeatures(feature_names));
        shape.features = static_cast<int64_t>(features.size());
        ASSIGN_OR_RETURN(int64_t dynamic, IntArg(args, 10, kData));
        ASSIGN_OR_RETURN(options.validation_fraction, FloatArg(args, 11, kData));
        ASSIGN_OR_RETURN(options.validation_path, StringArg(args, 12, kData));
        ASSIGN_OR_RETURN(WorkerDevices devices, DevicesFromArgs(args, 13, kData));
        if (batch_size < 1 || hash_rows < 1 || shape.dim < 1 || shape.hidden < 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              kData, ": batch_size, hash_rows, dim and hidden must be >= 1"));
        }
        options.test_from_month = static_cast<int>(test_from_month);
        options.delay_threshold = static_cast<int>(delay_threshold);
        ASSIGN_OR_RETURN(FlightsData data, LoadFlights(options));
        ASSIGN_OR_RETURN(ReplicaGroup * replicas, replica_groups->Get(devices));
        ASSIGN_OR_RETURN(Device * host, replica_groups->Cpu());
        return std::unique_ptr<Dataset>(new FlightsResource(
            std::move(data), replicas, host, batch_size, static_cast<uint64_t>(seed),
            CtrKeying(std::move(features), hash_rows, dynamic != 0, shape)));
      });
}

absl::StatusOr<std::unique_ptr<Model>> CreateFlightsCtr(const ModelOptions& options) {
  ASSIGN_OR_RETURN(FlightsCtrConfig config, FlightsCtrConfigFromOptions(options));
  return std::unique_ptr<Model>(new FlightsCtr(std::move(config)));
}

namespace {

// Predicts from the flights' fields: the training step's keys and lookups (an evaluation lookup:
// unseen keys read the default row), its forward pass on one CPU replica (its own group).
class FlightsServingHead final : public ServingHead {
 public:
  FlightsServingHead(CtrKeying keying, std::vector<bool> known_days,
                     std::unique_ptr<ReplicaGroup> replicas)
      : keying_(std::move(keying)),
        known_days_(std::move(known_days)),
        replicas_(std::move(replicas)) {}

  std::vector<std::string> columns() const override {
    return {"date", "distance", "origin", "destination"};
  }
  std::vector<std::string> outputs() const override { return {"probability"}; }

  absl::Status Predict(const RawExamples& examples, PsConnection* ps,
                       std::vector<float>* out) const override {
    int at[4];
    const std::vector<std::string> wanted = columns();
    for (int c = 0; c < 4; ++c) {
      auto it = std::find(examples.columns.begin(), examples.columns.end(), wanted[c]);
      if (it == examples.columns.end()) {
        return absl::InvalidArgumentError(absl::StrCat("flights_ctr: no column ", wanted[c],
                                                       " (it needs date, distance, origin, "
                                                       "destination)"));
      }
      at[c] = static_cast<int>(it - examples.columns.begin());
    }
    const int64_t n = static_cast<int64_t>(examples.rows.size());
    std::vector<Flight> flights;
    flights.reserve(n);
    static const std::string kEmpty;
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<std::string>& row = examples.rows[i];
      auto field = [&](int c) -> const std::string& {
        return at[c] < static_cast<int>(row.size()) ? row[at[c]] : kEmpty;
      };
      absl::StatusOr<Flight> f = ParseFlight(field(0), field(1), field(2), field(3));
      if (!f.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("flights_ctr: row ", i, ": ", f.status().message()));
      }
      f->day_known = known_days_[f->day_of_year];
      flights.push_back(*f);
    }
    out->clear();
    if (n == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(CtrVars v, FindVars(ps, keying_.dynamic()));
    std::vector<int64_t> rows(n);
    std::iota(rows.begin(), rows.end(), int64_t{0});
    Pulled p;
    RETURN_IF_ERROR(Pull(v, keying_, replicas_->device(0), flights, rows, /*step=*/0, &p));
    std::vector<float> logits, lr_logits;
    RETURN_IF_ERROR(CtrReplicatedForward(replicas_.get(), keying_.shape(), p.batch(), p.dense.params(),
                                         &logits, &lr_logits));
    out->resize(n);
    for (int64_t i = 0; i < n; ++i) (*out)[i] = 1.0f / (1.0f + std::exp(-logits[i]));
    return absl::OkStatus();
  }

 private:
  const CtrKeying keying_;
  const std::vector<bool> known_days_;
  const std::unique_ptr<ReplicaGroup> replicas_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ServingHead>> CreateFlightsCtrServingHead(
    const std::string& serving_config) {
  auto bad = [](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("flights_ctr serving config: ", why));
  };
  absl::StatusOr<nlohmann::json> parsed = ParseJson(serving_config);
  if (!parsed.ok()) return bad(parsed.status().message());
  const nlohmann::json& j = *parsed;
  if (!j.is_object() || !j.value("features", nlohmann::json()).is_string() ||
      !j.value("dynamic", nlohmann::json()).is_boolean() ||
      !j.value("hash_rows", nlohmann::json()).is_number_integer() ||
      !j.value("dim", nlohmann::json()).is_number_integer() ||
      !j.value("hidden", nlohmann::json()).is_number_integer() ||
      !j.value("known_days", nlohmann::json()).is_array()) {
    return bad("expected features, dynamic, hash_rows, dim, hidden and known_days");
  }
  ASSIGN_OR_RETURN(std::vector<int> features,
                   ParseFlightFeatures(j["features"].get<std::string>()));
  CtrNetShape shape;
  shape.features = static_cast<int64_t>(features.size());
  shape.dim = j["dim"].get<int64_t>();
  shape.hidden = j["hidden"].get<int64_t>();
  const int64_t hash_rows = j["hash_rows"].get<int64_t>();
  if (shape.dim < 1 || shape.hidden < 1 || hash_rows < 1) {
    return bad("dim, hidden and hash_rows must be >= 1");
  }
  std::vector<bool> known(367);
  for (const nlohmann::json& d : j["known_days"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > 366) {
      return bad(absl::StrCat("known day ", d.dump(), " is not in [1, 366]"));
    }
    known[d.get<int64_t>()] = true;
  }
  ReplicaGroupOptions cpu;
  cpu.kind = DeviceOptions::Kind::kCpu;
  cpu.num_replicas = 1;
  ASSIGN_OR_RETURN(std::unique_ptr<ReplicaGroup> replicas, ReplicaGroup::Create(cpu));
  return std::unique_ptr<ServingHead>(new FlightsServingHead(
      CtrKeying(std::move(features), hash_rows, j["dynamic"].get<bool>(), shape), std::move(known),
      std::move(replicas)));
}

}  // namespace pstrain
