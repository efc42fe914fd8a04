#include "models/tabular/tabular_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"
#include "common/json_parse.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "models/batches.h"
#include "models/devices.h"
#include "models/tabular/data_plan.h"
#include "models/tabular/example_stream.h"
#include "models/tabular/feature_spec.h"
#include "models/tabular/tabular_net.h"
#include "models/tabular/transforms.h"
#include "nlohmann/json.hpp"
#include "ps/sharded_variable.h"

namespace pstrain {
namespace {

using tabular::Batch;
using tabular::DataContext;
using tabular::DataPlan;
using tabular::ExampleLayout;
using tabular::ModelType;
using tabular::NetBatch;
using tabular::NetGrads;
using tabular::NetOutput;
using tabular::NetParams;
using tabular::NetShape;
using tabular::Range;
using tabular::Spec;
using tabular::Split;
using tabular::TabularNet;
using tabular::Task;
using tabular::TrainStream;

constexpr char kTrain[] = "tabular/train";
constexpr char kEval[] = "tabular/eval";
constexpr char kData[] = "tabular/data";
constexpr int kBins = 8192;
constexpr int64_t kEvalBatch = 2048;

std::string TableName(const char* base, int64_t min_count) {
  return min_count == 0 ? std::string(base) : absl::StrCat(base, "_min", min_count);
}
std::string WeightName(int l) { return absl::StrCat("tabular/deep/w", l + 1); }
std::string BiasName(int l) { return absl::StrCat("tabular/deep/b", l + 1); }
constexpr char kWideDense[] = "tabular/wide/dense";
constexpr char kWideBias[] = "tabular/wide/bias";
constexpr char kBaseDense[] = "tabular/baseline/dense";
constexpr char kBaseBias[] = "tabular/baseline/bias";

// The outputs per example: one, or one per class.
int Outputs(const Spec& spec, const tabular::Stats& stats) {
  return spec.label.task == Task::kMulticlass ? static_cast<int>(stats.classes.size()) : 1;
}

// The prior's logits: what always predicting the training split's label distribution scores.
std::vector<float> PriorLogits(Task task, const tabular::Stats& stats) {
  switch (task) {
    case Task::kBinary: {
      const double p = std::clamp(stats.label_mean, 1e-6, 1 - 1e-6);
      return {static_cast<float>(std::log(p / (1 - p)))};
    }
    case Task::kRegression:
      return {0.0f};  // the standardized mean
    case Task::kMulticlass: {
      std::vector<float> out;
      for (double r : stats.class_rates) out.push_back(static_cast<float>(std::log(std::max(r, 1e-9))));
      return out;
    }
  }
  return {0.0f};
}

// Everything a worker needs: the spec, the plan, its stream, and where it computes. Thread-safe.
class TabularResource : public Dataset {
 public:
  // The replica group comes from `replica_groups`.
  static absl::StatusOr<std::unique_ptr<TabularResource>> Create(int worker,
                                                                 const nlohmann::json& job,
                                                                 ReplicaGroups* replica_groups) {
    std::unique_ptr<TabularResource> r(new TabularResource);
    if (!job.is_object() || !job.value("spec", nlohmann::json()).is_string() ||
        !job.value("spec_path", nlohmann::json()).is_string() || !job.contains("plan")) {
      return absl::InvalidArgumentError(absl::StrCat(kData, ": a malformed job"));
    }
    ASSIGN_OR_RETURN(r->spec_, tabular::ParseSpec(job["spec"].get<std::string>(),
                                                  job["spec_path"].get<std::string>()));
    r->spec_.model.embedding_dim = job.value("embedding_dim", r->spec_.model.embedding_dim);
    ASSIGN_OR_RETURN(r->plan_, DataPlan::FromJson(job["plan"], r->spec_.features.size()));
    DataContext::Options co;
    co.seed = job.value("seed", uint64_t{1});
    co.validation_fraction = job.value("validation_fraction", 0.1);
    co.skip_bad_rows = job.value("skip_bad_rows", false);
    r->context_ = std::make_unique<DataContext>(r->spec_, r->plan_, co);
    r->batch_size_ = job.value("batch_size", int64_t{256});
    if (worker < 0 || worker >= static_cast<int>(r->plan_.shares.size())) {
      return absl::FailedPreconditionError(absl::StrCat(
          kData, ": worker ", worker, " but the plan has shares for ",
          r->plan_.shares.size(), " workers (the cluster changed since the scan)"));
    }
    TrainStream::Options so;
    so.worker = worker;
    so.steps_per_epoch = job.value("steps_per_epoch", int64_t{1});
    so.shuffle_buffer = job.value("shuffle_buffer", int64_t{65536});
    so.interleave = job.value("interleave", 64);
    r->stream_ = std::make_unique<TrainStream>(r->context_.get(), r->plan_.shares[worker], so);
    const ExampleLayout& layout = r->layout();
    r->shape_ = NetShape(r->spec_, layout, Outputs(r->spec_, r->plan_.stats));
    // One table set per distinct min_count; each slot's set.
    for (int f : layout.embedded) {
      const int64_t mc = r->spec_.features[f].min_count;
      auto it = std::find(r->groups_.begin(), r->groups_.end(), mc);
      const int g = static_cast<int>(it - r->groups_.begin());
      if (it == r->groups_.end()) r->groups_.push_back(mc);
      for (int s = 0; s < layout.slots[f]; ++s) r->slot_group_.push_back(g);
    }
    WorkerDevices devices;
    devices.kind = static_cast<DeviceOptions::Kind>(job.value("device_kind", 0));
    devices.replicas = 1;
    ASSIGN_OR_RETURN(ReplicaGroup * group, replica_groups->Get(devices));
    r->device_ = group->device(0);
    r->prior_ = PriorLogits(r->spec_.label.task, r->plan_.stats);
    return r;
  }

  // One batch of training examples as tensors: keys [n, slots], dense [n, inputs], labels [n].
  absl::StatusOr<bool> Next(std::vector<Tensor>* element) override {
    Batch b;
    RETURN_IF_ERROR(stream_->Next(-1, batch_size_, &b));
    const ExampleLayout& l = layout();
    *element = {Tensor::FromVector(b.keys, Shape{b.n, l.num_slots}),
                Tensor::FromVector(b.dense, Shape{b.n, l.num_dense}),
                Tensor::FromVector(b.labels)};
    return true;
  }
  bool shared() const override { return true; }

