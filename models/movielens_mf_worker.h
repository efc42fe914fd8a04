// movielens_mf's worker side (the model: movielens_mf.h): its dataset, the ratings every worker
// loads itself (models/ratings_data.h) and the hyperparameters; and its two closures, a training
// step (pull the batch's rows of the four tables, the squared error's and the L2 terms' gradients
// on the CPU, push them) and an evaluation (the squared error of a range of a split).
//
// Stateless functions.
#ifndef PSTRAIN_MODELS_MOVIELENS_MF_WORKER_H_
#define PSTRAIN_MODELS_MOVIELENS_MF_WORKER_H_

#include <memory>

#include "absl/status/status.h"
#include "models/devices.h"
#include "worker/closure_registry.h"

namespace pstrain {

// The closures and the dataset:
//   movielens_mf/train  args: int64 step. Returns {the batch's mean loss (float32), its ratings
//                       (int64)}.
//   movielens_mf/eval   args: int64 split (0 test, 1 train, 2 validation), begin, end. Returns
//                       {the sum of squared errors of the clipped predictions over ratings
//                       [begin, end) (float32), their count (int64)}.
//   movielens_mf/data   args: the ratings' path, user, item and rating columns (strings), the
//                       seed, the batch size (int64), l2, bias_l2, reg_power (float32), the
//                       embedding dim, the tables' kind (1 dynamic, 0 fixed) (int64), the
//                       validation fraction (float32), the validation path (string).
inline constexpr char kMfTrain[] = "movielens_mf/train";
inline constexpr char kMfEval[] = "movielens_mf/eval";
inline constexpr char kMfData[] = "movielens_mf/data";

// The four tables on the ps tasks.
inline constexpr char kMfUserEmbedding[] = "mf/user_embedding";
inline constexpr char kMfItemEmbedding[] = "mf/item_embedding";
inline constexpr char kMfUserBias[] = "mf/user_bias";
inline constexpr char kMfItemBias[] = "mf/item_bias";

// The worker side: the closures and dataset above, computing on replica_groups->Cpu()
// (`replica_groups`: not null; kept).
absl::Status RegisterMatrixFactorization(ClosureRegistry* registry,
                                         std::shared_ptr<ReplicaGroups> replica_groups);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_MOVIELENS_MF_WORKER_H_
