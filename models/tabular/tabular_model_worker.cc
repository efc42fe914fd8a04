#include "models/tabular/tabular_model_worker.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/json_parse.h"
#include "common/status_macros.h"
#include "coordinator/split_ledger.h"
#include "models/batches.h"
#include "models/tabular/data_plan.h"
#include "models/tabular/example_stream.h"
#include "models/tabular/feature_spec.h"
#include "models/tabular/tabular_lookup.h"
#include "models/tabular/tabular_net.h"
#include "models/tabular/transforms.h"
#include "nlohmann/json.hpp"
#include "ps/sharded_variable.h"
#include "worker/dense_turns.h"

namespace pstrain {
namespace tabular {

std::vector<Tensor> EvalSums::ToTensors() const {
  return {Tensor::FromVector(std::vector<float>{
              static_cast<float>(loss), static_cast<float>(base_loss),
              static_cast<float>(prior_loss), static_cast<float>(sq),
              static_cast<float>(base_sq), static_cast<float>(prior_sq)}),
          Tensor::FromVector(std::vector<int64_t>{count, correct, base_correct, prior_correct}),
          Tensor::FromVector(hist), Tensor::FromVector(base_hist)};
}

absl::Status EvalSums::Add(const std::vector<Tensor>& t) {
  if (t.size() != 4 || !t[0].Is<float>() || t[0].num_elements() != 6 || !t[1].Is<int64_t>() ||
      t[1].num_elements() != 4 || !t[2].Is<int64_t>() || t[2].num_elements() != 2 * kEvalBins ||
      !t[3].Is<int64_t>() || t[3].num_elements() != 2 * kEvalBins) {
    return absl::InternalError(absl::StrCat(kTabularEval, " returned malformed sums"));
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
  for (int i = 0; i < 2 * kEvalBins; ++i) {
    hist[i] += h[i];
    base_hist[i] += bh[i];
  }
  return absl::OkStatus();
}

}  // namespace tabular

namespace {

using tabular::Batch;
using tabular::DataContext;
using tabular::DataPlan;
using tabular::EvalSums;
using tabular::ExampleLayout;
using tabular::NetGrads;
using tabular::NetOutput;
using tabular::NetShape;
using tabular::Outputs;
using tabular::PriorLogits;
using tabular::Pulled;
using tabular::Range;
using tabular::Spec;
using tabular::Split;
using tabular::TabularLookup;
using tabular::TabularNet;
using tabular::Task;
using tabular::TrainStream;
using tabular::kEvalBins;

// Rows per evaluation batch.
constexpr int64_t kEvalBatch = 2048;

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
      return absl::InvalidArgumentError(absl::StrCat(kTabularData, ": a malformed job"));
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
    // A synchronous rank (its coordinator's only worker) reads the rank's share.
    const int data_shard = job.value("data_shard", -1);
    if (data_shard >= 0) worker = data_shard;
    if (r->batch_size_ < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(kTabularData, ": batch_size ", r->batch_size_, " < 1"));
    }
    // Dealt (coordinator/split_ledger.h): the plan has one share, whose splits the coordinator
    // deals to the workers closure by closure.
    const bool dealt = job.value("dealt", false);
    if (dealt && r->plan_.shares.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(kTabularData, ": a dealt plan has one share, not ", r->plan_.shares.size()));
    }
    const int share = dealt ? 0 : worker;
    if (share < 0 || share >= static_cast<int>(r->plan_.shares.size())) {
      return absl::FailedPreconditionError(absl::StrCat(
          kTabularData, ": worker ", worker, " but the plan has shares for ",
          r->plan_.shares.size(), " workers (the cluster changed since the scan)"));
    }
    TrainStream::Options so;
    so.worker = worker;
    so.steps_per_epoch = job.value("steps_per_epoch", int64_t{1});
    so.shuffle_buffer = job.value("shuffle_buffer", int64_t{65536});
    so.interleave = job.value("interleave", 64);
    if (dealt) {
      tabular::DealtStream::Options dso;
      dso.worker = worker;
      dso.shuffle_buffer = so.shuffle_buffer;
      dso.interleave = so.interleave;
      r->dealt_ = std::make_unique<tabular::DealtStream>(r->context_.get(), r->plan_.shares[0], dso);
    } else {
      r->stream_ = std::make_unique<TrainStream>(r->context_.get(), r->plan_.shares[share], so);
    }
    // Tests and benchmarks: one worker made slower (a straggler), each step taking `slow_factor`
    // times its own time.
    if (job.value("slow_worker", -1) == worker) r->slow_factor_ = job.value("slow_factor", 1.0);
    r->progressive_ = job.value("progressive", false);
    const std::string row_log = job.value("row_log", std::string());
    if (!row_log.empty()) {
      // Tests: every trained row's id, appended per batch once its gradients went out.
      const std::string path = absl::StrCat(row_log, ".worker", worker, ".", getpid());
      r->row_log_ = std::fopen(path.c_str(), "ab");
      if (r->row_log_ == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(kTabularData, ": can't open ", path));
      }
    }
    const ExampleLayout& layout = r->layout();
    r->shape_ = NetShape(r->spec_, layout, Outputs(r->spec_, r->plan_.stats));
    r->lookup_ = std::make_unique<TabularLookup>(r->spec_, layout, r->shape_, r->plan_.stats);
    WorkerDevices devices;
    devices.kind = static_cast<DeviceOptions::Kind>(job.value("device_kind", 0));
    devices.replicas = 1;
    ASSIGN_OR_RETURN(ReplicaGroup * group, replica_groups->Get(devices));
    r->device_ = group->device(0);
    r->prior_ = PriorLogits(r->spec_.label.task, r->plan_.stats);
    const int dense_turns = job.value("dense_turns", 1);
    if (dense_turns < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kTabularData, ": dense_turns ", dense_turns, " < 0"));
    }
    DenseTurnsOptions turns;
    turns.turns = dense_turns;
    r->turns_ = std::make_unique<DenseTurns>(turns);
    return r;
  }

  // One batch of training examples as tensors: keys [n, slots], dense [n, inputs], labels [n].
  absl::StatusOr<bool> Next(std::vector<Tensor>* element) override {
    Batch b;
    if (stream_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          kTabularData, ": the coordinator deals this job's data with each training step"));
    }
    RETURN_IF_ERROR(stream_->Next(-1, batch_size_, &b));
    const ExampleLayout& l = layout();
    *element = {Tensor::FromVector(b.keys, Shape{b.n, l.num_slots}),
                Tensor::FromVector(b.dense, Shape{b.n, l.num_dense}),
                Tensor::FromVector(b.labels)};
    return true;
  }
  bool shared() const override { return true; }
  ~TabularResource() override {
    if (row_log_ != nullptr) std::fclose(row_log_);
  }

  const Spec& spec() const { return spec_; }
  const DataPlan& plan() const { return plan_; }
  DataContext* context() { return context_.get(); }
  TrainStream& stream() { return *stream_; }
  // > 1 for the worker made slower (the job's slow_worker): its steps take this many times longer.
  double slow_factor() const { return slow_factor_; }
  // Held through each of the slower worker's steps: they run one at a time.
  absl::Mutex& straggler_mu() { return straggler_mu_; }
  // Whether a training step also returns its batch's predictions, made before the batch is
  // trained on, and labels (progressive validation: a job that follows its data).
  bool progressive() const { return progressive_; }
  // Null unless the coordinator deals the data (coordinator/split_ledger.h).
  tabular::DealtStream* dealt() { return dealt_.get(); }
  // Tests (the job's "row_log"): appends the ids of a trained batch's rows.
  void LogRows(const std::vector<int64_t>& ids) {
    if (row_log_ == nullptr || ids.empty()) return;
    absl::MutexLock lock(&log_mu_);
    std::fwrite(ids.data(), sizeof(int64_t), ids.size(), row_log_);
    std::fflush(row_log_);
  }
  const ExampleLayout& layout() const { return context_->transformer().layout(); }
  const NetShape& shape() const { return shape_; }
  int64_t batch_size() const { return batch_size_; }
  Device* device() const { return device_; }
  const TabularLookup& lookup() const { return *lookup_; }
  const std::vector<float>& prior() const { return prior_; }
  DenseTurns& turns() { return *turns_; }

 private:
  TabularResource() = default;
  Spec spec_;
  DataPlan plan_;
  std::unique_ptr<DataContext> context_;
  std::unique_ptr<TrainStream> stream_;
  std::unique_ptr<tabular::DealtStream> dealt_;
  absl::Mutex log_mu_;
  absl::Mutex straggler_mu_;
  FILE* row_log_ = nullptr;
  double slow_factor_ = 1;
  bool progressive_ = false;
  int64_t batch_size_ = 256;
  NetShape shape_;
  std::unique_ptr<const TabularLookup> lookup_;
  Device* device_ = nullptr;
  std::vector<float> prior_;
  std::unique_ptr<DenseTurns> turns_;
};