  const Spec& spec() const { return spec_; }
  const DataPlan& plan() const { return plan_; }
  const tabular::Stats& stats() const { return plan_.stats; }
  DataContext* context() { return context_.get(); }
  TrainStream& stream() { return *stream_; }
  const ExampleLayout& layout() const { return context_->transformer().layout(); }
  const NetShape& shape() const { return shape_; }
  int64_t batch_size() const { return batch_size_; }
  Device* device() const { return device_; }
  const std::vector<int64_t>& groups() const { return groups_; }
  const std::vector<int>& slot_group() const { return slot_group_; }
  const std::vector<float>& prior() const { return prior_; }

 private:
  TabularResource() = default;
  Spec spec_;
  DataPlan plan_;
  std::unique_ptr<DataContext> context_;
  std::unique_ptr<TrainStream> stream_;
  int64_t batch_size_ = 256;
  NetShape shape_;
  std::vector<int64_t> groups_;   // min_count of each table set
  std::vector<int> slot_group_;   // per slot
  Device* device_ = nullptr;
  std::vector<float> prior_;
};

absl::StatusOr<TabularResource*> ResourceOf(ClosureContext& ctx, const char* closure) {
  auto* r = ctx.datasets.size() == 1 ? dynamic_cast<TabularResource*>(ctx.datasets[0]) : nullptr;
  if (r == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(closure, " takes the ", kData, " resource"));
  }
  return r;
}

// One step's rows and weights, pulled from the ps tasks, and the handles to push to.
struct Pulled {
  std::vector<int32_t> slot_rows;
  std::vector<std::vector<int64_t>> keys;  // per table set, its distinct keys
  std::vector<int64_t> offset;             // per table set, its first row
  int64_t num_unique = 0;
  std::vector<float> emb, wide, base, labels;
  std::vector<std::vector<float>> w, b;
  std::vector<float> wide_dense, wide_bias, base_dense, base_bias;
  std::vector<DynamicTable> emb_t, wide_t, base_t;  // per table set
  std::vector<ShardedVariable> w_v, b_v;
  std::optional<ShardedVariable> wide_dense_v, wide_bias_v, base_dense_v, base_bias_v;
  NetBatch batch;
  NetParams params;
};

// Deduplicates the batch's keys, pulls every row and weight in one lookup request per ps, and
// points the net's batch and params at them. `step` (1-based; 0 for evaluation) goes with it.
// `Res` is what the net's inputs need: a worker's TabularResource, or the serving head (both
// give layout(), shape(), groups(), slot_group() and stats()).
template <typename Res>
absl::Status Pull(const Res& res, PsConnection* ps, Batch& b, int64_t step, LookupMode mode,
                  Pulled* p) {
  const ExampleLayout& layout = res.layout();
  const NetShape& shape = res.shape();
  const int S = layout.num_slots;
  const int64_t d = shape.dim, K = shape.outputs;
  const size_t groups = res.groups().size();
  std::vector<absl::flat_hash_map<int64_t, int32_t>> index(groups);
  p->keys.assign(groups, {});
  p->slot_rows.assign(b.n * S, -1);
  std::vector<int32_t> local(b.n * S, -1);
  for (int64_t i = 0; i < b.n; ++i) {
    for (int s = 0; s < S; ++s) {
      const int64_t key = b.keys[i * S + s];
      if (key == tabular::kNoKey) continue;
      const int g = res.slot_group()[s];
      auto [it, inserted] = index[g].try_emplace(key, static_cast<int32_t>(p->keys[g].size()));
      if (inserted) p->keys[g].push_back(key);
      local[i * S + s] = it->second;
    }
  }
  p->offset.assign(groups, 0);
  p->num_unique = 0;
  for (size_t g = 0; g < groups; ++g) {
    p->offset[g] = p->num_unique;
    p->num_unique += static_cast<int64_t>(p->keys[g].size());
  }
  for (int64_t i = 0; i < b.n * S; ++i) {
    if (local[i] >= 0) {
      p->slot_rows[i] = static_cast<int32_t>(p->offset[res.slot_group()[i % S]] + local[i]);
    }
  }
  auto out = [](std::vector<float>& v, int64_t at) { return reinterpret_cast<char*>(v.data() + at); };
  LookupBatch lookup;
  lookup.set_step(step);
  p->emb.assign(shape.deep ? p->num_unique * d : 0, 0.0f);
  p->wide.assign(shape.wide ? p->num_unique * K : 0, 0.0f);
  p->base.assign(shape.baseline ? p->num_unique * K : 0, 0.0f);
  p->emb_t.clear();
  p->wide_t.clear();
  p->base_t.clear();
  for (size_t g = 0; g < groups; ++g) {
    const int64_t mc = res.groups()[g];
    if (shape.deep) {
      ASSIGN_OR_RETURN(DynamicTable t, ps->Table(TableName("tabular/embedding", mc)));
      p->emb_t.push_back(t);
      if (!p->keys[g].empty()) {
        RETURN_IF_ERROR(lookup.Add(p->emb_t.back(), p->keys[g], out(p->emb, p->offset[g] * d), mode));
      }
    }
    if (shape.wide) {
      ASSIGN_OR_RETURN(DynamicTable t, ps->Table(TableName("tabular/wide", mc)));
      p->wide_t.push_back(t);
      if (!p->keys[g].empty()) {
        RETURN_IF_ERROR(lookup.Add(p->wide_t.back(), p->keys[g], out(p->wide, p->offset[g] * K), mode));
      }
    }
    if (shape.baseline) {
      ASSIGN_OR_RETURN(DynamicTable t, ps->Table(TableName("tabular/baseline", mc)));
      p->base_t.push_back(t);
      if (!p->keys[g].empty()) {
        RETURN_IF_ERROR(lookup.Add(p->base_t.back(), p->keys[g], out(p->base, p->offset[g] * K), mode));
      }
    }
  }
  // Dense weights: every row of each.
  static const std::vector<int64_t>* const kRowIds = [] {
    auto* ids = new std::vector<int64_t>(1 << 20);
    std::iota(ids->begin(), ids->end(), 0);
    return ids;
  }();
  auto dense = [&](const std::string& name, std::vector<float>* values,
                   std::optional<ShardedVariable>* handle) -> absl::Status {
    ASSIGN_OR_RETURN(ShardedVariable v, ps->Variable(name));
    *handle = v;
    const int64_t rows = v.num_rows();
    if (rows > static_cast<int64_t>(kRowIds->size())) {
      return absl::InvalidArgumentError(absl::StrCat(name, " has over 2^20 rows"));
    }
    values->assign(rows * (v.row_bytes() / 4), 0.0f);
    return lookup.Add(**handle, absl::MakeConstSpan(kRowIds->data(), rows),
                      reinterpret_cast<char*>(values->data()));
  };
  const std::vector<int64_t> widths = shape.widths();
  const int layers = static_cast<int>(widths.size()) - 1;
  p->w.assign(shape.deep ? layers : 0, {});
  p->b.assign(shape.deep ? layers : 0, {});
  p->w_v.clear();
  p->b_v.clear();
  if (shape.deep) {
    for (int l = 0; l < layers; ++l) {
      std::optional<ShardedVariable> w, bias;
      RETURN_IF_ERROR(dense(WeightName(l), &p->w[l], &w));
      RETURN_IF_ERROR(dense(BiasName(l), &p->b[l], &bias));
      p->w_v.push_back(*w);
      p->b_v.push_back(*bias);
    }
  }
  if (shape.wide) {
    if (shape.dense > 0) RETURN_IF_ERROR(dense(kWideDense, &p->wide_dense, &p->wide_dense_v));
    RETURN_IF_ERROR(dense(kWideBias, &p->wide_bias, &p->wide_bias_v));
  }
  if (shape.baseline) {
    if (shape.dense > 0) RETURN_IF_ERROR(dense(kBaseDense, &p->base_dense, &p->base_dense_v));
    RETURN_IF_ERROR(dense(kBaseBias, &p->base_bias, &p->base_bias_v));
  }
  RETURN_IF_ERROR(lookup.Run());

  // The net's view. Regression learns the standardized target.
  p->labels = b.labels;
  if (shape.task == Task::kRegression) {
    const tabular::Stats& st = res.stats();
    const double sd = st.label_stddev > 0 ? st.label_stddev : 1;
    for (float& y : p->labels) y = static_cast<float>((y - st.label_mean) / sd);
  }
  NetBatch& nb = p->batch;
  nb.n = b.n;
  nb.num_unique = p->num_unique;
  nb.slot_rows = p->slot_rows.data();
  nb.emb = p->emb.data();
  nb.wide = p->wide.data();
  nb.base = p->base.data();
  nb.dense = b.dense.data();
  nb.labels = p->labels.data();
  NetParams& np = p->params;
  np.w.clear();
  np.b.clear();
  for (int l = 0; l < static_cast<int>(p->w.size()); ++l) {
    np.w.push_back(p->w[l].data());
    np.b.push_back(p->b[l].data());
  }
  np.wide_dense = p->wide_dense.data();
  np.wide_bias = p->wide_bias.data();
  np.base_dense = p->base_dense.data();
  np.base_bias = p->base_bias.data();
  return absl::OkStatus();
}

// Pushes the gradients in one update request per ps.
absl::Status Push(TabularResource& res, const Pulled& p, const NetGrads& grads, int64_t step) {
  const NetShape& shape = res.shape();
  const int64_t d = shape.dim, K = shape.outputs;
  UpdateBatch update;
  update.set_step(step);
  auto rows = [](const std::vector<float>& v, int64_t at) {
    return reinterpret_cast<const char*>(v.data() + at);
  };
  for (size_t g = 0; g < p.keys.size(); ++g) {
    if (p.keys[g].empty()) continue;
    if (shape.deep) {
      RETURN_IF_ERROR(update.AddSparse(p.emb_t[g], UpdateOp::APPLY_GRADIENT, p.keys[g],
                                       rows(grads.emb, p.offset[g] * d)));
    }
    if (shape.wide) {
      RETURN_IF_ERROR(update.AddSparse(p.wide_t[g], UpdateOp::APPLY_GRADIENT, p.keys[g],
                                       rows(grads.wide, p.offset[g] * K)));
    }
    if (shape.baseline) {
      RETURN_IF_ERROR(update.AddSparse(p.base_t[g], UpdateOp::APPLY_GRADIENT, p.keys[g],
                                       rows(grads.base, p.offset[g] * K)));
    }
  }
  auto bytes = [](const std::vector<float>& v) {
    return absl::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  };
  for (size_t l = 0; l < p.w_v.size(); ++l) {
    RETURN_IF_ERROR(update.AddDense(p.w_v[l], UpdateOp::APPLY_GRADIENT, bytes(grads.w[l])));
    RETURN_IF_ERROR(update.AddDense(p.b_v[l], UpdateOp::APPLY_GRADIENT, bytes(grads.b[l])));
  }
  if (p.wide_dense_v.has_value()) {
    RETURN_IF_ERROR(update.AddDense(*p.wide_dense_v, UpdateOp::APPLY_GRADIENT, bytes(grads.wide_dense)));
  }
  if (p.wide_bias_v.has_value()) {
    RETURN_IF_ERROR(update.AddDense(*p.wide_bias_v, UpdateOp::APPLY_GRADIENT, bytes(grads.wide_bias)));
  }
  if (p.base_dense_v.has_value()) {
    RETURN_IF_ERROR(update.AddDense(*p.base_dense_v, UpdateOp::APPLY_GRADIENT, bytes(grads.base_dense)));
  }
  if (p.base_bias_v.has_value()) {
    RETURN_IF_ERROR(update.AddDense(*p.base_bias_v, UpdateOp::APPLY_GRADIENT, bytes(grads.base_bias)));
  }
  return update.Run();
}

// Args: the step. Returns {mean loss, examples, the baseline's mean loss}.
absl::StatusOr<std::vector<Tensor>> TrainStep(ClosureContext& ctx, absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t step, IntArg(args, 0, kTrain));
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat(kTrain, ": step ", step, " < 0"));
  ASSIGN_OR_RETURN(TabularResource * res, ResourceOf(ctx, kTrain));
  Batch batch;
  RETURN_IF_ERROR(res->stream().Next(step, res->batch_size(), &batch));
  Pulled p;
  const int64_t global_step = step + 1;  // 1-based: 0 means "no step" to the ps
  RETURN_IF_ERROR(Pull(*res, ctx.ps, batch, global_step, LookupMode::kTrain, &p));
  TabularNet net(res->device(), res->spec(), res->layout(), res->shape());
  NetOutput out;
  NetGrads grads;
  RETURN_IF_ERROR(net.Run(p.batch, p.params, &out, &grads));
  RETURN_IF_ERROR(Push(*res, p, grads, global_step));
  return std::vector<Tensor>{Tensor::Scalar<float>(static_cast<float>(out.loss)),
                             Tensor::Scalar<int64_t>(batch.n),
                             Tensor::Scalar<float>(static_cast<float>(out.base_loss))};
}

