// A worker's copy of whole fixed variables (the dense part of a model) as its last push returned
// them (UpdateRequest.return_rows: the ps replies with the rows the push updated), so that its
// next step reads them here instead of from the ps: one round trip fewer per step where a
// worker's steps take turns at the dense part (worker/dense_turns.h), whose chain of reads and
// pushes is then one round trip per step instead of two.
//
// Each variable's copy holds its rows and, per shard, the shard's version they are at (the
// gradients it had applied); a gradient computed on them carries those versions
// (UpdateOp.read_version), so the ps still measures its staleness (ps/staleness.h). A copy is
// filled only by a push (UpdateBatch::AddDense with a cache) whose every shard returned its rows,
// and dropped by a push of it that failed.
//
// Not thread-safe: one user at a time (the step holding the worker's turn).
#ifndef PSTRAIN_PS_DENSE_CACHE_H_
#define PSTRAIN_PS_DENSE_CACHE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ps/sharded_variable.h"

namespace pstrain {

class DenseCache {
 public:
  // Copies `v`'s rows (v.num_rows() * v.row_bytes() bytes) into `out` and returns true when the
  // cache holds them; false, copying nothing, when it doesn't (read them from the ps).
  bool Read(const ShardedVariable& v, char* out) const;

  // Whether it holds `v`, and the version of its shard `shard` (0: not held).
  bool Holds(const ShardedVariable& v) const;
  int64_t Version(const ShardedVariable& v, int shard) const;

  // What a push returned: shard `shard` of `v` (its rows, in order) at `version`. The variable's
  // copy is complete once every shard of it arrived from the same push (Begin .. Commit).
  void Begin(const ShardedVariable& v);
  void Put(const ShardedVariable& v, int shard, absl::string_view rows, int64_t version);
  void Commit(const ShardedVariable& v);
  // Forgets `v` (a push of it failed, or came back without its rows), or everything.
  void Drop(const ShardedVariable& v);
  void Clear() { copies_.clear(); }

 private:
  struct Copy {
    std::string rows;               // the whole variable, row order
    std::vector<int64_t> versions;  // per shard
    std::vector<bool> arrived;      // per shard, while a push fills it
    bool complete = false;
  };
  std::map<std::string, Copy> copies_;
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_DENSE_CACHE_H_