absl::StatusOr<TabularResource*> ResourceOf(ClosureContext& ctx, const char* closure) {
  auto* r = ctx.datasets.size() == 1 ? dynamic_cast<TabularResource*>(ctx.datasets[0]) : nullptr;
  if (r == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(closure, " takes the ", kTabularData, " resource"));
  }
  return r;
}

// Pushes the gradients of the rows and the weights in one update request per ps.
// With `turn`'s cache, the weights' rows come back into it (ps/dense_cache.h), and the turn goes
// back as soon as they are there.
absl::Status Push(TabularResource& res, const Pulled& p, const NetGrads& grads, int64_t step,
                  DenseTurn& turn) {
  DenseCache* const cache = turn.cache();
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
    RETURN_IF_ERROR(update.AddDense(p.w_v[l], UpdateOp::APPLY_GRADIENT, bytes(grads.w[l]), cache));
    RETURN_IF_ERROR(update.AddDense(p.b_v[l], UpdateOp::APPLY_GRADIENT, bytes(grads.b[l]), cache));
  }
  if (p.wide_dense_v.has_value()) {
    RETURN_IF_ERROR(
        update.AddDense(*p.wide_dense_v, UpdateOp::APPLY_GRADIENT, bytes(grads.wide_dense), cache));
  }
  if (p.wide_bias_v.has_value()) {
    RETURN_IF_ERROR(
        update.AddDense(*p.wide_bias_v, UpdateOp::APPLY_GRADIENT, bytes(grads.wide_bias), cache));
  }
  if (p.base_dense_v.has_value()) {
    RETURN_IF_ERROR(
        update.AddDense(*p.base_dense_v, UpdateOp::APPLY_GRADIENT, bytes(grads.base_dense), cache));
  }
  if (p.base_bias_v.has_value()) {
    RETURN_IF_ERROR(
        update.AddDense(*p.base_bias_v, UpdateOp::APPLY_GRADIENT, bytes(grads.base_bias), cache));
  }
  return update.Run([&turn] { turn.Release(); });
}