// An evaluation's sums over some rows, as the eval closure returns them and the coordinator adds
// them up: losses and squared errors of the model, the baseline and the prior; correct argmaxes;
// and (binary) histograms of the predicted probability by label, for the AUC.
struct EvalSums {
  double loss = 0, base_loss = 0, prior_loss = 0;
  double sq = 0, base_sq = 0, prior_sq = 0;
  int64_t count = 0, correct = 0, base_correct = 0, prior_correct = 0;
  std::vector<int64_t> hist = std::vector<int64_t>(2 * kBins, 0);
  std::vector<int64_t> base_hist = std::vector<int64_t>(2 * kBins, 0);

  std::vector<Tensor> ToTensors() const {
    return {Tensor::FromVector(std::vector<float>{
                static_cast<float>(loss), static_cast<float>(base_loss),
                static_cast<float>(prior_loss), static_cast<float>(sq),
                static_cast<float>(base_sq), static_cast<float>(prior_sq)}),
            Tensor::FromVector(std::vector<int64_t>{count, correct, base_correct, prior_correct}),
            Tensor::FromVector(hist), Tensor::FromVector(base_hist)};
  }
  absl::Status Add(const std::vector<Tensor>& t) {
    if (t.size() != 4 || !t[0].Is<float>() || t[0].num_elements() != 6 || !t[1].Is<int64_t>() ||
        t[1].num_elements() != 4 || !t[2].Is<int64_t>() || t[2].num_elements() != 2 * kBins ||
        !t[3].Is<int64_t>() || t[3].num_elements() != 2 * kBins) {
      return absl::InternalError(absl::StrCat(kEval, " returned malformed sums"));
    }
    const std::vector<float> f = t[0].ToVector<float>();
    const std::vector<int64_t> c = t[1].ToVector<int64_t>();
    loss += f[0];
    base_loss += f[1];
    prior_loss += f[2];
    sq += f[3];
    base_sq += f[4];
    prior_sq += f[5];
    count += c[0];
    correct += c[1];
    base_correct += c[2];
    prior_correct += c[3];
    const std::vector<int64_t> h = t[2].ToVector<int64_t>(), bh = t[3].ToVector<int64_t>();
    for (int i = 0; i < 2 * kBins; ++i) {
      hist[i] += h[i];
      base_hist[i] += bh[i];
    }
    return absl::OkStatus();
  }
};

