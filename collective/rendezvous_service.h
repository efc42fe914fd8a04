// The collective rendezvous, server side: a small key-value store and membership for collective
// groups (proto/collective.proto). One task serves it (the chief, worker 0, or a test's own
// server); the ranks use it to exchange Gloo's addresses (and NCCL's unique id), to learn that
// every rank has joined, and to learn which rank stopped answering when a collective fails.
//
// Membership of one generation of a group:
//
//     Join (every rank) --all joined--> formed --Heartbeat every period--> formed
//        |                                 |
//        +--timeout: DEADLINE_EXCEEDED     +--a rank silent > stale_after, or Abort--> aborted
//           naming the missing ranks                (each Heartbeat answers the reason)
//
// A request for a newer generation of a group starts it and forgets the older one; a request for
// an older one is FAILED_PRECONDITION.
#ifndef PSTRAIN_COLLECTIVE_RENDEZVOUS_SERVICE_H_
#define PSTRAIN_COLLECTIVE_RENDEZVOUS_SERVICE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/raw_service.h"
#include "google/protobuf/descriptor.h"
#include "proto/collective.pb.h"

namespace pstrain {

struct RendezvousOptions {
  // A joined rank with no heartbeat for this long is silent: the generation is aborted, naming it.
  // Default 3 s (ranks send one every 500 ms, collective/collective_group.h).
  absl::Duration stale_after = absl::Seconds(3);
  // Limits on what one generation may store: a key of at most 1 KiB, a value of at most 1 MiB, at
  // most 64 MiB and 65536 keys in all; at most 4096 ranks. Over a limit: RESOURCE_EXHAUSTED or
  // INVALID_ARGUMENT, nothing stored.
  int64_t max_key_bytes = 1 << 10;
  int64_t max_value_bytes = 1 << 20;
  int64_t max_total_bytes = 64 << 20;
  int64_t max_keys = 1 << 16;
  int max_ranks = 4096;
  // The longest wait a request may ask for (longer ones are cut to it). Default 10 minutes.
  absl::Duration max_wait = absl::Minutes(10);
};

// Thread-safe. Get, Join and Abort block (up to their timeout): run them off gRPC's threads.
class RendezvousState {
 public:
  explicit RendezvousState(RendezvousOptions options = {});

  // Errors, for every method: kInvalidArgument for an empty group name or generation 0;
  // kFailedPrecondition for a generation older than the group's newest.
  absl::Status Set(const RendezvousSetRequest& request);
  // Waits up to timeout_ms for the key. Errors: kDeadlineExceeded naming the key.
  absl::StatusOr<RendezvousGetResponse> Get(const RendezvousGetRequest& request);
  // Registers the rank and waits until all `size` ranks joined. Errors: kInvalidArgument for a
  // rank outside [0, size) or a size other ranks disagree with; kDeadlineExceeded naming the
  // ranks that never joined; kAborted if the generation was aborted while waiting.
  absl::StatusOr<RendezvousJoinResponse> Join(const RendezvousJoinRequest& request);
  // Records a sign of life; answers the abort reason once the generation is aborted (itself
  // aborting it when another rank went silent). Errors: kFailedPrecondition for a rank that
  // has not joined.
  absl::StatusOr<RendezvousHeartbeatResponse> Heartbeat(const RendezvousHeartbeatRequest& request);
  // Marks the generation aborted (the first reason stays), then waits up to wait_ms for a rank to
  // be silent and answers the silent ones.
  absl::StatusOr<RendezvousAbortResponse> Abort(const RendezvousAbortRequest& request);
  // Where the group stands (its newest generation; nothing is started). Errors: kInvalidArgument
  // for an empty or oversized group name.
  absl::StatusOr<RendezvousStatusResponse> Status(const RendezvousStatusRequest& request);

 private:
  struct Member {
    std::string name;
    absl::Time last_seen;
  };
  struct Generation {
    uint64_t number = 0;
    int size = 0;  // 0 until the first Join
    std::map<int, Member> members;
    std::map<std::string, std::string> kv;
    int64_t kv_bytes = 0;
    std::string aborted;
    bool aborted_deliberately = false;  // by a rank that is stopping (Abort's `deliberate`)
  };

  // The generation `number` of `group`, started if newer. Errors as above.
  absl::StatusOr<Generation*> FindLocked(absl::string_view group, uint64_t number)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Members silent at `now`, and the earliest time another would become silent.
  std::vector<int> SilentLocked(const Generation& g, absl::Time now, absl::Time* next) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DescribeLocked(const Generation& g, const std::vector<int>& ranks,
                             absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time WaitDeadline(int64_t timeout_ms) const;

  const RendezvousOptions options_;
  absl::Mutex mu_;
  absl::CondVar changed_;
  // Below: guarded by mu_.
  std::map<std::string, Generation> groups_ ABSL_GUARDED_BY(mu_);
};

// The CollectiveRendezvous service's methods on request bytes: what a server runs for each call
// and what the fuzz target drives. Every request is parsed here; one that doesn't parse is
// INVALID_ARGUMENT naming the method.
class RendezvousHandlers {
 public:
  explicit RendezvousHandlers(RendezvousOptions options = {}) : state_(options) {}

  static const google::protobuf::ServiceDescriptor* Service();
  // Whether method number `method` may block (Get, Join, Abort).
  static bool Blocks(int method);

  absl::Status Serve(int method, const std::vector<absl::string_view>& request,
                     const ReplyAllocator& reply);

 private:
  RendezvousState state_;
};

// A gRPC server serving the rendezvous alone (tests, benchmarks, a job with no other server on the
// chief). Blocking calls run on a pool of `threads`.
class RendezvousServer {
 public:
  virtual ~RendezvousServer() = default;
  // "host:port" to give the ranks.
  virtual const std::string& address() const = 0;
  // Errors: kUnavailable if `listen_address` can't be bound.
  static absl::StatusOr<std::unique_ptr<RendezvousServer>> Start(
      const std::string& listen_address, RendezvousOptions options = {}, int threads = 64);
};

}  // namespace pstrain

#endif  // PSTRAIN_COLLECTIVE_RENDEZVOUS_SERVICE_H_
