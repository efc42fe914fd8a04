// The client-side handle of a variable split into shards over ps tasks, and the batches that send
// one request per ps for operations on many variables at once.
#ifndef PSTRAIN_PS_SHARDED_VARIABLE_H_
#define PSTRAIN_PS_SHARDED_VARIABLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/ps_service.pb.h"
#include "ps/dynamic_table.h"
#include "ps/ps_client.h"

namespace pstrain {

class DenseCache;

// Where one shard lives.
struct ShardLocation {
  std::string name;        // "emb/part_0"
  int64_t row_offset = 0;  // first global row
  int64_t num_rows = 0;
  int ps_task = 0;
};

// Immutable after creation; safe to use from many threads. Operations take GLOBAL row ids: the
// handle dedupes them, routes each to its shard and ps, sends one request per ps in parallel, and
// puts results back in the caller's order. A variable created without a partitioner is one shard.
class ShardedVariable {
 public:
  // `shards` must tile rows [0, shape[0]) in order (scalars: one shard of one row); `ps` is indexed
  // by ps task (not owned; must outlive the handle).
  // Errors: kInvalidArgument naming the variable and the gap, overlap or unknown ps task.
  // `optimizer` (may be null): the shards' optimizer, as the ps tasks filled it in (ListShards).
  static absl::StatusOr<ShardedVariable> Create(std::string name, std::vector<int64_t> shape,
                                                DataType dtype, std::vector<ShardLocation> shards,
                                                std::vector<PsClient*> ps,
                                                const OptimizerDef* optimizer = nullptr);

  const std::string& name() const { return name_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  DataType dtype() const { return dtype_; }
  int64_t num_rows() const { return num_rows_; }
  int64_t width() const { return width_; }
  int64_t row_bytes() const { return row_bytes_; }
  const std::vector<ShardLocation>& shards() const { return shards_; }
  PsClient* ps(int task) const { return ps_[task]; }
  // The shards' optimizer, when known (the handle was found on the ps tasks); else null.
  const OptimizerDef* optimizer() const { return optimizer_ ? &*optimizer_ : nullptr; }

  // The shard holding global row `id` (which must be in [0, num_rows())).
  int ShardOf(int64_t id) const;

  // Rows for `ids` (float32 variables), ids.size() * width() floats into `out`.
  // Errors: kInvalidArgument (an id out of range, naming it), and the ps errors.
  absl::Status Lookup(absl::Span<const int64_t> ids, float* out) const;
  // Applies gradients (ids.size() * width() floats) with the variables' server-side optimizer.
  absl::Status ApplyGradients(absl::Span<const int64_t> ids, const float* grads) const;
  absl::Status AssignAdd(absl::Span<const int64_t> ids, const float* values) const;
  absl::Status Assign(absl::Span<const int64_t> ids, const float* values) const;

  // The whole variable, num_rows() * row_bytes() bytes, in row order.
  absl::StatusOr<std::string> ReadAll() const;
  // Dense updates of the whole variable (values: num_rows() * row_bytes() bytes).
  absl::Status AssignAll(absl::string_view values) const;
  absl::Status ApplyDenseGradients(absl::string_view grads) const;

 private:
  ShardedVariable() = default;

  std::string name_;
  std::vector<int64_t> shape_;
  DataType dtype_ = DT_INVALID;
  int64_t num_rows_ = 0;
  int64_t width_ = 0;
  int64_t row_bytes_ = 0;
  std::vector<ShardLocation> shards_;
  std::vector<int64_t> shard_ends_;  // shard_ends_[i] = row_offset + num_rows of shard i
  std::vector<PsClient*> ps_;
  std::optional<OptimizerDef> optimizer_;
};

// Lookups on any number of variables and dynamic tables, sent as ONE request per ps task, all in
// parallel. Not thread-safe; one batch per step.
class LookupBatch {
 public:
  // Rows of `v` for `ids` go to `out` (ids.size() * v.row_bytes() bytes). `v`, `ids` and `out` must
  // stay valid until Run() returns. Errors: kInvalidArgument for an id out of range.
  absl::Status Add(const ShardedVariable& v, absl::Span<const int64_t> ids, char* out);
  // Rows of dynamic table `t` for `keys` (keys.size() * t.row_bytes() bytes into `out`).
  absl::Status Add(const DynamicTable& t, absl::Span<const int64_t> keys, char* out,
                   LookupMode mode);
  // The global step the requests belong to (dynamic tables' recency and TTL). Default 0: none.
  void set_step(int64_t step) { step_ = step; }
  // Sends and waits. Errors: the first ps error.
  absl::Status Run();

