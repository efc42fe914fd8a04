// One rank's membership of one generation of a collective group, kept through the rendezvous
// (rendezvous_client.h), for the transports behind CollectiveGroup (gloo_group.cc, nccl_group.cc):
// joining, heartbeats, whether the group is broken on this rank and why, a deliberate abort, and
// the diagnosis of a failed collective (which peer went silent, or who broke the group first).
//
//     Join --all joined--> whole --Break: Abort, a heartbeat that learns the generation
//                                  was aborted, or Fail (a collective failed)--> broken
//
// A broken group stays broken: form a new one with a higher generation.
#ifndef PSTRAIN_COLLECTIVE_GROUP_MEMBERSHIP_H_
#define PSTRAIN_COLLECTIVE_GROUP_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "collective/collective_group.h"
#include "collective/rendezvous_client.h"

namespace pstrain {

// The checks every transport's factory makes before joining. Errors: kInvalidArgument for a rank
// outside [0, size) or no rendezvous address.
absl::Status ValidateGroupOptions(const CollectiveGroupOptions& options);

// The argument checks of CollectiveGroup's methods, the same for every transport: `n` elements
// of collective `what` (kInvalidArgument if negative), and Broadcast's root and length
// (kInvalidArgument for a root outside [0, size) or a negative length).
absl::Status CheckLength(absl::string_view what, int64_t n);
absl::Status CheckBroadcast(int root, int64_t n, int size);

// Turns an all-reduced sum into what `op` asks for: the mean is the sum times 1/size, on the host,
// so that every transport gives the same floats.
void FinishReduce(ReduceOp op, float* data, int64_t n, int size);

// Thread-safe.
class GroupMembership {
 public:
  // Called once, when the group breaks on this rank, with the reason: the transport wakes its
  // collective in flight (and closes what it can). Runs on the thread that breaks the group (the
  // heartbeat thread, Abort's or Fail's caller) with no lock of the membership held; it must not
  // block for long. May be empty.
  using BreakCallback = std::function<void(const std::string& reason)>;

  // `options.name` empty: "rank <rank>". Nothing is contacted before Join.
  GroupMembership(const CollectiveGroupOptions& options, BreakCallback on_break);
  // Stops the heartbeat thread.
  ~GroupMembership();

  GroupMembership(const GroupMembership&) = delete;
  GroupMembership& operator=(const GroupMembership&) = delete;

  // Joins the generation (waiting up to options.join_timeout for every rank), then sends a
  // heartbeat every options.heartbeat_period from a thread of its own; a heartbeat that learns
  // the generation was aborted breaks the group with the rendezvous's reason. Call once. Errors:
  // the rendezvous's Join's (kDeadlineExceeded naming the ranks that never joined,
  // kInvalidArgument for sizes the ranks disagree on, kUnavailable naming an unreachable
  // rendezvous).
  absl::Status Join();
  // Stops the heartbeat thread: on_break is not called from it once this returns. Idempotent. A
  // transport calls it first thing in its destructor, so that no heartbeat reaches it mid-teardown.
  void Stop();

  // The options, with the name filled in.
  const CollectiveGroupOptions& options() const { return options_; }
  // Every rank's name, by rank (after Join).
  const std::vector<std::string>& names() const { return names_; }
  // The generation's client: its key-value store is where a transport exchanges its addresses.
  RendezvousClient& rendezvous() { return client_; }
  // "<name> (rank r of n, group 'g' generation k)", for messages.
  std::string Describe() const;

  // Why the group broke on this rank; empty while it is whole.
  std::string broken_reason() const;
  // OK while the group is whole; once broken, kAborted: "<what> on <Describe()>: the group was
  // aborted (<reason>); form it again with a higher generation".
  absl::Status CheckWhole(absl::string_view what) const;
  // Returns once the group is broken (true) or `timeout` has passed (false, if still whole).
  bool AwaitBreak(absl::Duration timeout) const;

  // Breaks the group on purpose: tells the rendezvous first (best effort, so that a peer whose
  // collective fails learns the reason at once), then breaks it here with the reason
  // "<name> aborted the group: <reason>".
  void Abort(absl::string_view reason);

  // After collective `what` failed on this rank (`detail`: the transport's own words): breaks the
  // group here, reports the failure to the rendezvous and asks it which peer went silent (waiting
  // up to options.diagnose_wait, unless the group was already broken here, when the reason is
  // known), and returns kDeadlineExceeded if `timed_out`, else kUnavailable:
  // "<what> on <Describe()> failed: <cause> (<backend>: <detail>)", where the cause is the reason
  // the group broke here, the first report of a peer that stopped or failed, "<peers> stopped
  // answering", "no peer is silent", or that the rendezvous is unreachable too.
  absl::Status Fail(absl::string_view what, absl::string_view detail, bool timed_out,
                    absl::string_view backend);

 private:
  // Records the first reason and calls on_break_; later calls do nothing.
  void Break(const std::string& reason);
  bool BrokenLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !broken_.empty(); }
  void HeartbeatLoop();

  CollectiveGroupOptions options_;
  const BreakCallback on_break_;
  RendezvousClient client_;
  std::vector<std::string> names_;  // set once by Join
  std::thread heartbeat_;
  absl::Notification stop_;
  mutable absl::Mutex mu_;
  // Below: guarded by mu_.
  std::string broken_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_COLLECTIVE_GROUP_MEMBERSHIP_H_
