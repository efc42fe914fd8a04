// flights_ctr's worker side (the model: flights_ctr.h): its dataset, the flights every worker
// loads itself (models/flights_data.h) and how they become table rows; and its two closures, a
// training step (one lookup request per ps task, forward and backward on the worker's replicas,
// one update request per ps task; models/flights_ctr_lookup.h, models/ctr_net.h) and an
// evaluation (the model's and the baseline's logits over a range of a split).
//
// Stateless functions.
#ifndef PSTRAIN_MODELS_FLIGHTS_CTR_WORKER_H_
#define PSTRAIN_MODELS_FLIGHTS_CTR_WORKER_H_

#include <memory>

#include "absl/status/status.h"
#include "models/devices.h"
#include "worker/closure_registry.h"

namespace pstrain {

// The closures and the dataset:
//   flights_ctr/train  args: int64 step. Returns {the batch's mean loss (float32), its flights
//                      (int64), the baseline's mean loss (float32)}.
//   flights_ctr/eval   args: int64 split (0 test, 1 validation), begin, end. Returns {the model's
//                      logits, the baseline's logits} (float32, one per flight of [begin, end)).
//   flights_ctr/data   args: the CSV's path (string), test_from_month, delay_threshold, max_rows,
//                      seed, batch size, hash_rows, embedding dim, hidden units (int64), the
//                      features' names (string, FlightFeatureNames), the embedding's kind (int64:
//                      1 dynamic, 0 hashed), the validation fraction (float32), the validation
//                      path (string), the dense turns (int64, worker/dense_turns.h: 0 no
//                      limit), the devices (DeviceArgs, two int64).
inline constexpr char kFlightsCtrTrain[] = "flights_ctr/train";
inline constexpr char kFlightsCtrEval[] = "flights_ctr/eval";
inline constexpr char kFlightsCtrData[] = "flights_ctr/data";

// The worker side: the closures and dataset above. The dataset's replica group and its host CPU
// device (for deduplicating ids) come from `replica_groups` (not null; kept).
absl::Status RegisterFlightsCtr(ClosureRegistry* registry,
                                std::shared_ptr<ReplicaGroups> replica_groups);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_FLIGHTS_CTR_WORKER_H_