int Argmax(const float* x, int k) { return static_cast<int>(std::max_element(x, x + k) - x); }

// Each example's prediction from the net's `logits` as progressive validation scores it: binary, the
// probability of the positive class; regression, the label's units; multiclass, the class.
std::vector<float> Predictions(const TabularResource& res, int64_t n, const float* logits) {
  const NetShape& shape = res.shape();
  const tabular::Stats& st = res.plan().stats;
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (shape.task) {
      case Task::kBinary:
        out[i] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(logits[i]))));
        break;
      case Task::kRegression:
        out[i] = static_cast<float>(logits[i] * (st.label_stddev > 0 ? st.label_stddev : 1) +
                                    st.label_mean);
        break;
      case Task::kMulticlass:
        out[i] = static_cast<float>(Argmax(logits + i * shape.outputs, shape.outputs));
        break;
    }
  }
  return out;
}

// One batch: pull, compute, push. Returns {mean loss, examples, the baseline's mean loss}; with
// `predictions`, the batch's (Predictions) before its gradients went out.
absl::StatusOr<std::vector<Tensor>> TrainBatch(ClosureContext& ctx, TabularResource* res,
                                               int64_t step, const Batch& batch,
                                               std::vector<float>* predictions = nullptr) {
  Pulled p;
  const int64_t global_step = step + 1;  // 1-based: 0 means "no step" to the ps
  // The table rows at once; the weights, the net and the push in this worker's turn
  // (worker/dense_turns.h), so the weights hold its earlier steps' updates.
  RETURN_IF_ERROR(res->lookup().PullTables(ctx.ps, batch, global_step, LookupMode::kTrain, &p));
  DenseTurn turn = res->turns().Take(global_step, ctx.steps_in_order);
  RETURN_IF_ERROR(res->lookup().PullWeights(ctx.ps, batch, global_step, &p, turn.cache()));
  TabularNet net(res->device(), res->spec(), res->layout(), res->shape());
  NetOutput out;
  NetGrads grads;
  RETURN_IF_ERROR(net.Run(p.batch, p.params, &out, &grads));
  if (predictions != nullptr) *predictions = Predictions(*res, batch.n, out.logits.data());
  RETURN_IF_ERROR(Push(*res, p, grads, global_step, turn));
  return std::vector<Tensor>{Tensor::Scalar<float>(static_cast<float>(out.loss)),
                             Tensor::Scalar<int64_t>(batch.n),
                             Tensor::Scalar<float>(static_cast<float>(out.base_loss))};
}

