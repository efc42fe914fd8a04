// A model's dense ps variables as one flat float buffer (the layout of DenseMlp's and ConvNet's
// parameters): each variable covers a range of the buffer, row-major. A step pulls the whole buffer
// with ONE Read request per ps task and pushes its gradients (and any sums) with ONE Update request
// per ps task.
//
//   std::vector<FlatVariable> vars = {{w, /*offset=*/0}, {b, /*offset=*/w_floats}};
//   RETURN_IF_ERROR(PullFlat(vars, params.data()));
//   ... forward and backward into grads ...
//   UpdateBatch update;
//   RETURN_IF_ERROR(AddFlatOps(vars, UpdateOp::APPLY_GRADIENT, grads.data(), &update));
//   RETURN_IF_ERROR(update.Run());
//
// Stateless functions; safe from several threads on different buffers.
#ifndef PSTRAIN_MODELS_FLAT_PARAMS_H_
#define PSTRAIN_MODELS_FLAT_PARAMS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ps/dense_cache.h"
#include "ps/sharded_variable.h"

namespace pstrain {

// A float32 variable and where its rows start in the buffer (in floats).
struct FlatVariable {
  ShardedVariable variable;
  int64_t offset = 0;
};

// Reads every shard of every variable into `params` at its place, with one Read request per ps
// task, all in parallel; a variable `cache` (may be null: ps/dense_cache.h) holds is copied from
// it instead. Errors: the first ps error; kInternal when a ps answers with the wrong number of
// values or bytes (naming the ps and the shard).
absl::Status PullFlat(absl::Span<const FlatVariable> vars, float* params,
                      const DenseCache* cache = nullptr);

// Adds one dense op per variable to `update`: `kind` with the variable's range of `values`, which
// must stay alive and unchanged until the update has run. With `cache`, the variables' rows come
// back into it (UpdateBatch::AddDense).
absl::Status AddFlatOps(absl::Span<const FlatVariable> vars, UpdateOp::Kind kind,
                        const float* values, UpdateBatch* update, DenseCache* cache = nullptr);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_FLAT_PARAMS_H_
