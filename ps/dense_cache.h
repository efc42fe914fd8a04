// A worker's copy of whole fixed variables (the dense part of a model), kept with the pushes of
// their gradients (UpdateBatch::AddDense with a cache), so that the worker's steps, which take
// turns at the dense part (worker/dense_turns.h), don't wait for the ps between them:
//
//   - every such push asks the ps for the rows it updated, with their optimizer slots and the
//     shard's version (UpdateRequest.return_rows, return_slots), and the reply becomes the copy;
//   - where the pushes reach the ps in the order they are sent (PsClient::ordered: the data
//     plane), a push is also applied to the copy at once, as the ps will apply it (the variable's
//     optimizer, at the push's step), so the next step reads the weights that hold it without a
//     round trip: its turn can begin as soon as the push is sent. When the reply comes, the copy
//     becomes what the ps holds (every other worker's updates included) with this worker's pushes
//     sent since then applied again on top.
//
// A step's gradient computed on the copy says which version of each shard it was computed on
// (UpdateOp.read_version: the version the copy came back at, plus this worker's pushes still on
// their way), so the ps still measures its staleness (ps/staleness.h): the other workers'
// updates that landed meanwhile.
//
// Not applied ahead (the ps's answer is waited for instead): a variable whose optimizer the
// handle doesn't know, or which scales its rate by staleness (the worker can't know the factor).
// A copy is dropped when a push of it fails or comes back without its rows.
//
// Thread-safe: the step holding the turn reads and pushes while earlier steps' replies arrive.
#ifndef PSTRAIN_PS_DENSE_CACHE_H_
#define PSTRAIN_PS_DENSE_CACHE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "ps/optimizers.h"
#include "ps/sharded_variable.h"

namespace pstrain {

class DenseCache {
 public:
  DenseCache();
  ~DenseCache();

  // Copies `v`'s rows (v.num_rows() * v.row_bytes() bytes) into `out` and returns true when the
  // cache holds them; false, copying nothing, when it doesn't (read them from the ps).
  bool Read(const ShardedVariable& v, char* out) const;
  bool Holds(const ShardedVariable& v) const;

  // A push of `v`'s gradient `grads` (the whole variable, float32) at request step `step`, about
  // to be sent: what each shard's op says it was computed on (UpdateOp.read_version; 0: unknown),
  // and, with `ahead`, the gradient applied to the copy if it can be (applied).
  struct Ticket {
    uint64_t seq = 0;  // the push's number, for its reply
    bool applied = false;
    std::vector<int64_t> read_versions;  // per shard
  };
  Ticket Push(const ShardedVariable& v, absl::string_view grads, int64_t step, bool ahead);

  // What push `seq` of `v` brought back, per shard: its rows, slots (may be empty: then nothing is
  // applied ahead of a reply until slots come back) and version; a shard without a reply (or a
  // reply of the wrong size) drops the copy. `replies` in shard order.
  struct ShardReply {
    bool ok = false;
    absl::string_view rows, slots;
    int64_t version = 0;
  };
  void Returned(const ShardedVariable& v, uint64_t seq, const std::vector<ShardReply>& replies);
  // Forgets `v` (a push of it failed), or everything.
  void Drop(const ShardedVariable& v);
  void Clear();

 private:
  struct Pushed {
    uint64_t seq;
    int64_t step;
    std::vector<float> grads;
  };
  struct Copy {
    std::vector<float> rows;                // the whole variable, row order
    std::vector<std::vector<float>> slots;  // per slot, the whole variable (empty: none came)
    std::vector<int64_t> versions;          // per shard, as the ps replied
    uint64_t replied = 0;                   // the newest push whose reply this is
    std::deque<Pushed> ahead;               // pushes applied here, not yet in a reply
    std::unique_ptr<Optimizer> optimizer;   // null: never applied ahead
    bool appliable = false;                 // the optimizer known and the slots came back
  };
  // Applies one pushed gradient to the copy (the `t`-th gradient of the shards).
  static void Apply(Copy& c, const float* grads, int64_t step, int64_t t);

  mutable absl::Mutex mu_;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Copy> copies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_DENSE_CACHE_H_
