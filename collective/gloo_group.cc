#include "collective/gloo_group.h"

#include <algorithm>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "collective/rendezvous_client.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "gloo/allgather.h"
#include "gloo/allgatherv.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/tcp/pair.h"

namespace pstrain {
namespace {

std::chrono::milliseconds ToMillis(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// Gloo's rendezvous store over ours. Gloo reports a store failure by exception; the status that
// caused it is kept, so the group returns it (with its code) rather than Gloo's text.
class RendezvousStore final : public gloo::rendezvous::Store {
 public:
  RendezvousStore(RendezvousClient* client, absl::Duration timeout)
      : client_(client), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(client_->Set(Key(key), std::string(data.begin(), data.end())));
  }

  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> value = client_->Get(Key(key), timeout_);
    Check(value.status());
    return std::vector<char>(value->begin(), value->end());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, ToMillis(timeout_)); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    const absl::Time deadline =
        absl::Now() + std::max(timeout_, absl::Milliseconds(timeout.count()));
    for (const std::string& key : keys) {
      Check(client_->Get(Key(key), std::max(absl::ZeroDuration(), deadline - absl::Now())).status());
    }
  }

  const absl::Status& error() const { return error_; }

 private:
  static std::string Key(const std::string& key) { return "gloo/" + key; }
  void Check(const absl::Status& status) {
    if (status.ok()) return;
    error_ = status;
    throw gloo::IoException(std::string(status.message()));
  }

  RendezvousClient* const client_;
  const absl::Duration timeout_;
  absl::Status error_;
};

// Gloo's TCP pair wakes the collectives waiting on it only when it fails itself; this reaches the
// method its buffers use on a timeout, so an abort wakes a collective in flight on this rank.
struct PairAccess : gloo::transport::tcp::Pair {
  using gloo::transport::tcp::Pair::signalExceptionExternal;
};
constexpr auto kSignalPair = &PairAccess::signalExceptionExternal;