// The followed splits dealt with a closure: their files into the worker's data context, their
// ranges into its stream (coordinator/split_ledger.h, follow mode: a JSON array of descriptors).
absl::Status AddFollowedSplits(TabularResource* res, const Deal& deal, const Tensor& descriptors) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(kTabularTrain, ": followed splits: ", what));
  };
  if (!descriptors.IsString()) return bad("not a string");
  absl::StatusOr<nlohmann::json> parsed = ParseJson(descriptors.data);
  if (!parsed.ok()) return bad(parsed.status().message());
  const nlohmann::json& j = *parsed;
  if (!j.is_array() || j.size() != deal.splits.size()) {
    return bad(absl::StrCat("expected ", deal.splits.size(), " descriptors"));
  }
  std::vector<tabular::Range> ranges;
  for (const nlohmann::json& d : j) {
    if (!d.is_string()) return bad("a descriptor is not a string");
    tabular::FileInfo file;
    tabular::Range range;
    RETURN_IF_ERROR(tabular::ParseFollowedSplit(d.get<std::string>(), &file, &range));
    RETURN_IF_ERROR(res->context()->AddFile(range.file, std::move(file)));
    ranges.push_back(range);
  }
  return res->dealt()->AddSplits(deal, ranges);
}

// The step at the worker's own speed: its batch from the dealt splits or the fixed share.
absl::StatusOr<std::vector<Tensor>> TrainStepAtSpeed(ClosureContext& ctx, TabularResource* res,
                                                     int64_t step, absl::Span<const Tensor> args) {
  tabular::DealtStream* dealt = res->dealt();
  if (dealt == nullptr) {
    Batch batch;
    RETURN_IF_ERROR(res->stream().Next(step, res->batch_size(), &batch));
    return TrainBatch(ctx, res, step, batch);
  }
  if (args.size() != 2 && args.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(kTabularTrain, ": a dealt job's step takes the step and its dealt splits"));
  }
  ASSIGN_OR_RETURN(Deal deal, ParseDeal(args[1]));
  if (args.size() == 3) {
    // A job that follows its data: each dealt split's file and range (they arrived after the plan).
    RETURN_IF_ERROR(AddFollowedSplits(res, deal, args[2]));
  } else {
    RETURN_IF_ERROR(dealt->AddSplits(deal));
  }
  Batch batch;
  RETURN_IF_ERROR(dealt->Next(res->batch_size(), deal.seq, &batch));
  if (batch.n == 0) {
    // Nothing left here: the epoch's last rows are other workers'.
    std::vector<Tensor> none = {Tensor::Scalar<float>(0), Tensor::Scalar<int64_t>(0),
                                Tensor::Scalar<float>(0), Tensor::FromVector(std::vector<int64_t>{})};
    if (res->progressive()) {
      none.push_back(Tensor::FromVector(std::vector<float>{}));
      none.push_back(Tensor::FromVector(std::vector<float>{}));
    }
    return none;
  }
  std::vector<float> predictions;
  absl::StatusOr<std::vector<Tensor>> out =
      TrainBatch(ctx, res, step, batch, res->progressive() ? &predictions : nullptr);
  if (!out.ok()) {
    dealt->PutBack(batch);  // the closure runs again (here or elsewhere): its rows stay untrained
    return out.status();
  }
  res->LogRows(batch.ids);
  out->push_back(Tensor::FromVector(batch.ids));
  if (res->progressive()) {
    out->push_back(Tensor::FromVector(predictions));
    out->push_back(Tensor::FromVector(batch.labels));
  }
  return out;
}
// Args: the step, and when the coordinator deals the data, the splits dealt with this closure
// (coordinator/split_ledger.h, EncodeDeal). Returns {mean loss, examples, the baseline's mean
// loss}, and when dealt, the trained rows' ids (a batch may then be short, or empty at the end).
absl::StatusOr<std::vector<Tensor>> TrainStep(ClosureContext& ctx, absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t step, IntArg(args, 0, kTabularTrain));
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(kTabularTrain, ": step ", step, " < 0"));
  }
  ASSIGN_OR_RETURN(TabularResource * res, ResourceOf(ctx, kTabularTrain));
  if (res->slow_factor() > 1) {
    // A straggler, as a slower machine: its steps one at a time, each the step and then as long
    // again times (factor - 1). (Sleeps alone would overlap across the worker's closures in
    // flight, and the worker would be no slower.)
    absl::MutexLock one_at_a_time(&res->straggler_mu());
    const absl::Time start = absl::Now();
    absl::StatusOr<std::vector<Tensor>> out = TrainStepAtSpeed(ctx, res, step, args);
    absl::SleepFor((absl::Now() - start) * (res->slow_factor() - 1));
    return out;
  }
  return TrainStepAtSpeed(ctx, res, step, args);
}


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
  for (int64_t i = 0; i < n; ++i)
    std::copy(res.prior().begin(), res.prior().end(), prior.begin() + i * K);
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
          return std::min(kEvalBins - 1, static_cast<int>(prob * kEvalBins));
        };
        const int offset = labels[i] > 0.5f ? kEvalBins : 0;
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
  ASSIGN_OR_RETURN(int64_t split, IntArg(args, 0, kTabularEval));
  if (split != 1 && split != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(kTabularEval, ": split ", split, " is not 1 or 2"));
  }
  Range range;
  int64_t v[6];
  for (int i = 0; i < 6; ++i) {
    ASSIGN_OR_RETURN(v[i], IntArg(args, 1 + i, kTabularEval));
  }
  range.file = static_cast<int>(v[0]);
  range.begin = v[1];
  range.end = v[2];
  range.first_line = v[3];
  range.rows = v[4];
  range.train_rows = v[5];
  ASSIGN_OR_RETURN(TabularResource * res, ResourceOf(ctx, kTabularEval));
  if (range.file < 0 || range.file >= static_cast<int>(res->plan().files.size()) ||
      range.begin < 0 || range.end < range.begin || range.first_line < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kTabularEval, ": a range out of bounds"));
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
    RETURN_IF_ERROR(res->lookup().Pull(ctx.ps, batch, /*step=*/0, LookupMode::kEval, &p));
    NetOutput out;
    RETURN_IF_ERROR(net.Run(p.batch, p.params, &out, nullptr));
    Accumulate(*res, n, batch.labels.data(), out.logits.data(),
               res->shape().baseline ? out.base_logits.data() : nullptr, &sums);
  }
  return sums.ToTensors();
}

}  // namespace

absl::Status RegisterTabular(ClosureRegistry* registry,
                             std::shared_ptr<ReplicaGroups> replica_groups) {
  RETURN_IF_ERROR(registry->RegisterClosure(kTabularTrain, TrainStep));
  RETURN_IF_ERROR(registry->RegisterClosure(kTabularEval, EvalChunk));
  return registry->RegisterDataset(
      kTabularData,
      [replica_groups](int worker_index, int /*num_workers*/,
                       absl::Span<const Tensor> args) -> absl::StatusOr<std::unique_ptr<Dataset>> {
        ASSIGN_OR_RETURN(std::string text, StringArg(args, 0, kTabularData));
        absl::StatusOr<nlohmann::json> job = ParseJson(text);
        if (!job.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(kTabularData, ": ", job.status().message()));
        }
        ASSIGN_OR_RETURN(std::unique_ptr<TabularResource> r,
                         TabularResource::Create(worker_index, *job, replica_groups.get()));
        return std::unique_ptr<Dataset>(std::move(r));
      });
}

}  // namespace pstrain
