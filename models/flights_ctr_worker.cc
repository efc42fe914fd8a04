#include "models/flights_ctr_worker.h"

#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/batches.h"
#include "models/ctr_net.h"
#include "models/flights_ctr_lookup.h"
#include "models/flights_data.h"
#include "ps/sharded_variable.h"
#include "worker/dense_turns.h"
#include "worker/device/device.h"

namespace pstrain {
namespace {

// What a worker needs to train and evaluate: the flights and the settings. Read-only after
// creation (EpochBatches locks itself), so closures share it.
class FlightsResource : public Dataset {
 public:
  FlightsResource(FlightsData data, ReplicaGroup* replicas, Device* host, int64_t batch_size,
                  uint64_t seed, CtrKeying keying, DenseTurnsOptions turns)
      : turns_(turns),
        data_(std::move(data)),
        replicas_(replicas),
        host_(host),
        batches_(static_cast<int64_t>(data_.train.size()), batch_size, seed),
        first_epoch_(batches_.steps_per_epoch()),
        keying_(std::move(keying)) {}

  // The training batches of the first epoch in order: hashed rows [n, features] and labels [n].
  absl::StatusOr<bool> Next(std::vector<Tensor>* element) override {
    const std::optional<int64_t> step = first_epoch_.Next();
    if (!step.has_value()) return false;
    const std::vector<int64_t> rows = batches_.Batch(*step);
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
  DenseTurns& turns() { return turns_; }

 private:
  DenseTurns turns_;
  const FlightsData data_;
  ReplicaGroup* const replicas_;
  Device* const host_;
  EpochBatches batches_;
  FirstEpochSteps first_epoch_;
  const CtrKeying keying_;
};

FlightsResource* ResourceOf(ClosureContext& ctx) {
  return ctx.datasets.size() == 1 ? dynamic_cast<FlightsResource*>(ctx.datasets[0]) : nullptr;
}

// Args: the step. Returns {mean loss, examples, the baseline's mean loss}.
absl::StatusOr<std::vector<Tensor>> TrainStep(ClosureContext& ctx, absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t step, IntArg(args, 0, kFlightsCtrTrain));
  FlightsResource* res = ResourceOf(ctx);
  if (res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kFlightsCtrTrain, " needs ", kFlightsCtrData));
  }
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(kFlightsCtrTrain, ": step ", step, " < 0"));
  }
  ASSIGN_OR_RETURN(CtrVariables v, FindCtrVariables(ctx.ps, res->keying().dynamic()));
  const std::vector<int64_t> rows =
      ReplicaShare(res->batches().Batch(step), ctx.replica_index, ctx.num_replicas);
  CtrPulled p;
  const int64_t global_step = step + 1;  // 1-based: 0 means "no step" to a dynamic table
  // The table rows at once; the dense weights, the net and their gradients in this worker's turn
  // (worker/dense_turns.h), so the weights hold its earlier steps' updates.
  RETURN_IF_ERROR(
      PullCtrRows(v, res->keying(), res->host(), res->data().train, rows, global_step, &p));
  DenseTurn turn = res->turns().Take(global_step, ctx.steps_in_order);
  DenseCache* const cache = turn.cache();
  RETURN_IF_ERROR(PullCtrWeights(v, res->keying(), global_step, &p, cache));
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
      update.AddDense(v.w1, UpdateOp::APPLY_GRADIENT, bytes(layout.w1, layout.b1), cache));
  RETURN_IF_ERROR(
      update.AddDense(v.b1, UpdateOp::APPLY_GRADIENT, bytes(layout.b1, layout.w2), cache));
  RETURN_IF_ERROR(
      update.AddDense(v.w2, UpdateOp::APPLY_GRADIENT, bytes(layout.w2, layout.b2), cache));
  RETURN_IF_ERROR(
      update.AddDense(v.b2, UpdateOp::APPLY_GRADIENT, bytes(layout.b2, layout.lr_bias), cache));
  RETURN_IF_ERROR(update.AddDense(v.lr_bias, UpdateOp::APPLY_GRADIENT,
                                  bytes(layout.lr_bias, layout.size), cache));
  // One push for the rows and the weights (sent to the ps tasks side by side); the weights come
  // back into the cache as the push left them, and the turn goes back once they are there, so
  // the worker's next step computes on weights that hold it.
  RETURN_IF_ERROR(update.Run([&turn] { turn.Release(); }));
  return std::vector<Tensor>{Tensor::Scalar<float>(loss),
                             Tensor::Scalar<int64_t>(static_cast<int64_t>(rows.size())),
                             Tensor::Scalar<float>(lr_loss)};
}

