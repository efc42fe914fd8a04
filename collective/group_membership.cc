#include "collective/group_membership.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace pstrain {

absl::Status ValidateGroupOptions(const CollectiveGroupOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat("collective group: rank ", options.rank,
                                                   " of a group of ", options.size,
                                                   " (ranks are [0, size))"));
  }
  if (options.rendezvous_address.empty()) {
    return absl::InvalidArgumentError("collective group: no rendezvous address");
  }
  return absl::OkStatus();
}

absl::Status CheckLength(absl::string_view what, int64_t n) {
  if (n >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " of ", n, " elements"));
}

absl::Status CheckBroadcast(int root, int64_t n, int size) {
  if (root < 0 || root >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast from root ", root, ": the group's ranks are [0, ", size, ")"));
  }
  return CheckLength("broadcast", n);
}

void FinishReduce(ReduceOp op, float* data, int64_t n, int size) {
  if (op != ReduceOp::kMean || size == 1) return;
  const float scale = 1.0f / static_cast<float>(size);
  for (int64_t i = 0; i < n; ++i) data[i] *= scale;
}

GroupMembership::GroupMembership(const CollectiveGroupOptions& options, BreakCallback on_break)
    : options_(options),
      on_break_(std::move(on_break)),
      client_(options.rendezvous_address, options.group, options.generation) {
  if (options_.name.empty()) options_.name = absl::StrCat("rank ", options_.rank);
}

GroupMembership::~GroupMembership() { Stop(); }

absl::Status GroupMembership::Join() {
  ASSIGN_OR_RETURN(names_, client_.Join(options_.rank, options_.size, options_.name,
                                        options_.join_timeout));
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  return absl::OkStatus();
}

void GroupMembership::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (heartbeat_.joinable()) heartbeat_.join();
}

std::string GroupMembership::Describe() const {
  return absl::StrCat(options_.name, " (rank ", options_.rank, " of ", options_.size, ", group '",
                      options_.group, "' generation ", options_.generation, ")");
}

std::string GroupMembership::broken_reason() const {
  absl::MutexLock lock(&mu_);
  return broken_;
}

absl::Status GroupMembership::CheckWhole(absl::string_view what) const {
  const std::string reason = broken_reason();
  if (reason.empty()) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(what, " on ", Describe(), ": the group was aborted (",
                                         reason, "); form it again with a higher generation"));
}

bool GroupMembership::AwaitBreak(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(this, &GroupMembership::BrokenLocked), timeout);
}

void GroupMembership::Abort(absl::string_view reason) {
  const std::string why = absl::StrCat(options_.name, " aborted the group: ", reason);
  // Tell the rendezvous first, so that a peer whose collective fails on the closed connection
  // learns the reason at once instead of waiting to see who went silent.
  client_.Abort(options_.rank, why, absl::ZeroDuration(), /*deliberate=*/true)
      .status()
      .IgnoreError();  // best effort: without the rendezvous the peers still see the transport fail
  Break(why);
}

absl::Status GroupMembership::Fail(absl::string_view what, absl::string_view detail,
                                   bool timed_out, absl::string_view backend) {
  const std::string local_reason = broken_reason();
  Break(absl::StrCat(what, " failed on ", options_.name));
  // Ask the rendezvous which peer went silent (it waits a little for a dead one to be stale),
  // unless this rank was aborted itself: then the reason is known.
  std::string cause;
  std::string first_report;
  absl::StatusOr<std::vector<std::string>> silent = client_.Abort(
      options_.rank, absl::StrCat(what, ": ", detail),
      local_reason.empty() ? options_.diagnose_wait : absl::ZeroDuration(),
      /*deliberate=*/false, &first_report);
  if (!silent.ok()) {
    cause = absl::StrCat("the rendezvous is unreachable too (", silent.status().message(), ")");
  } else if (!local_reason.empty()) {
    cause = local_reason;
  } else if (silent->empty() && !first_report.empty() &&
             !absl::StartsWith(first_report, options_.name)) {
    cause = first_report;  // a peer stopped on purpose, or failed first and said why
  } else if (!silent->empty()) {
    cause = absl::StrCat(absl::StrJoin(*silent, ", "), " stopped answering");
  } else {
    cause = "no peer is silent";
  }
  const std::string message = absl::StrCat(what, " on ", Describe(), " failed: ", cause, " (",
                                           backend, ": ", detail, ")");
  LOG(WARNING) << message;
  return timed_out ? absl::DeadlineExceededError(message) : absl::UnavailableError(message);
}

void GroupMembership::Break(const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (!broken_.empty()) return;
    broken_ = reason;
  }
  if (on_break_) on_break_(reason);
}

void GroupMembership::HeartbeatLoop() {
  while (!stop_.WaitForNotificationWithTimeout(options_.heartbeat_period)) {
    absl::StatusOr<std::string> aborted = client_.Heartbeat(options_.rank);
    // An unreachable rendezvous is not this loop's to report: the collectives' own failures and
    // timeouts do.
    if (aborted.ok() && !aborted->empty()) Break(*aborted);
  }
}

}  // namespace pstrain