// The AUC of a histogram: negatives' bins [0, kBins), positives' [kBins, 2 kBins); pairs in the
// same bin count half.
double HistogramAuc(const std::vector<int64_t>& h) {
  double pos = 0, neg = 0, pairs = 0;
  for (int b = 0; b < kBins; ++b) {
    const double n = static_cast<double>(h[b]), p = static_cast<double>(h[kBins + b]);
    pairs += p * neg + 0.5 * p * n;
    pos += p;
    neg += n;
  }
  return pos > 0 && neg > 0 ? pairs / (pos * neg) : 0.5;
}

int Argmax(const float* x, int k) { return static_cast<int>(std::max_element(x, x + k) - x); }

// Adds `logits` (K per row) of rows with `labels` (original units) to the sums.
void Accumulate(const TabularResource& res, int64_t n, const float* labels, const float* logits,
                const float* base_logits, EvalSums* s) {
  const NetShape& shape = res.shape();
  const int K = shape.outputs;
  const tabular::Stats& st = res.plan().stats;
  const double sd = st.label_stddev > 0 ? st.label_stddev : 1;
  std::vector<float> net_labels(labels, labels + n);
  if (shape.task == Task::kRegression) {
    for (float& y : net_labels) y = static_cast<float>((y - st.label_mean) / sd);
  }
  std::vector<float> prior(n * K);
  for (int64_t i = 0; i < n; ++i) std::copy(res.prior().begin(), res.prior().end(), prior.begin() + i * K);
  s->count += n;
  s->loss += TabularNet::Loss(shape.task, n, K, logits, net_labels.data(), nullptr);
  s->prior_loss += TabularNet::Loss(shape.task, n, K, prior.data(), net_labels.data(), nullptr);
  if (base_logits != nullptr) {
    s->base_loss += TabularNet::Loss(shape.task, n, K, base_logits, net_labels.data(), nullptr);
  }
  for (int64_t i = 0; i < n; ++i) {
    switch (shape.task) {
      case Task::kBinary: {
        auto bin = [](float logit) {
          const double prob = 1.0 / (1.0 + std::exp(-static_cast<double>(logit)));
          return std::min(kBins - 1, static_cast<int>(prob * kBins));
        };
        const int offset = labels[i] > 0.5f ? kBins : 0;
        ++s->hist[offset + bin(logits[i])];
        if (base_logits != nullptr) ++s->base_hist[offset + bin(base_logits[i])];
        break;
      }
      case Task::kRegression: {
        auto se = [&](float logit) {
          const double e = logit * sd + st.label_mean - labels[i];
          return e * e;
        };
        s->sq += se(logits[i]);
        s->prior_sq += se(0.0f);
        if (base_logits != nullptr) s->base_sq += se(base_logits[i]);
        break;
      }
      case Task::kMulticlass: {
        const int y = static_cast<int>(labels[i]);
        s->correct += Argmax(logits + i * K, K) == y;
        s->prior_correct += Argmax(prior.data(), K) == y;
        if (base_logits != nullptr) s->base_correct += Argmax(base_logits + i * K, K) == y;
        break;
      }
    }
  }
}

// Args: the split (1: validation, 2: test), the range (file, begin, end, first_line, rows,
// train_rows). Returns the EvalSums of the split's rows in the range.
absl::StatusOr<std::vector<Tensor>> EvalChunk(ClosureContext& ctx, absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t split, IntArg(args, 0, kEval));
  if (split != 1 && split != 2) {
    return absl::InvalidArgumentError(absl::StrCat(kEval, ": split ", split, " is not 1 or 2"));
  }
  Range range;
  int64_t v[6];
  for (int i = 0; i < 6; ++i) {
    ASSIGN_OR_RETURN(v[i], IntArg(args, 1 + i, kEval));
  }
  range.file = static_cast<int>(v[0]);
  range.begin = v[1];
  range.end = v[2];
  range.first_line = v[3];
  range.rows = v[4];
  range.train_rows = v[5];
  ASSIGN_OR_RETURN(TabularResource * res, ResourceOf(ctx, kEval));
  if (range.file < 0 || range.file >= static_cast<int>(res->plan().files.size()) ||
      range.begin < 0 || range.end < range.begin || range.first_line < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kEval, ": a range out of bounds"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<tabular::RangeReader> reader,
                   tabular::RangeReader::Open(res->context(), range, static_cast<Split>(split)));
  const ExampleLayout& layout = res->layout();
  TabularNet net(res->device(), res->spec(), layout, res->shape());
  EvalSums sums;
  Batch batch;
  bool more = true;
  while (more) {
    batch.Resize(kEvalBatch, layout);
    int64_t n = 0;
    while (n < kEvalBatch) {
      ASSIGN_OR_RETURN(bool got, reader->Next(batch.At(n, layout)));
      if (!got) {
        more = false;
        break;
      }
      ++n;
    }
    if (n == 0) break;
    batch.Resize(n, layout);
    Pulled p;
    RETURN_IF_ERROR(Pull(*res, ctx.ps, batch, /*step=*/0, LookupMode::kEval, &p));
    NetOutput out;
    RETURN_IF_ERROR(net.Run(p.batch, p.params, &out, nullptr));
    Accumulate(*res, n, batch.labels.data(), out.logits.data(),
               res->shape().baseline ? out.base_logits.data() : nullptr, &sums);
  }
  return sums.ToTensors();
}

