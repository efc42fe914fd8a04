// The replica store of a synchronous worker (multi-worker mirrored strategy): a PsClient over the
// worker's own copy of every variable (a ps task of its own) that all-reduces each update's
// gradients across the workers before applying them, so every worker applies the same update
// and the replicas stay identical, as TensorFlow's MultiWorkerMirroredStrategy does.
//
// Per update (every worker makes the same sequence of updates, in step order: a worker's steps
// overlap, but take their turns at the dense part one at a time: worker/dense_turns.h):
//   dense APPLY_GRADIENT ops   packed into buckets of `bucket_bytes`, each all-reduced (mean),
//                              with a check that every worker sent the same layout and step
//   sparse APPLY_GRADIENT ops  every worker's ids and rows all-gathered, concatenated per shard in
//                              rank order and scaled by 1/workers (the ps sums repeated ids first,
//                              so this is the mean of the workers' gradients)
//   other ops (ASSIGN, ...)    applied as they are (the replicas compute the same values)
// Lookups and reads go to the local replica unchanged.
#ifndef PSTRAIN_WORKER_MIRRORED_PS_CLIENT_H_
#define PSTRAIN_WORKER_MIRRORED_PS_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "collective/collective_group.h"
#include "ps/ps_client.h"

namespace pstrain {

struct MirrorOptions {
  // The workers' group (shared by every ps client of the worker). Required.
  std::shared_ptr<CollectiveGroup> group;
  // Dense gradients are all-reduced in buckets of at most this many bytes (TF's bytes_per_pack,
  // Horovod's fusion buffer). Default 4 MiB.
  int64_t bucket_bytes = 4 << 20;
  // The worker's ps tasks from this index on are its replica (mirrored); those before it are
  // shared ps tasks updated asynchronously as in the parameter-server strategy (the hybrid
  // strategy's dynamic tables). Default 0: every ps task is the replica's.
  int replica_ps_begin = 0;
};

// Thread-safe as far as the group is: updates from several threads are serialized by the group,
// but must come in the same order on every worker (step order). UpdateAsync blocks the
// caller for the collectives, then sends the update to the replica asynchronously.
// Update errors: kFailedPrecondition "synchronous update failed (<code>): <message>" when the
// collectives fail (the group's kUnavailable or kDeadlineExceeded naming the silent worker,
// kAborted once the group is broken; kFailedPrecondition when the workers' dense gradients don't
// match or are of different steps), kInvalidArgument for a gradient that isn't float32. Lookup errors: kInvalidArgument for
// a dynamic table's training lookup (not supported: the replicas' key sets would drift apart).
// How an update whose collectives failed begins its (kFailedPrecondition) message, followed by
// the group's code and message: the coordinator treats it as the closure's own error (it does
// not retry the step elsewhere), and the strategy recognizes it.
inline constexpr absl::string_view kSyncUpdateFailed = "synchronous update failed";

std::unique_ptr<PsClient> NewMirroredPsClient(std::unique_ptr<PsClient> replica,
                                              MirrorOptions options);

// The all-reduce of one update's gradients, in place (what the client runs before sending);
// exposed for tests. `gather_first`: check that every rank sends the same dense layout and step
// by an all-gather before the all-reduce (the client's first update: the ranks' layouts are not
// known to agree yet); else the check rides in the all-reduce (after it, before anything is
// applied), and an all-gather follows only for sparse gradients: one collective a step. Errors:
// as above.
absl::Status MirrorGradients(CollectiveGroup* group, int64_t bucket_bytes, UpdateRequest* request,
                             bool gather_first = true);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MIRRORED_PS_CLIENT_H_