// Args: the split (0: test, 1: validation), its rows [begin, end). Returns {the model's logits, the
// baseline's logits}, one per row.
absl::StatusOr<std::vector<Tensor>> EvalChunk(ClosureContext& ctx, absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t split, IntArg(args, 0, kFlightsCtrEval));
  ASSIGN_OR_RETURN(int64_t begin, IntArg(args, 1, kFlightsCtrEval));
  ASSIGN_OR_RETURN(int64_t end, IntArg(args, 2, kFlightsCtrEval));
  FlightsResource* res = ResourceOf(ctx);
  if (res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kFlightsCtrEval, " needs ", kFlightsCtrData));
  }
  if (split != 0 && split != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFlightsCtrEval, ": split ", split, " is not 0 or 1"));
  }
  const std::vector<Flight>& test = split == 0 ? res->data().test : res->data().validation;
  if (begin < 0 || end < begin || end > static_cast<int64_t>(test.size())) {
    return absl::InvalidArgumentError(absl::StrCat(kFlightsCtrEval, ": rows [", begin, ", ", end,
                                                   ") outside the ", test.size(), " flights"));
  }
  ASSIGN_OR_RETURN(CtrVariables v, FindCtrVariables(ctx.ps, res->keying().dynamic()));
  std::vector<int64_t> rows(end - begin);
  std::iota(rows.begin(), rows.end(), begin);
  CtrPulled p;
  RETURN_IF_ERROR(PullCtrBatch(v, res->keying(), res->host(), test, rows, /*step=*/0, &p));
  std::vector<float> logits, lr_logits;
  RETURN_IF_ERROR(CtrReplicatedForward(res->replicas(), res->keying().shape(), p.batch(),
                                       p.dense.params(), &logits, &lr_logits));
  return std::vector<Tensor>{Tensor::FromVector(logits), Tensor::FromVector(lr_logits)};
}

}  // namespace

absl::Status RegisterFlightsCtr(ClosureRegistry* registry,
                                std::shared_ptr<ReplicaGroups> replica_groups) {
  RETURN_IF_ERROR(registry->RegisterClosure(kFlightsCtrTrain, TrainStep));
  RETURN_IF_ERROR(registry->RegisterClosure(kFlightsCtrEval, EvalChunk));
  return registry->RegisterDataset(
      kFlightsCtrData,
      [replica_groups](int /*worker_index*/, int /*num_workers*/,
                       absl::Span<const Tensor> args) -> absl::StatusOr<std::unique_ptr<Dataset>> {
        FlightsOptions options;
        ASSIGN_OR_RETURN(options.path, StringArg(args, 0, kFlightsCtrData));
        ASSIGN_OR_RETURN(int64_t test_from_month, IntArg(args, 1, kFlightsCtrData));
        ASSIGN_OR_RETURN(int64_t delay_threshold, IntArg(args, 2, kFlightsCtrData));
        ASSIGN_OR_RETURN(options.max_rows, IntArg(args, 3, kFlightsCtrData));
        ASSIGN_OR_RETURN(int64_t seed, IntArg(args, 4, kFlightsCtrData));
        ASSIGN_OR_RETURN(int64_t batch_size, IntArg(args, 5, kFlightsCtrData));
        ASSIGN_OR_RETURN(int64_t hash_rows, IntArg(args, 6, kFlightsCtrData));
        CtrNetShape shape;
        ASSIGN_OR_RETURN(shape.dim, IntArg(args, 7, kFlightsCtrData));
        ASSIGN_OR_RETURN(shape.hidden, IntArg(args, 8, kFlightsCtrData));
        ASSIGN_OR_RETURN(std::string feature_names, StringArg(args, 9, kFlightsCtrData));
        ASSIGN_OR_RETURN(std::vector<int> features, ParseFlightFeatures(feature_names));
        shape.features = static_cast<int64_t>(features.size());
        ASSIGN_OR_RETURN(int64_t dynamic, IntArg(args, 10, kFlightsCtrData));
        ASSIGN_OR_RETURN(options.validation_fraction, FloatArg(args, 11, kFlightsCtrData));
        ASSIGN_OR_RETURN(options.validation_path, StringArg(args, 12, kFlightsCtrData));
        DenseTurnsOptions turns;
        ASSIGN_OR_RETURN(int64_t dense_turns, IntArg(args, 13, kFlightsCtrData));
        if (dense_turns < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              kFlightsCtrData, ": dense_turns ", dense_turns, " < 0"));
        }
        turns.turns = static_cast<int>(dense_turns);
        ASSIGN_OR_RETURN(WorkerDevices devices, DevicesFromArgs(args, 14, kFlightsCtrData));
        if (batch_size < 1 || hash_rows < 1 || shape.dim < 1 || shape.hidden < 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              kFlightsCtrData, ": batch_size, hash_rows, dim and hidden must be >= 1"));
        }
        options.test_from_month = static_cast<int>(test_from_month);
        options.delay_threshold = static_cast<int>(delay_threshold);
        ASSIGN_OR_RETURN(FlightsData data, LoadFlights(options));
        ASSIGN_OR_RETURN(ReplicaGroup * replicas, replica_groups->Get(devices));
        ASSIGN_OR_RETURN(Device * host, replica_groups->Cpu());
        return std::unique_ptr<Dataset>(new FlightsResource(
            std::move(data), replicas, host, batch_size, static_cast<uint64_t>(seed),
            CtrKeying(std::move(features), hash_rows, dynamic != 0, shape), turns));
      });
}

}  // namespace pstrain