struct TabularConfig {
  std::string spec_path;
  std::string data;
  std::string validation_data;
  double validation_fraction = 0.1;
  int epochs = 5;
  int64_t max_steps = 0;
  int64_t batch_size = 256;
  double learning_rate = 0;  // > 0: the embeddings' and wide parts' rate
  RelativeSchedule lr_schedule;
  int64_t embedding_dim = 0;
  uint64_t seed = 1;
  bool skip_bad_rows = false;
  int64_t shuffle_buffer = 0;               // examples; 0: shuffle_memory's worth
  int64_t shuffle_memory = int64_t{256} << 20;
  int interleave = 64;
  WorkerDevices devices;
};

class TabularModel final : public Model {
 public:
  TabularModel(TabularConfig config, Spec spec) : config_(std::move(config)), spec_(std::move(spec)) {}

  std::string name() const override { return kTabularModel; }

  absl::Status Setup(ClusterCoordinator* coordinator) override {
    tabular::ScanOptions so;
    so.data = config_.data;
    so.validation_data = config_.validation_data;
    so.validation_fraction = config_.validation_fraction;
    so.seed = config_.seed;
    so.workers = coordinator->num_workers();
    so.skip_bad_rows = config_.skip_bad_rows;
    const absl::Time scan_start = absl::Now();
    ASSIGN_OR_RETURN(plan_, tabular::Scan(spec_, so));
    scan_seconds_ = absl::ToDoubleSeconds(absl::Now() - scan_start);
    LOG(INFO) << "tabular: scanned " << plan_.files.size() << " file(s) in " << scan_seconds_
              << " s: " << plan_.rows[0] << " training, " << plan_.rows[1] << " validation, "
              << plan_.rows[2] << " test rows, " << plan_.bad_rows << " bad";
    for (const std::string& note : plan_.notes) LOG(WARNING) << "tabular: " << note;
    const ExampleLayout layout(spec_);
    shape_ = NetShape(spec_, layout, Outputs(spec_, plan_.stats));
    steps_per_epoch_ = (plan_.rows[0] + config_.batch_size - 1) / config_.batch_size;
    total_steps_ = steps_per_epoch_ * config_.epochs;
    if (config_.max_steps > 0) total_steps_ = std::min(total_steps_, config_.max_steps);
    RETURN_IF_ERROR(CreateVariables(coordinator, layout));

    nlohmann::json job;
    job["spec"] = spec_.text;
    job["spec_path"] = spec_.path;
    job["embedding_dim"] = spec_.model.embedding_dim;
    job["plan"] = plan_.ToJson();
    job["seed"] = config_.seed;
    job["validation_fraction"] = config_.validation_fraction;
    job["skip_bad_rows"] = config_.skip_bad_rows;
    job["batch_size"] = config_.batch_size;
    job["steps_per_epoch"] = steps_per_epoch_;
    job["shuffle_buffer"] = ShuffleBuffer(layout);
    job["interleave"] = config_.interleave;
    job["device_kind"] = static_cast<int>(config_.devices.kind);
    ASSIGN_OR_RETURN(dataset_, coordinator->CreatePerWorkerDataset(kData, {Tensor::String(job.dump())}));
    return absl::OkStatus();
  }

