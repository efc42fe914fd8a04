#include "collective/gloo_group.h"

#include <algorithm>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "collective/group_membership.h"
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
      : membership_(options, [this](const std::string& reason) { SignalPairs(reason); }),
        options_(membership_.options()) {}

  ~GlooGroup() override {
    membership_.Stop();
    absl::MutexLock lock(&mu_);
    context_.reset();  // closes this rank's connections: peers in a collective see it at once
  }

  absl::Status Init() {
    RETURN_IF_ERROR(membership_.Join());
    if (options_.size == 1) return absl::OkStatus();
    RendezvousStore store(&membership_.rendezvous(), options_.join_timeout);
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
  const std::vector<std::string>& names() const override { return membership_.names(); }

  absl::Status AllReduce(float* data, int64_t n, ReduceOp op) override {
    RETURN_IF_ERROR(CheckLength("all_reduce", n));
    RETURN_IF_ERROR(Run("all_reduce", [&](const std::shared_ptr<gloo::Context>& context) {
      if (options_.size == 1 || n == 0) return;
      gloo::AllreduceOptions opts(context);
      opts.setOutput(data, static_cast<size_t>(n));
      opts.setReduceFunction(&SumFloats);
      opts.setTimeout(ToMillis(options_.timeout));
      opts.setAlgorithm(n * static_cast<int64_t>(sizeof(float)) <= options_.small_allreduce_bytes
                            ? gloo::AllreduceOptions::Algorithm::BCUBE
                            : gloo::AllreduceOptions::Algorithm::RING);
      opts.setMaxSegmentSize(
          static_cast<size_t>(std::max<int64_t>(4096, options_.ring_segment_bytes)));
      gloo::allreduce(opts);
    }));
    FinishReduce(op, data, n, options_.size);
    return absl::OkStatus();
  }

  absl::Status Broadcast(float* data, int64_t n, int root) override {
    RETURN_IF_ERROR(CheckBroadcast(root, n, options_.size));
    return Run("broadcast", [&](const std::shared_ptr<gloo::Context>& context) {
      if (options_.size == 1 || n == 0) return;
      gloo::BroadcastOptions opts(context);
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
    return Run("barrier", [&](const std::shared_ptr<gloo::Context>& context) {
      if (options_.size == 1) return;
      gloo::BarrierOptions opts(context);
      opts.setTimeout(ToMillis(options_.timeout));
      gloo::barrier(opts);
    });
  }

  // The peers see the closed pairs at once, and the reason at the rendezvous.
  void Abort(absl::string_view reason) override { membership_.Abort(reason); }

 private:
  std::string Describe() const { return membership_.Describe(); }

  template <typename T>
  absl::Status Gather(absl::Span<const T> mine, std::vector<T>* all, std::vector<int64_t>* counts) {
    return Run("all_gather", [&](const std::shared_ptr<gloo::Context>& context) {
      counts->assign(options_.size, 0);
      (*counts)[options_.rank] = static_cast<int64_t>(mine.size());
      if (options_.size == 1) {
        all->assign(mine.begin(), mine.end());
        return;
      }
      int64_t my_count = static_cast<int64_t>(mine.size());
      gloo::AllgatherOptions count_opts(context);
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
      gloo::AllgathervOptions opts(context);
      opts.setInput(mine.empty() ? &empty : const_cast<T*>(mine.data()), mine.size());
      opts.setOutput(all->data(), elements);
      opts.setTimeout(ToMillis(options_.timeout));
      gloo::allgatherv(opts);
    });
  }

  // Runs one collective, fn(context), turning Gloo's exceptions into statuses (and breaking the
  // group). One at a time.
  template <typename Fn>
  absl::Status Run(const char* what, Fn&& fn) {
    absl::MutexLock op_lock(&op_mu_);
    RETURN_IF_ERROR(membership_.CheckWhole(what));
    try {
      fn(Context());
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return Fail(what, e.what());
    }
  }

  // Breaks the group (closing the pairs) and names the cause (GroupMembership::Fail).
  absl::Status Fail(const char* what, const std::string& detail) {
    const bool timed_out = absl::StrContains(detail, "Timed out") ||
                           absl::StrContains(detail, "timeout") ||
                           absl::StrContains(detail, "Timeout");
    return membership_.Fail(what, detail, timed_out, "gloo");
  }

  // The membership's break callback: every pair fails, which wakes a collective in flight and
  // closes the connection (so peers waiting on this rank fail too).
  void SignalPairs(const std::string& reason) {
    const std::shared_ptr<gloo::Context> context = Context();
    if (context == nullptr) return;
    for (int r = 0; r < options_.size; ++r) {
      if (r == options_.rank) continue;
      auto* pair = dynamic_cast<gloo::transport::tcp::Pair*>(context->getPair(r).get());
      if (pair != nullptr) (pair->*kSignalPair)(absl::StrCat("aborted: ", reason));
    }
  }

  // The connections, or null (a group of one, or before Init).
  std::shared_ptr<gloo::Context> Context() {
    absl::MutexLock lock(&mu_);
    return context_;
  }

  // Its break callback (SignalPairs) reads mu_ and context_: the destructor stops it first.
  GroupMembership membership_;
  const CollectiveGroupOptions& options_;  // membership_'s, with the name filled in
  absl::Mutex op_mu_;  // one collective at a time (Run)
  absl::Mutex mu_;
  // Null for a group of one. Set once by Init; read by the collectives and by the break callback
  // (from the membership's threads), each taking a reference under mu_ (Context()).
  std::shared_ptr<gloo::Context> context_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<CollectiveGroup>> CreateGlooGroup(
    const CollectiveGroupOptions& options) {
  RETURN_IF_ERROR(ValidateGroupOptions(options));
  auto group = std::make_unique<GlooGroup>(options);
  RETURN_IF_ERROR(group->Init());
  return std::unique_ptr<CollectiveGroup>(std::move(group));
}

}  // namespace pstrain