 private:
  struct Target {  // where one op's rows go
    int64_t row_bytes;
    std::vector<int64_t> first_pos;  // caller position of each unique id in this op
    char* out;
  };
  // Adds ids routed by shard_of(id) to shard s (named name_of(s), on ps ps_of(s)).
  template <typename ShardOf, typename NameOf, typename PsOf>
  void AddRouted(absl::Span<const int64_t> ids, char* out, int64_t row_bytes, int num_shards,
                 ShardOf shard_of, NameOf name_of, PsOf ps_of, bool insert);
  struct PerPs {
    PsClient* client = nullptr;
    LookupRequest request;
    LookupWireReply reply;
    std::vector<Target> targets;  // one per op in `request`
  };
  struct Fixup {  // repeated ids: copy row from position `from` to `to` after the fetch
    char* out;
    int64_t row_bytes;
    std::vector<std::pair<int64_t, int64_t>> copies;
  };
  std::map<PsClient*, PerPs> per_ps_;
  std::vector<Fixup> fixups_;
  int64_t step_ = 0;
};

// Updates (assign, assign-add, apply-gradient) on any number of variables, ONE request per ps.
class UpdateBatch {
 public:
  // Sparse: `values` holds ids.size() rows of v.row_bytes(), copied into the batch at once.
  // Repeated ids are summed here for ASSIGN_ADD and APPLY_GRADIENT of float32 variables.
  absl::Status AddSparse(const ShardedVariable& v, UpdateOp::Kind kind,
                         absl::Span<const int64_t> ids, const char* values);
  // A dynamic table's keys (ASSIGN, ASSIGN_ADD, APPLY_GRADIENT with values; ERASE with none).
  absl::Status AddSparse(const DynamicTable& t, UpdateOp::Kind kind,
                         absl::Span<const int64_t> keys, const char* values);
  // The global step the requests belong to (dynamic tables' recency and TTL). Default 0: none.
  void set_step(int64_t step) { step_ = step; }
  // Dense: `values` covers the whole variable in row order. It is sent from where it is, not
  // copied: it must stay alive and unchanged until Run returns. With `cache` (not owned; must
  // outlive Run; APPLY_GRADIENT only), the gradient is pushed as ps/dense_cache.h says: the ps
  // tasks reply with the variable's rows (and slots) as the update left them, which Run puts into
  // the cache, each shard's op says which version it was computed on, and, where the ps tasks
  // take the pushes in order, the cache applies the gradient at once. Call set_step before.
  absl::Status AddDense(const ShardedVariable& v, UpdateOp::Kind kind, absl::string_view values,
                        DenseCache* cache = nullptr);
  // Sends and waits. Errors: the first ps error. `rows_back` (may be empty) runs once, as soon as
  // the caches can be read for the next step: the pushes whose rows are waited for go first, in
  // requests of their own (a ps applies a request that returns rows whole before it replies), and
  // it runs once their rows are in the caches (or dropped, if their push failed); pushes applied
  // to their caches ahead go with the other requests, and it runs once those are sent. A worker
  // gives its turn back there (worker/dense_turns.h). With a synchronous replica the rows come
  // back from it, after everything else.
  absl::Status Run(const std::function<void()>& rows_back = nullptr);

 private:
  struct PerPs {
    PsClient* client = nullptr;
    UpdateRequest request;
    std::vector<absl::string_view> values;  // per op: its values if not in `request` (dense)
    UpdateResponse response;
  };
  // A variable whose rows come back into a cache: its push's number, whether the cache applied
  // it ahead, and where its shards' ops are, in shard order.
  struct Returned {
    DenseCache* cache;
    ShardedVariable variable;
    uint64_t seq;
    bool applied;
    bool cache_client_synchronous;  // its rows come back from a synchronous replica
    struct Op {
      PerPs* request;  // a node of per_ps_ or returning_ (stable until Run clears them)
      int op;          // index in its request
    };
    std::vector<Op> ops;
  };
  std::vector<Returned> returned_;
  PerPs& For(PsClient* client);
  // The request per ps of the ops whose rows come back (return_rows), apart from the others.
  PerPs& ForReturning(PsClient* client);
  // Puts what came back for `r` into its cache (drops the copy after a failure: `status`).
  void FillCache(const Returned& r, const absl::Status& status);
  template <typename ShardOf, typename NameOf, typename PsOf>
  void AddRouted(UpdateOp::Kind kind, absl::Span<const int64_t> ids, const char* values,
                 int64_t row_bytes, int64_t width, bool sum_repeats, DataType dtype,
                 int num_shards, ShardOf shard_of, NameOf name_of, PsOf ps_of);
  std::map<PsClient*, PerPs> per_ps_;
  std::map<PsClient*, PerPs> returning_;
  int64_t step_ = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_SHARDED_VARIABLE_H_