  int64_t total_steps() const override { return total_steps_; }
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }
  int64_t examples_per_step() const override { return config_.batch_size; }

  absl::StatusOr<RemoteValue> ScheduleStep(ClusterCoordinator* coordinator, int64_t step) override {
    return coordinator->Schedule(kTrain, {Tensor::Scalar<int64_t>(step)}, {dataset_});
  }

  bool has_validation() const override { return plan_.rows[1] > 0; }
  std::string validation_metric() const override {
    switch (spec_.label.task) {
      case Task::kBinary: return "val_auc";
      case Task::kRegression: return "val_rmse";
      case Task::kMulticlass: return "val_accuracy";
    }
    return "val_loss";
  }

  absl::StatusOr<ModelMetrics> Validate(ClusterCoordinator* coordinator) override {
    ModelMetrics m;
    RETURN_IF_ERROR(Score(coordinator, Split::kValidation, "val_", &m));
    return m;
  }

  absl::StatusOr<std::string> ServingConfig() const override {
    nlohmann::json j;
    j["spec"] = spec_.text;
    j["spec_path"] = spec_.path;
    j["embedding_dim"] = spec_.model.embedding_dim;
    j["stats"] = plan_.stats.ToJson();
    j["seed"] = config_.seed;
    return j.dump();
  }

  absl::StatusOr<ModelMetrics> Evaluate(ClusterCoordinator* coordinator) override {
    ModelMetrics m;
    RETURN_IF_ERROR(Score(coordinator, Split::kTest, "test_", &m));
    m.notes["task"] = tabular::TaskName(spec_.label.task);
    m.notes["spec"] = spec_.path;
    m.notes["model_type"] = spec_.model.type == ModelType::kWide     ? "wide"
                            : spec_.model.type == ModelType::kDeep   ? "deep"
                                                                     : "wide_and_deep";
    m.notes["files"] = absl::StrCat(plan_.files.size());
    m.notes["train_rows"] = absl::StrCat(plan_.rows[0]);
    m.notes["validation_rows"] = absl::StrCat(plan_.rows[1]);
    m.notes["test_rows"] = absl::StrCat(plan_.rows[2]);
    m.notes["bad_rows"] = absl::StrCat(plan_.bad_rows);
    if (!plan_.bad_row_examples.empty()) {
      m.notes["bad_row_examples"] = absl::StrJoin(plan_.bad_row_examples, " | ");
    }
    m.notes["scan_seconds"] = absl::StrFormat("%.2f", scan_seconds_);
    const ExampleLayout layout(spec_);
    m.notes["features"] = absl::StrCat(spec_.features.size(), " (", layout.embedded.size(),
                                       " embedded in ", layout.num_slots, " slots, ",
                                       layout.num_dense, " dense)");
    m.notes["shuffle_buffer"] = absl::StrCat(ShuffleBuffer(layout), " examples (",
                                             ShuffleBuffer(layout) * ExampleBytes(layout),
                                             " bytes) per worker");
    if (!plan_.notes.empty()) m.notes["data_notes"] = absl::StrJoin(plan_.notes, " | ");
    return m;
  }

 private:
  static int64_t ExampleBytes(const ExampleLayout& layout) {
    return 8 * layout.num_slots + 4 * layout.num_dense + 4;
  }
  // Examples per worker's shuffle buffer.
  int64_t ShuffleBuffer(const ExampleLayout& layout) const {
    if (config_.shuffle_buffer > 0) return config_.shuffle_buffer;
    return std::max<int64_t>(1024, config_.shuffle_memory / ExampleBytes(layout));
  }

  absl::Status CreateVariables(ClusterCoordinator* coordinator, const ExampleLayout& layout) {
    OptimizerDef emb_opt = spec_.model.embeddings, wide_opt = spec_.model.wide,
                 dense_opt = spec_.model.dense;
    if (config_.learning_rate > 0) {
      emb_opt.set_learning_rate(config_.learning_rate);
      wide_opt.set_learning_rate(config_.learning_rate);
    }
    if (!spec_.model.embeddings_schedule) ApplyLrSchedule(config_.lr_schedule, &emb_opt);
    if (!spec_.model.wide_schedule) ApplyLrSchedule(config_.lr_schedule, &wide_opt);
    if (!spec_.model.dense_schedule) ApplyLrSchedule(config_.lr_schedule, &dense_opt);
    std::vector<int64_t> groups;
    for (int f : layout.embedded) {
      const int64_t mc = spec_.features[f].min_count;
      if (std::find(groups.begin(), groups.end(), mc) == groups.end()) groups.push_back(mc);
    }
    const int shards = coordinator->ps()->num_ps();
    const int K = shape_.outputs;
    for (int64_t mc : groups) {
      if (mc > 255) {
        return absl::InvalidArgumentError(absl::StrCat(spec_.path, ": min_count ", mc,
                                                       " is over 255 (the ps counts to 255)"));
      }
      DynamicTableDef options;
      options.set_admit_min_count(static_cast<int>(mc));
      auto table = [&](const char* base, int64_t dim, const OptimizerDef& opt, bool random,
                       uint64_t salt) -> absl::Status {
        TableSpec t;
        t.name = TableName(base, mc);
        t.dim = dim;
        t.num_shards = shards;
        t.optimizer = opt;
        t.options = options;
        if (random && spec_.model.init_stddev > 0) {
          t.initializer.set_kind(InitializerDef::TRUNCATED_NORMAL);
          t.initializer.set_stddev(spec_.model.init_stddev);
          t.initializer.set_seed(config_.seed * 1000 + salt + static_cast<uint64_t>(mc));
        }
        return coordinator->variables()->CreateTable(t).status();
      };
      if (shape_.deep) RETURN_IF_ERROR(table("tabular/embedding", shape_.dim, emb_opt, true, 1));
      if (shape_.wide) RETURN_IF_ERROR(table("tabular/wide", K, wide_opt, false, 2));
      if (shape_.baseline) RETURN_IF_ERROR(table("tabular/baseline", K, wide_opt, false, 3));
    }
    const std::vector<float> prior = PriorLogits(spec_.label.task, plan_.stats);
    auto var = [&](const std::string& name, Shape shape, const OptimizerDef& opt,
                   InitializerDef init) -> absl::Status {
      VariableSpec v;
      v.name = name;
      v.shape = std::move(shape);
      v.optimizer = opt;
      v.initializer = std::move(init);
      return coordinator->variables()->Create(v).status();
    };
    auto normal = [&](double stddev, uint64_t salt) {
      InitializerDef init;
      init.set_kind(InitializerDef::TRUNCATED_NORMAL);
      init.set_stddev(stddev);
      init.set_seed(config_.seed * 1000 + salt);
      return init;
    };
    if (shape_.deep) {
      const std::vector<int64_t> widths = shape_.widths();
      const int layers = static_cast<int>(widths.size()) - 1;
      for (int l = 0; l < layers; ++l) {
        // He-normal into ReLUs; the output layer 1 / sqrt(fan-in) (as flights_ctr's).
        const double fan_in = static_cast<double>(widths[l]);
        const double stddev = l + 1 < layers ? std::sqrt(2.0 / fan_in) : 1.0 / std::sqrt(fan_in);
        RETURN_IF_ERROR(var(WeightName(l), {widths[l], widths[l + 1]}, dense_opt,
                            normal(stddev, 10 + l)));
        RETURN_IF_ERROR(var(BiasName(l), {widths[l + 1]}, dense_opt, InitializerDef()));
      }
      // The output bias starts at the prior (wide & deep: the deep part carries it).
      RETURN_IF_ERROR(coordinator->ps()->Variable(BiasName(layers - 1)).status());
      ASSIGN_OR_RETURN(ShardedVariable out_bias, coordinator->ps()->Variable(BiasName(layers - 1)));
      RETURN_IF_ERROR(out_bias.AssignAll(absl::string_view(
          reinterpret_cast<const char*>(prior.data()), prior.size() * sizeof(float))));
    }
    auto wide_vars = [&](const char* dense_name, const char* bias_name, bool carry_prior) -> absl::Status {
      if (shape_.dense > 0) {
        RETURN_IF_ERROR(var(dense_name, {shape_.dense, K}, wide_opt, InitializerDef()));
      }
      RETURN_IF_ERROR(var(bias_name, {K}, wide_opt, InitializerDef()));
      if (!carry_prior) return absl::OkStatus();
      ASSIGN_OR_RETURN(ShardedVariable bias, coordinator->ps()->Variable(bias_name));
      return bias.AssignAll(absl::string_view(reinterpret_cast<const char*>(prior.data()),
                                              prior.size() * sizeof(float)));
    };
    if (shape_.wide) RETURN_IF_ERROR(wide_vars(kWideDense, kWideBias, !shape_.deep));
    if (shape_.baseline) RETURN_IF_ERROR(wide_vars(kBaseDense, kBaseBias, true));
    return absl::OkStatus();
  }

  // The split's metrics, "<prefix>auc" and so on, from eval closures over its units (scheduled a
  // few per worker at a time, their sums added as they come).
  absl::Status Score(ClusterCoordinator* coordinator, Split split, const std::string& prefix,
                     ModelMetrics* m) {
    const std::vector<Range> units = plan_.EvalUnits(split);
    EvalSums sums;
    const size_t wave = static_cast<size_t>(std::max(1, coordinator->num_workers()) * 4);
    for (size_t first = 0; first < units.size(); first += wave) {
      std::vector<RemoteValue> values;
      for (size_t u = first; u < std::min(units.size(), first + wave); ++u) {
        const Range& r = units[u];
        ASSIGN_OR_RETURN(
            RemoteValue v,
            coordinator->Schedule(
                kEval,
                {Tensor::Scalar<int64_t>(static_cast<int64_t>(split)),
                 Tensor::Scalar<int64_t>(r.file), Tensor::Scalar<int64_t>(r.begin),
                 Tensor::Scalar<int64_t>(r.end), Tensor::Scalar<int64_t>(r.first_line),
                 Tensor::Scalar<int64_t>(r.rows), Tensor::Scalar<int64_t>(r.train_rows)},
                {dataset_}));
        values.push_back(std::move(v));
      }
      for (const RemoteValue& v : values) {
        ASSIGN_OR_RETURN(std::vector<Tensor> out, v.Fetch());
        RETURN_IF_ERROR(sums.Add(out));
      }
    }
    const double n = static_cast<double>(std::max<int64_t>(sums.count, 1));
    const bool baseline = shape_.baseline;
    switch (spec_.label.task) {
      case Task::kBinary:
        m->values[prefix + "auc"] = HistogramAuc(sums.hist);
        m->values[prefix + "logloss"] = sums.loss / n;
        m->values[prefix + "prior_logloss"] = sums.prior_loss / n;
        if (baseline) {
          m->values[prefix + "baseline_auc"] = HistogramAuc(sums.base_hist);
          m->values[prefix + "baseline_logloss"] = sums.base_loss / n;
        }
        break;
      case Task::kRegression:
        m->values[prefix + "rmse"] = std::sqrt(sums.sq / n);
        m->values[prefix + "prior_rmse"] = std::sqrt(sums.prior_sq / n);
        if (baseline) m->values[prefix + "baseline_rmse"] = std::sqrt(sums.base_sq / n);
        break;
      case Task::kMulticlass:
        m->values[prefix + "accuracy"] = sums.correct / n;
        m->values[prefix + "logloss"] = sums.loss / n;
        m->values[prefix + "prior_accuracy"] = sums.prior_correct / n;
        m->values[prefix + "prior_logloss"] = sums.prior_loss / n;
        if (baseline) {
          m->values[prefix + "baseline_accuracy"] = sums.base_correct / n;
          m->values[prefix + "baseline_logloss"] = sums.base_loss / n;
        }
        break;
    }
    m->notes[prefix + "rows_evaluated"] = absl::StrCat(sums.count);
    return absl::OkStatus();
  }

  const TabularConfig config_;
  Spec spec_;
  DataPlan plan_;
  NetShape shape_;
  double scan_seconds_ = 0;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  PerWorkerDataset dataset_;
};

}  // namespace

