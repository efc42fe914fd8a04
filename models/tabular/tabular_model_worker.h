// The tabular model's worker side (the model: tabular_model.h): its dataset (the spec, the plan
// and the worker's stream of its share of the data, example_stream.h) and its two closures, a
// training step (the stream's next batch, one lookup request per ps task, the net, one update
// request per ps task) and an evaluation (the sums of a range of a split's rows, EvalSums).
//
// Stateless functions; EvalSums is a plain value.
#ifndef PSTRAIN_MODELS_TABULAR_TABULAR_MODEL_WORKER_H_
#define PSTRAIN_MODELS_TABULAR_TABULAR_MODEL_WORKER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "common/tensor.h"
#include "models/devices.h"
#include "worker/closure_registry.h"

namespace pstrain {

// The closures and the dataset:
//   tabular/train  args: int64 step. Returns {the batch's mean loss (float32), its examples
//                  (int64), the baseline's mean loss (float32)}.
//   tabular/eval   args: int64 split (1 validation, 2 test), then the range: file, begin, end,
//                  first_line, rows, train_rows (int64, tabular::Range). Returns the EvalSums of
//                  the split's rows in the range (EvalSums::ToTensors).
//   tabular/data   args: the job, JSON text: the spec ("spec", "spec_path", "embedding_dim"), the
//                  plan ("plan"), "seed", "validation_fraction", "skip_bad_rows", "batch_size",
//                  "steps_per_epoch", "shuffle_buffer", "interleave", "device_kind".
inline constexpr char kTabularTrain[] = "tabular/train";
inline constexpr char kTabularEval[] = "tabular/eval";
inline constexpr char kTabularData[] = "tabular/data";

namespace tabular {

// Bins of the predicted probability's histograms, per label (binary tasks: the AUC's).
inline constexpr int kEvalBins = 8192;

// An evaluation's sums over some rows, as the eval closure returns them and the coordinator adds
// them up: losses and squared errors of the model, the baseline and the prior; correct argmaxes;
// and (binary) histograms of the predicted probability by label, for the AUC (negatives' bins
// [0, kEvalBins), positives' [kEvalBins, 2 kEvalBins)).
struct EvalSums {
  double loss = 0, base_loss = 0, prior_loss = 0;
  double sq = 0, base_sq = 0, prior_sq = 0;
  int64_t count = 0, correct = 0, base_correct = 0, prior_correct = 0;
  std::vector<int64_t> hist = std::vector<int64_t>(2 * kEvalBins, 0);
  std::vector<int64_t> base_hist = std::vector<int64_t>(2 * kEvalBins, 0);

  // The eval closure's outputs.
  std::vector<Tensor> ToTensors() const;
  // Adds an eval closure's outputs. Errors: kInternal for outputs of another form.
  absl::Status Add(const std::vector<Tensor>& t);
};

}  // namespace tabular

// The worker side: the closures and dataset above. Each worker runs one replica, its device from
// `replica_groups` (not null; kept).
absl::Status RegisterTabular(ClosureRegistry* registry,
                             std::shared_ptr<ReplicaGroups> replica_groups);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_TABULAR_TABULAR_MODEL_WORKER_H_
