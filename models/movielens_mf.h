// Ratings matrix factorization: rating ~ mean + user bias + item bias + dot(user emb, item emb),
// with the four tables over the ps tasks and trained by a server-side optimizer (Adagrad by
// default) on an L2-regularized squared error. With tables=dynamic (the default) the four tables
// are dynamic tables keyed by the raw user and item ids (KeyOfString of the id's text: a user keeps
// its row whatever other users a file has); with tables=fixed they are fixed tables partitioned
// over the ps tasks, indexed by the ids numbered in order of appearance.
//
// ModelOptions: data (a ratings CSV; default data/movielens/ratings.csv), epochs (default 40),
// batch_size (default 256), learning_rate (default 0.05; lr_schedule relative to it), embedding_dim
// (default 32), seed.
// Extra: user_col, item_col, rating_col (defaults userId, movieId, rating); l2 (default 1.2) and
// reg_power (default 0.5): each rating adds l2 / count^reg_power of L2 pull on its user's and
// item's embedding (count = that user's or item's training ratings), so rarely seen ones are held
// closer to 0; bias_l2 (default 0.01, per rating); optimizer (adagrad (default), adam, sgd);
// shards (per table, default: the number of ps tasks); tables (dynamic (default) or fixed). Runs on the worker's CPU: --device=cuda or
// more than one replica is an error (a step is too small for a GPU).
//
// Metrics: test_rmse, train_rmse, and baseline_test_rmse (regularized user + item biases alone);
// notes give the counts, including the held-out ratings dropped as their user or item is unseen.
//
// The coordinator side (this file's unit); the worker side is movielens_mf_worker.h.
#ifndef PSTRAIN_MODELS_MOVIELENS_MF_H_
#define PSTRAIN_MODELS_MOVIELENS_MF_H_

#include <memory>

#include "absl/status/statusor.h"
#include "models/model.h"

namespace pstrain {

inline constexpr char kMatrixFactorizationModel[] = "movielens_mf";

// The coordinator side. Errors: kInvalidArgument for bad options (naming them).
absl::StatusOr<std::unique_ptr<Model>> CreateMatrixFactorization(const ModelOptions& options);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_MOVIELENS_MF_H_