absl::Status RegisterTabular(ClosureRegistry* registry,
                             std::shared_ptr<ReplicaGroups> replica_groups) {
  RETURN_IF_ERROR(registry->RegisterClosure(kTrain, TrainStep));
  RETURN_IF_ERROR(registry->RegisterClosure(kEval, EvalChunk));
  return registry->RegisterDataset(
      kData,
      [replica_groups](int worker_index, int /*num_workers*/,
                       absl::Span<const Tensor> args) -> absl::StatusOr<std::unique_ptr<Dataset>> {
        ASSIGN_OR_RETURN(std::string text, StringArg(args, 0, kData));
        absl::StatusOr<nlohmann::json> job = ParseJson(text);
        if (!job.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(kData, ": ", job.status().message()));
        }
        ASSIGN_OR_RETURN(std::unique_ptr<TabularResource> r,
                         TabularResource::Create(worker_index, *job, replica_groups.get()));
        return std::unique_ptr<Dataset>(std::move(r));
      });
}

namespace {

// Predicts from raw rows: the training transforms (without the label), an evaluation lookup of
// every key (unseen keys read the default row), the net's forward pass on the CPU (its own
// one-replica group).
class TabularServingHead final : public ServingHead {
 public:
  static absl::StatusOr<std::unique_ptr<TabularServingHead>> Create(const nlohmann::json& j) {
    std::unique_ptr<TabularServingHead> h(new TabularServingHead);
    ASSIGN_OR_RETURN(h->spec_, tabular::ParseSpec(j["spec"].get<std::string>(),
                                                  j["spec_path"].get<std::string>()));
    h->spec_.model.embedding_dim = j.value("embedding_dim", h->spec_.model.embedding_dim);
    ASSIGN_OR_RETURN(h->stats_, tabular::Stats::FromJson(j["stats"], h->spec_.features.size()));
    h->transformer_ =
        std::make_unique<tabular::Transformer>(h->spec_, h->stats_, j.value("seed", uint64_t{1}));
    const ExampleLayout& layout = h->layout();
    h->shape_ = NetShape(h->spec_, layout, Outputs(h->spec_, h->stats_));
    for (int f : layout.embedded) {
      const int64_t mc = h->spec_.features[f].min_count;
      auto it = std::find(h->groups_.begin(), h->groups_.end(), mc);
      const int g = static_cast<int>(it - h->groups_.begin());
      if (it == h->groups_.end()) h->groups_.push_back(mc);
      for (int s = 0; s < layout.slots[f]; ++s) h->slot_group_.push_back(g);
    }
    ReplicaGroupOptions cpu;
    cpu.kind = DeviceOptions::Kind::kCpu;
    cpu.num_replicas = 1;
    ASSIGN_OR_RETURN(h->group_, ReplicaGroup::Create(cpu));
    h->device_ = h->group_->device(0);
    return h;
  }

  // What Pull reads.
  const ExampleLayout& layout() const { return transformer_->layout(); }
  const NetShape& shape() const { return shape_; }
  const std::vector<int64_t>& groups() const { return groups_; }
  const std::vector<int>& slot_group() const { return slot_group_; }
  const tabular::Stats& stats() const { return stats_; }