void SumFloats(void* out, const void* a, const void* b, size_t n) {
  float* o = static_cast<float*>(out);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

class GlooGroup final : public CollectiveGroup {
 public:
  explicit GlooGroup(const CollectiveGroupOptions& options)
      : options_(options),
        client_(options.rendezvous_address, options.group, options.generation) {
    if (options_.name.empty()) options_.name = absl::StrCat("rank ", options_.rank);
  }

  ~GlooGroup() override {
    stop_.Notify();
    if (heartbeat_.joinable()) heartbeat_.join();
    context_.reset();  // closes this rank's connections: peers in a collective see it at once
  }

  absl::Status Init() {
    ASSIGN_OR_RETURN(names_, client_.Join(options_.rank, options_.size, options_.name,
                                          options_.join_timeout));
    heartbeat_ = std::thread([this] { HeartbeatLoop(); });
    if (options_.size == 1) return absl::OkStatus();
    RendezvousStore store(&client_, options_.join_timeout);
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = options_.listen_host;
      std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(options_.rank, options_.size);
      context->setTimeout(ToMillis(options_.timeout));
      context->connectFullMesh(store, device);
      absl::MutexLock lock(&mu_);
      context_ = std::move(context);
    } catch (const std::exception& e) {
      if (!store.error().ok()) {
        return absl::Status(store.error().code(),
                            absl::StrCat(Describe(), " could not connect to its peers: ",
                                         store.error().message()));
      }
      return absl::UnavailableError(absl::StrCat(Describe(), " could not connect to its peers (on ",
                                                 options_.listen_host, "): ", e.what()));
    }
    return absl::OkStatus();
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  const std::vector<std::string>& names() const override { return names_; }

  absl::Status AllReduce(float* data, int64_t n, ReduceOp op) override {
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat("all_reduce of ", n, " elements"));
    RETURN_IF_ERROR(Run("all_reduce", [&] {
      if (options_.size == 1 || n == 0) return;
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, static_cast<size_t>(n));
      opts.setReduceFunction(&SumFloats);
      opts.setTimeout(ToMillis(options_.timeout));
      opts.setAlgorithm(n * static_cast<int64_t>(sizeof(float)) <= options_.small_allreduce_bytes
                            ? gloo::AllreduceOptions::Algorithm::BCUBE
                            : gloo::AllreduceOptions::Algorithm::RING);
      gloo::allreduce(opts);
    }));
    if (op == ReduceOp::kMean && options_.size > 1) {
      const float scale = 1.0f / static_cast<float>(options_.size);
      for (int64_t i = 0; i < n; ++i) data[i] *= scale;
    }
    return absl::OkStatus();
  }

  absl::Status Broadcast(float* data, int64_t n, int root) override {
    if (root < 0 || root >= options_.size) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast from root ", root,
                                                     ": the group's ranks are [0, ",
                                                     options_.size, ")"));
    }
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat("broadcast of ", n, " elements"));
    return Run("broadcast", [&] {
      if (options_.size == 1 || n == 0) return;
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(data, static_cast<size_t>(n));
      opts.setRoot(root);
      opts.setTimeout(ToMillis(options_.timeout));
      gloo::broadcast(opts);
    });
  }

  absl::Status AllGather(absl::Span<const float> mine, std::vector<float>* all,
                         std::vector<int64_t>* counts) override {
    return Gather(mine, all, counts);
  }
  absl::Status AllGather(absl::Span<const int64_t> mine, std::vector<int64_t>* all,
                         std::vector<int64_t>* counts) override {
    return Gather(mine, all, counts);
  }

  absl::Status Barrier() override {
    return Run("barrier", [&] {
      if (options_.size == 1) return;
      gloo::BarrierOptions opts(context_);
      opts.setTimeout(ToMillis(options_.timeout));
      gloo::barrier(opts);
    });
  }

  void Abort(absl::string_view reason) override {
    const std::string why = absl::StrCat(options_.name, " aborted the group: ", reason);
    // Tell the rendezvous first, so that a peer whose collective fails on the closed connection
    // learns the reason at once instead of waiting to see who went silent.
    client_.Abort(options_.rank, why, absl::ZeroDuration(), /*deliberate=*/true)
        .status()
        .IgnoreError();  // best effort: without the rendezvous the peers still see the closed pairs
    LocalAbort(why);
  }

 private:
  std::string Describe() const {
    return absl::StrCat(options_.name, " (rank ", options_.rank, " of ", options_.size,
                        ", group '", options_.group, "' generation ", options_.generation, ")");
  }

  template <typename T>
  absl::Status Gather(absl::Span<const T> mine, std::vector<T>* all, std::vector<int64_t>* counts) {
    return Run("all_gather", [&] {
      counts->assign(options_.size, 0);
      (*counts)[options_.rank] = static_cast<int64_t>(mine.size());
      if (options_.size == 1) {
        all->assign(mine.begin(), mine.end());
        return;
      }
      int64_t my_count = static_cast<int64_t>(mine.size());
      gloo::AllgatherOptions count_opts(context_);
      count_opts.setInput(&my_count, 1);
      count_opts.setOutput(counts->data(), counts->size());
      count_opts.setTimeout(ToMillis(options_.timeout));
      gloo::allgather(count_opts);
      int64_t total = 0;
      std::vector<size_t> elements(options_.size);
      for (int r = 0; r < options_.size; ++r) {
        if ((*counts)[r] < 0 || (*counts)[r] > (int64_t{1} << 40)) {
          throw gloo::IoException(absl::StrCat("rank ", r, " sent a length of ", (*counts)[r]));
        }
        elements[r] = static_cast<size_t>((*counts)[r]);
        total += (*counts)[r];
      }
      all->resize(total);
      if (total == 0) return;
      T empty{};
      gloo::AllgathervOptions opts(context_);
      opts.setInput(mine.empty() ? &empty : const_cast<T*>(mine.data()), mine.size());
      opts.setOutput(all->data(), elements);
      opts.setTimeout(ToMillis(options_.timeout));
      gloo::allgatherv(opts);
    });
  }

  // Runs one collective, turning Gloo's exceptions into statuses (and breaking the group).
  template <typename Fn>
  absl::Status Run(const char* what, Fn&& fn) {
    absl::MutexLock op_lock(&op_mu_);
    {
      absl::MutexLock lock(&mu_);
      if (!aborted_.empty()) {
        return absl::AbortedError(absl::StrCat(what, " on ", Describe(),
                                               ": the group was aborted (", aborted_,
                                               "); form it again with a higher generation"));
      }
    }
    try {
      fn();
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return Fail(what, e.what());
    }
  }

  absl::Status Fail(const char* what, const std::string& detail) {
    const bool timed_out = absl::StrContains(detail, "Timed out") ||
                           absl::StrContains(detail, "timeout") ||
                           absl::StrContains(detail, "Timeout");
    std::string local_reason;
    {
      absl::MutexLock lock(&mu_);
      local_reason = aborted_;
    }
    LocalAbort(absl::StrCat(what, " failed on ", options_.name));
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
    const std::string message =
        absl::StrCat(what, " on ", Describe(), " failed: ", cause, " (gloo: ", detail, ")");
    LOG(WARNING) << message;
    return timed_out ? absl::DeadlineExceededError(message) : absl::UnavailableError(message);
  }

  // Breaks the group on this rank: every pair fails, which wakes a collective in flight and
  // closes the connection (so peers waiting on this rank fail too).
  void LocalAbort(const std::string& reason) {
    std::shared_ptr<gloo::Context> context;
    {
      absl::MutexLock lock(&mu_);
      if (!aborted_.empty()) return;
      aborted_ = reason;
      context = context_;
    }
    if (context == nullptr) return;
    for (int r = 0; r < options_.size; ++r) {
      if (r == options_.rank) continue;
      auto* pair = dynamic_cast<gloo::transport::tcp::Pair*>(context->getPair(r).get());
      if (pair != nullptr) (pair->*kSignalPair)(absl::StrCat("aborted: ", reason));
    }
  }

  void HeartbeatLoop() {
    while (!stop_.WaitForNotificationWithTimeout(options_.heartbeat_period)) {
      absl::StatusOr<std::string> aborted = client_.Heartbeat(options_.rank);
      // An unreachable rendezvous is not this loop's to report: the collectives' own failures
      // and timeouts do.
      if (aborted.ok() && !aborted->empty()) LocalAbort(*aborted);
    }
  }

  CollectiveGroupOptions options_;
  RendezvousClient client_;
  std::vector<std::string> names_;
  std::thread heartbeat_;
  absl::Notification stop_;
  absl::Mutex op_mu_;  // one collective at a time
  absl::Mutex mu_;
  // Below: guarded by mu_.
  std::string aborted_ ABSL_GUARDED_BY(mu_);
  // Null for a group of one. Set once by Init (under mu_, as the heartbeat thread reads it); the
  // collectives, which start after Init, read it without the lock.
  std::shared_ptr<gloo::Context> context_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CollectiveGroup>> CreateGlooGroup(
    const CollectiveGroupOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat("collective group: rank ", options.rank,
                                                   " of a group of ", options.size,
                                                   " (ranks are [0, size))"));
  }
  if (options.rendezvous_address.empty()) {
    return absl::InvalidArgumentError("collective group: no rendezvous address");
  }
  auto group = std::make_unique<GlooGroup>(options);
  RETURN_IF_ERROR(group->Init());
  return std::unique_ptr<CollectiveGroup>(std::move(group));
}

}  // namespace pstrain
