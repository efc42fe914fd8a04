// A collective group: the ranks (one per worker of a synchronous job) that all-reduce, broadcast
// and all-gather together, as TensorFlow's MultiWorkerMirroredStrategy's collectives do. The
// transport sits behind this interface: Gloo over TCP on CPUs (collective/gloo_group.h), NCCL on
// GPUs; the ranks find each other through the rendezvous (collective/rendezvous_service.h).
//
// Failure: every collective has a timeout; when a peer dies or stops answering, the collective
// fails on every rank within seconds, never hangs: kUnavailable (a peer is gone) or
// kDeadlineExceeded (a peer did not answer in time), the message naming the silent peer where the
// rendezvous knows it. The group is then broken (each later call is kAborted); form a new one with
// a higher generation.
#ifndef PSTRAIN_COLLECTIVE_COLLECTIVE_GROUP_H_
#define PSTRAIN_COLLECTIVE_COLLECTIVE_GROUP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace pstrain {

enum class ReduceOp { kSum, kMean };

struct CollectiveGroupOptions {
  // "host:port" of the rendezvous service (served by rank 0's task, or a test's own server).
  std::string rendezvous_address;
  // The group's name and generation: every rank of one group passes the same; a group formed
  // again after a failure takes a higher generation (the rendezvous forgets older ones).
  std::string group = "train";
  uint64_t generation = 1;
  int rank = 0;
  int size = 1;
  // What this rank is, for messages. Default: "rank <rank>".
  std::string name;
  // The address this rank's collective traffic binds to (Gloo's TCP pairs pick a port on it).
  // Default: loopback. A multi-machine job passes the host's address from the cluster spec.
  std::string listen_host = "127.0.0.1";
  // How long forming the group waits for every rank to join. Default 60 s.
  absl::Duration join_timeout = absl::Seconds(60);
  // How long one collective may take before it fails with kDeadlineExceeded. Default 60 s.
  absl::Duration timeout = absl::Seconds(60);
  // Signs of life to the rendezvous, and how long a failed rank waits for it to name a silent
  // peer. Defaults 500 ms and 4 s (the rendezvous calls a rank silent after 3 s).
  absl::Duration heartbeat_period = absl::Milliseconds(500);
  absl::Duration diagnose_wait = absl::Seconds(4);
  // All-reduces of at most this many bytes use Gloo's BCube (fewer, smaller steps), larger ones
  // its ring. Default 256 KiB (bench/collective_bench).
  int64_t small_allreduce_bytes = 256 << 10;
  // The ring's segments (each sent, received and reduced as one piece, pipelined). Default
  // 1 MiB, Gloo's.
  int64_t ring_segment_bytes = 1 << 20;
};

// Collectives are made one at a time (calls from several threads are serialized); every rank must
// make the same calls in the same order. Abort may be called from any thread.
class CollectiveGroup {
 public:
  virtual ~CollectiveGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's name, by rank.
  virtual const std::vector<std::string>& names() const = 0;

  // Replaces `data` (n floats, the same n on every rank) with the element-wise sum over the ranks,
  // or the mean (the sum times 1/size).
  virtual absl::Status AllReduce(float* data, int64_t n, ReduceOp op) = 0;
  // Copies root's `data` (n floats) into every rank's `data`. Errors: kInvalidArgument for a root
  // outside [0, size).
  virtual absl::Status Broadcast(float* data, int64_t n, int root) = 0;
  // Concatenates every rank's `mine` (lengths may differ) in rank order into `all`; `counts[r]` is
  // rank r's length.
  virtual absl::Status AllGather(absl::Span<const float> mine, std::vector<float>* all,
                                 std::vector<int64_t>* counts) = 0;
  virtual absl::Status AllGather(absl::Span<const int64_t> mine, std::vector<int64_t>* all,
                                 std::vector<int64_t>* counts) = 0;
  // Returns once every rank has entered it.
  virtual absl::Status Barrier() = 0;

  // Breaks the group on this rank at once (its connections close, so the peers' collectives fail
  // too) and tells the rendezvous, so every rank's next heartbeat learns it.
  virtual void Abort(absl::string_view reason) = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_COLLECTIVE_COLLECTIVE_GROUP_H_