  std::vector<std::string> columns() const override {
    std::vector<std::string> out;
    for (const tabular::FeatureSpec& f : spec_.features) {
      if (f.type == tabular::FeatureType::kCross) continue;
      if (std::find(out.begin(), out.end(), f.column) == out.end()) out.push_back(f.column);
    }
    return out;
  }
  std::vector<std::string> outputs() const override {
    switch (shape_.task) {
      case Task::kBinary: return {"probability"};
      case Task::kRegression: return {"prediction"};
      case Task::kMulticlass: {
        std::vector<std::string> out;
        for (const std::string& c : stats_.classes) out.push_back("probability:" + c);
        return out;
      }
    }
    return {};
  }

  absl::Status Predict(const RawExamples& examples, PsConnection* ps,
                       std::vector<float>* out) const override {
    ASSIGN_OR_RETURN(tabular::ColumnMap columns,
                     transformer_->MapColumns(examples.columns, "the request", /*with_label=*/false));
    const ExampleLayout& l = layout();
    const int64_t n = static_cast<int64_t>(examples.rows.size());
    out->clear();
    if (n == 0) return absl::OkStatus();
    Batch batch;
    batch.Resize(n, l);
    std::vector<absl::string_view> fields(examples.columns.size());
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<std::string>& row = examples.rows[i];
      for (size_t c = 0; c < fields.size(); ++c) {
        fields[c] = c < row.size() ? absl::string_view(row[c]) : absl::string_view();
      }
      absl::Status s = transformer_->Transform(fields, columns, /*training=*/false,
                                               /*row_hash=*/0, batch.At(i, l));
      if (!s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("tabular: row ", i, ": ", s.message()));
      }
    }
    Pulled p;
    RETURN_IF_ERROR(Pull(*this, ps, batch, /*step=*/0, LookupMode::kEval, &p));
    TabularNet net(device_, spec_, l, shape_);
    NetOutput result;
    RETURN_IF_ERROR(net.Run(p.batch, p.params, &result, nullptr));
    const int K = static_cast<int>(shape_.outputs);
    out->resize(n * K);
    const double sd = stats_.label_stddev > 0 ? stats_.label_stddev : 1;
    for (int64_t i = 0; i < n; ++i) {
      const float* z = result.logits.data() + i * K;
      float* o = out->data() + i * K;
      switch (shape_.task) {
        case Task::kBinary:
          o[0] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(z[0]))));
          break;
        case Task::kRegression:
          o[0] = static_cast<float>(z[0] * sd + stats_.label_mean);
          break;
        case Task::kMulticlass: {
          const float top = *std::max_element(z, z + K);
          double sum = 0;
          for (int k = 0; k < K; ++k) sum += std::exp(static_cast<double>(z[k] - top));
          for (int k = 0; k < K; ++k) {
            o[k] = static_cast<float>(std::exp(static_cast<double>(z[k] - top)) / sum);
          }
          break;
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  TabularServingHead() = default;
  Spec spec_;
  tabular::Stats stats_;
  std::unique_ptr<tabular::Transformer> transformer_;
  NetShape shape_;
  std::vector<int64_t> groups_;
  std::vector<int> slot_group_;
  std::unique_ptr<ReplicaGroup> group_;
  Device* device_ = nullptr;  // group_'s
};

}  // namespace

absl::StatusOr<std::unique_ptr<ServingHead>> CreateTabularServingHead(
    const std::string& serving_config) {
  absl::StatusOr<nlohmann::json> j = ParseJson(serving_config);
  if (!j.ok() || !j->is_object() || !j->value("spec", nlohmann::json()).is_string() ||
      !j->value("spec_path", nlohmann::json()).is_string() || !j->contains("stats")) {
    return absl::InvalidArgumentError(
        "tabular serving config: expected spec, spec_path and stats");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TabularServingHead> head, TabularServingHead::Create(*j));
  return std::unique_ptr<ServingHead>(std::move(head));
}

absl::StatusOr<std::unique_ptr<Model>> CreateTabular(const ModelOptions& options) {
  TabularConfig c;
  ExtraOptions extra(kTabularModel, options.extra);
  c.spec_path = extra.GetString("feature_spec", "");
  const std::string bad_rows = extra.GetString("bad_rows", "error");
  ASSIGN_OR_RETURN(c.shuffle_buffer, extra.GetInt("shuffle_buffer", c.shuffle_buffer));
  ASSIGN_OR_RETURN(c.shuffle_memory, ParseByteSize(extra.GetString("shuffle_memory", "256M")));
  ASSIGN_OR_RETURN(int64_t interleave, extra.GetInt("interleave", c.interleave));
  RETURN_IF_ERROR(extra.Finish());
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(kTabularModel, ": ", what));
  };
  if (c.spec_path.empty()) return bad("--feature_spec=FILE is required (see the README)");
  if (options.data.empty()) return bad("--data=FILE, DIRECTORY or GLOB is required");
  if (bad_rows != "error" && bad_rows != "skip") {
    return bad(absl::StrCat("--bad_rows=", bad_rows, " is not error or skip"));
  }
  if (c.shuffle_buffer < 0 || c.shuffle_buffer > (int64_t{1} << 28)) {
    return bad("shuffle_buffer must be in [0, 2^28]");
  }
  if (c.shuffle_memory < (int64_t{1} << 20)) return bad("shuffle_memory must be at least 1M");
  if (interleave < 1 || interleave > 1024) return bad("interleave must be in [1, 1024]");
  if (options.devices.replicas > 1) {
    return bad(absl::StrCat("runs one replica per worker (asked: ", options.devices.replicas,
                            "); use more workers instead"));
  }
  c.interleave = static_cast<int>(interleave);
  c.skip_bad_rows = bad_rows == "skip";
  c.data = options.data;
  c.validation_data = options.validation_data;
  c.validation_fraction = options.validation_fraction;
  if (options.epochs > 0) c.epochs = options.epochs;
  if (options.batch_size > 0) c.batch_size = options.batch_size;
  c.max_steps = options.max_steps;
  c.learning_rate = options.learning_rate;
  c.lr_schedule = options.lr_schedule;
  c.embedding_dim = options.embedding_dim;
  c.seed = options.seed;
  c.devices = options.devices;
  ASSIGN_OR_RETURN(Spec spec, tabular::ReadSpec(c.spec_path));
  if (c.embedding_dim > 0) spec.model.embedding_dim = c.embedding_dim;
  return std::unique_ptr<Model>(new TabularModel(std::move(c), std::move(spec)));
}

}  // namespace pstrain
