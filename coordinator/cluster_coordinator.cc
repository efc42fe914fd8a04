#include "coordinator/cluster_coordinator.h"

#include <algorithm>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/tensor_proto.h"

namespace pstrain {
namespace coordinator_internal {

struct ValueState {
  enum State { kPending, kReady, kFailed, kCancelled };

  void Finish(State s, absl::Status st, std::vector<Tensor> out) {
    absl::MutexLock lock(&mu);
    if (state != kPending) return;
    state = s;
    status = std::move(st);
    outputs = std::move(out);
  }

  absl::Mutex mu;
  // Below: guarded by mu.
  State state ABSL_GUARDED_BY(mu) = kPending;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::vector<Tensor> outputs ABSL_GUARDED_BY(mu);
};

}  // namespace coordinator_internal

using coordinator_internal::ValueState;

absl::StatusOr<std::vector<Tensor>> RemoteValue::Fetch() const {
  if (state_ == nullptr) return absl::FailedPreconditionError("RemoteValue of no closure");
  absl::MutexLock lock(&state_->mu);
  state_->mu.Await(absl::Condition(
      +[](ValueState* s) ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->state != ValueState::kPending; },
      state_.get()));
  if (state_->state == ValueState::kReady) return state_->outputs;
  return state_->status;
}

bool RemoteValue::IsReady() const {
  if (state_ == nullptr) return true;
  absl::MutexLock lock(&state_->mu);
  return state_->state != ValueState::kPending;
}

namespace {

struct Closure {
  RunClosureRequest request;
  RunClosureResponse response;
  std::shared_ptr<ValueState> value;
  int ps_retries = 0;
  // Its dealer (null: none), and how many of request.args are the closure's own (the rest were
  // dealt for the worker it last went to).
  std::shared_ptr<ClosureDealer> dealer;
  int own_args = 0;
};

// A failure of the worker (not of the closure): the closure goes back in the queue.
bool IsWorkerFailure(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
      return true;
    case absl::StatusCode::kFailedPrecondition:
      // The worker restarted since we last set it up (see WorkerService.RunClosure).
      return absl::StrContains(s.message(), "restarted (incarnation");
    case absl::StatusCode::kNotFound:
      return absl::StrContains(s.message(), "no per-worker resource");
    default:
      return false;
  }
}

class ClusterCoordinatorImpl final : public ClusterCoordinator {
 public:
  ClusterCoordinatorImpl(std::vector<std::unique_ptr<WorkerClient>> clients,
                         std::unique_ptr<PsConnection> ps, const CoordinatorOptions& options)
      : options_(options), ps_(std::move(ps)) {
    if (ps_ != nullptr) creator_ = std::make_unique<VariableCreator>(ps_->clients(), options.placement,
                                                  options.staleness_scaling);
    for (auto& c : clients) {
      auto w = std::make_unique<Worker>();
      w->index = static_cast<int>(workers_.size());
      w->client = std::move(c);
      workers_.push_back(std::move(w));
    }
    // Metrics first: the threads below count into them.
    if (MetricsRegistry* m = options_.metrics; m != nullptr) {
      auto counter = [m](const char* name, const char* help) { return m->GetCounter(name, help); };
      closures_done_ = counter("pstrain_coordinator_closures_total", "Closures completed.");
      closures_failed_ = counter("pstrain_coordinator_closures_failed_total",
                                 "Closures that ended in their own error.");
      worker_failures_ = counter("pstrain_coordinator_worker_failures_total",
                                 "Workers found failed (their closures run elsewhere).");
      worker_recoveries_ = counter("pstrain_coordinator_worker_recoveries_total",
                                   "Failed workers back and set up again.");
      ps_failures_ = counter("pstrain_coordinator_ps_failures_total",
                             "Closures that hit an unreachable or restarted ps.");
      ps_recoveries_ = counter("pstrain_coordinator_ps_recoveries_total",
                               "ps tasks that restarted and were re-created (and restored).");
      collector_ = m->AddCollector([this](MetricsRegistry::Sink& out) {
        absl::MutexLock lock(&mu_);
        int inflight = 0, healthy = 0;
        for (const auto& w : workers_) {
          inflight += w->inflight;
          healthy += w->healthy ? 1 : 0;
        }
        out.AddGauge("pstrain_coordinator_queued_closures", "Closures waiting for a worker.", {},
                     static_cast<double>(queue_.size()));
        out.AddGauge("pstrain_coordinator_inflight_closures", "Closures running on workers.", {},
                     inflight);
        out.AddGauge("pstrain_coordinator_healthy_workers", "Workers answering.", {}, healthy);
        out.AddGauge("pstrain_coordinator_workers", "Workers in the cluster.", {},
                     static_cast<double>(workers_.size()));
        for (const auto& d : dealers_) d->AddMetrics(out);
      });
    }
    for (auto& w : workers_) {
      Worker* raw = w.get();
      raw->thread = std::thread([this, raw] { WorkerLoop(raw); });
    }
    if (ps_ != nullptr) ps_thread_ = std::thread([this] { PsMonitorLoop(); });
  }

  ~ClusterCoordinatorImpl() override {
    if (options_.metrics != nullptr) options_.metrics->RemoveCollector(collector_);
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      // Calls in flight hold `this` in their callbacks: wait for them.
      mu_.Await(absl::Condition(
          +[](ClusterCoordinatorImpl* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            for (const auto& w : self->workers_) {
              if (w->inflight > 0) return false;
            }
            return true;
          },
          this));
      for (auto& c : queue_) {
        c->value->Finish(ValueState::kCancelled,
                         absl::CancelledError("the coordinator shut down"), {});
      }
      queue_.clear();
    }
    for (auto& w : workers_) w->thread.join();
    if (ps_thread_.joinable()) ps_thread_.join();
  }

  absl::StatusOr<RemoteValue> Schedule(const std::string& name, std::vector<Tensor> args,
                                       std::vector<PerWorkerDataset> datasets,
                                       std::shared_ptr<ClosureDealer> dealer) override {
    auto closure = std::make_shared<Closure>();
    closure->request.set_closure(name);
    for (const Tensor& t : args) ToProto(t, closure->request.add_args());
    closure->own_args = closure->request.args_size();
    for (const PerWorkerDataset& d : datasets) closure->request.add_resource_ids(d.resource_id);
    closure->value = std::make_shared<ValueState>();
    closure->dealer = std::move(dealer);

    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(TakeErrorLocked());
    if (closure->dealer != nullptr &&
        std::find(dealers_.begin(), dealers_.end(), closure->dealer) == dealers_.end()) {
      dealers_.push_back(closure->dealer);
    }
    mu_.Await(absl::Condition(
        +[](ClusterCoordinatorImpl* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return self->stopping_ ||
                 static_cast<int>(self->queue_.size()) < self->options_.max_queued_closures;
        },
        this));
    if (stopping_) return absl::CancelledError("the coordinator is shutting down");
    queue_.push_back(closure);
    ++outstanding_;
    return RemoteValue(closure->value);
  }

  absl::Status Join() override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](ClusterCoordinatorImpl* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return self->outstanding_ == 0;
        },
        this));
    return TakeErrorLocked();
  }

  absl::StatusOr<bool> Done() override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(TakeErrorLocked());
    return outstanding_ == 0;
  }

  absl::StatusOr<PerWorkerDataset> CreatePerWorkerDataset(const std::string& dataset_fn,
                                                          std::vector<Tensor> args) override {
    CreateResourceRequest request;
    request.set_dataset(dataset_fn);
    request.set_num_workers(static_cast<int>(workers_.size()));
    for (const Tensor& t : args) ToProto(t, request.add_args());
    std::vector<std::pair<Worker*, uint64_t>> healthy;
    {
      absl::MutexLock lock(&mu_);
      request.set_resource_id(next_resource_id_++);
      resources_.push_back(request);  // workers that (re)join from now on create it too
      for (auto& w : workers_) {
        if (w->healthy) healthy.emplace_back(w.get(), w->incarnation);
      }
    }
    absl::Status first_error;
    for (auto& [w, incarnation] : healthy) {
      absl::Status s = CreateOn(w, request, incarnation);
      if (!s.ok() && !IsWorkerFailure(s) && first_error.ok()) first_error = s;
      if (!s.ok() && IsWorkerFailure(s)) MarkFailed(w, s);
    }
    if (!first_error.ok()) {
      absl::MutexLock lock(&mu_);
      for (auto it = resources_.begin(); it != resources_.end(); ++it) {
        if (it->resource_id() == request.resource_id()) {
          resources_.erase(it);
          break;
        }
      }
      return first_error;
    }
    return PerWorkerDataset{request.resource_id()};
  }

  absl::Status RecoverPs() override {
    if (ps_ == nullptr) return absl::OkStatus();
    bool recovered = false;
    absl::Status s;
    {
      absl::MutexLock exclusive(&exclusive_mu_);
      s = CheckAllPs(&recovered);
    }
    if (recovered) {
      absl::MutexLock lock(&mu_);
      for (auto& c : queue_) c->ps_retries = 0;
    }
    return s;
  }

  absl::Status RunExclusive(const std::function<absl::Status()>& fn) override {
    absl::MutexLock exclusive(&exclusive_mu_);
    {
      absl::MutexLock lock(&mu_);
      exclusive_ = true;
      AwaitIdleLocked();
    }
    absl::Status s = fn();
    absl::MutexLock lock(&mu_);
    exclusive_ = false;
    return s;
  }

  VariableCreator* variables() override { return creator_.get(); }
  PsConnection* ps() override { return ps_.get(); }
  int num_workers() const override { return static_cast<int>(workers_.size()); }
  int num_healthy_workers() const override {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const auto& w : workers_) n += w->healthy ? 1 : 0;
    return n;
  }

 private:
  struct Worker {
    int index = 0;
    std::unique_ptr<WorkerClient> client;
    std::thread thread;
    // Guarded by the coordinator's mu_.
    bool healthy = false;
    uint64_t incarnation = 0;
    int inflight = 0;
  };

  // Waits until no closure runs anywhere.
  void AwaitIdleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    mu_.Await(absl::Condition(
        +[](ClusterCoordinatorImpl* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          for (const auto& w : self->workers_) {
            if (w->inflight > 0) return false;
          }
          return true;
        },
        this));
  }

  // Whether dispatch is stopped: an exclusive section or a ps check is under way.
  bool HeldLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return exclusive_ || ps_checks_done_ < ps_checks_asked_;
  }

  // Checks every ps after a closure hit a ps failure (see the class comment); runs on its own
  // thread, one check at a time.
  void PsMonitorLoop() {
    // Checks close together (failures that go on) hold dispatch a little longer each time, so the
    // workers' own connections, which reconnect with backoff (up to 1 s), catch up.
    int checks_in_a_row = 0;
    absl::Time last_check = absl::InfinitePast();
    while (true) {
      int64_t asked = 0;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](ClusterCoordinatorImpl* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return self->stopping_ || self->ps_checks_done_ < self->ps_checks_asked_;
            },
            this));
        if (stopping_) return;
        asked = ps_checks_asked_;
      }
      absl::Status s;
      bool recovered = false;
      {
        absl::MutexLock exclusive(&exclusive_mu_);
        s = CheckAllPs(&recovered);
      }
      if (absl::Now() - last_check > absl::Seconds(10)) checks_in_a_row = 0;
      const absl::Duration hold =
          std::min(options_.reconnect_backoff_initial * (int64_t{1} << std::min(checks_in_a_row, 16)),
                   options_.reconnect_backoff_max);
      ++checks_in_a_row;
      absl::MutexLock lock(&mu_);
      if (s.ok()) mu_.AwaitWithTimeout(absl::Condition(&stopping_), hold);
      last_check = absl::Now();
      ps_checks_done_ = asked;  // failures reported during the check ask for another one
      if (recovered) {
        for (auto& c : queue_) c->ps_retries = 0;
      }
      if (!s.ok() && !stopping_) FailLocked(s);
    }
  }

  // Waits for each ps to answer, and recovers those that lost their shards.
  absl::Status CheckAllPs(bool* recovered) {
    for (int i = 0; i < ps_->num_ps(); ++i) {
      PsClient* ps = ps_->ps(i);
      const absl::Time deadline = absl::Now() + options_.ps_unavailable_timeout;
      absl::Duration backoff = options_.reconnect_backoff_initial;
      HealthResponse health;
      bool logged = false;
      while (true) {
        absl::Status s = ps->Health(HealthRequest(), &health);
        if (s.ok()) break;
        if (absl::Now() > deadline) {
          return absl::UnavailableError(
              absl::StrCat(ps->name(), " has been unreachable for ",
                           absl::FormatDuration(options_.ps_unavailable_timeout),
                           "; giving up: ", s.message()));
        }
        if (!logged) {
          LOG(WARNING) << ps->name() << " unreachable (" << s.message()
                       << "); closures wait until it is back";
          logged = true;
        }
        absl::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), backoff)) {
          return absl::CancelledError("the coordinator is shutting down");
        }
        backoff = std::min(backoff * 2, options_.reconnect_backoff_max);
      }
      if (logged) LOG(INFO) << ps->name() << " is reachable again";
      if (creator_ == nullptr) continue;
      ListShardsResponse listed;
      RETURN_IF_ERROR(ps->ListShards(ListShardsRequest(), &listed));
      absl::flat_hash_set<std::string> held;
      for (const VariableShardDef& d : listed.shards()) held.insert(d.name());
      int lost = 0;
      for (const PlacedShard& p : creator_->placed_shards()) {
        if (p.ps == i && !held.contains(p.def.name())) ++lost;
      }
      if (lost == 0) continue;
      // It restarted. Let the running closures finish (they fail fast against it), then rebuild.
      {
        absl::MutexLock lock(&mu_);
        AwaitIdleLocked();
      }
      LOG(WARNING) << ps->name() << " restarted"
                   << absl::StrFormat(" (incarnation %016x)", health.incarnation())
                   << " without " << lost << " of its shards; re-creating them";
      ASSIGN_OR_RETURN(int created, creator_->RecreateOnPs(i));
      (void)created;
      Count(ps_recoveries_);
      if (options_.on_ps_restarted) {
        absl::Status s = options_.on_ps_restarted(i);
        if (!s.ok()) {
          return absl::Status(s.code(), absl::StrCat("recovering ", ps->name(), ": ", s.message()));
        }
      } else {
        LOG(WARNING) << ps->name() << ": no checkpoints to restore from; its shards start again "
                     << "from their initial values (all their updates are lost)";
      }
      *recovered = true;
    }
    return absl::OkStatus();
  }

  absl::Status TakeErrorLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Status e = std::move(error_);
    error_ = absl::OkStatus();
    return e;
  }

  absl::Status CreateOn(Worker* w, CreateResourceRequest request, uint64_t incarnation) {
    request.set_worker_incarnation(incarnation);
    CreateResourceResponse response;
    absl::Notification done;
    absl::Status status;
    w->client->CreateResourceAsync(&request, &response, [&](absl::Status s) {
      status = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();
    return status;
  }

  void MarkFailed(Worker* w, const absl::Status& why) {
    absl::MutexLock lock(&mu_);
    MarkFailedLocked(w, why);
  }

  void MarkFailedLocked(Worker* w, const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!w->healthy) return;
    w->healthy = false;
    Count(worker_failures_);
    LOG(WARNING) << w->client->name() << " failed (" << why.message()
                 << "); its closures run elsewhere until it is back";
    // What the dealers gave it is gone with it (a worker that comes back has fresh resources).
    for (const auto& d : dealers_) d->WorkerLost(w->index);
  }

  // The index in the queue of the first closure `w` may take, or -1.
  int NextForLocked(const Worker* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (size_t i = 0; i < queue_.size(); ++i) {
      ClosureDealer* d = queue_[i]->dealer.get();
      if (d == nullptr || d->CanTake(w->index)) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }

  // Reconnects with backoff until the worker answers, then re-creates its per-worker resources.
  // Returns false when the coordinator is stopping.
  bool Recover(Worker* w) {
    absl::Duration backoff = options_.reconnect_backoff_initial;
    bool logged = false;
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return false;
      }
      HealthResponse health;
      absl::Status s = w->client->Health(std::max(backoff, absl::Seconds(1)), &health);
      if (s.ok()) {
        s = SetUpResources(w, health.incarnation());
        if (s.ok()) {
          if (logged) Count(worker_recoveries_);
          LOG(INFO) << w->client->name() << " is "
                    << (logged ? "back" : "ready") << absl::StrFormat(" (incarnation %016x)", health.incarnation());
          return true;
        }
        if (!IsWorkerFailure(s)) {
          // The worker is up but can't create a per-worker resource (its dataset function fails
          // there): that fails the job, as it does when CreatePerWorkerDataset finds the worker up
          // (it wasn't yet, or it restarted since), instead of closures waiting for this worker
          // forever. It is still retried, with backoff: the cause may be fixed meanwhile.
          absl::MutexLock lock(&mu_);
          FailLocked(s);
        }
      }
      if (!logged) {
        LOG(WARNING) << w->client->name() << " unreachable (" << s.message()
                     << "); retrying with backoff";
        logged = true;
      }
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), backoff);
      backoff = std::min(backoff * 2, options_.reconnect_backoff_max);
    }
  }

  // Creates every per-worker resource on `w` (which has `incarnation`), then marks it healthy.
  absl::Status SetUpResources(Worker* w, uint64_t incarnation) {
    size_t done = 0;
    while (true) {
      std::vector<CreateResourceRequest> todo;
      {
        absl::MutexLock lock(&mu_);
        if (done >= resources_.size()) {
          w->healthy = true;
          w->incarnation = incarnation;
          return absl::OkStatus();
        }
        todo.assign(resources_.begin() + done, resources_.end());
      }
      for (const CreateResourceRequest& r : todo) {
        RETURN_IF_ERROR(CreateOn(w, r, incarnation));
      }
      done += todo.size();
    }
  }

  void WorkerLoop(Worker* w) {
    while (Recover(w)) {
      while (true) {
        std::shared_ptr<Closure> c;
        {
          absl::MutexLock lock(&mu_);
          auto ready = [this, w]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            return stopping_ || !w->healthy ||
                   (!HeldLocked() && !queue_.empty() &&
                    w->inflight < options_.max_inflight_per_worker && NextForLocked(w) >= 0);
          };
          mu_.Await(absl::Condition(&ready));
          if (stopping_) return;
          if (!w->healthy) break;
          const auto at = queue_.begin() + NextForLocked(w);
          c = std::move(*at);
          queue_.erase(at);
          ++w->inflight;
          c->request.set_worker_incarnation(w->incarnation);
          if (c->dealer != nullptr) {
            // Dealt afresh for this worker: what an earlier try carried went with that try.
            c->request.mutable_args()->DeleteSubrange(c->own_args,
                                                      c->request.args_size() - c->own_args);
            for (const Tensor& t : c->dealer->Deal(w->index)) ToProto(t, c->request.add_args());
          }
        }
        c->response.Clear();
        w->client->RunClosureAsync(&c->request, &c->response,
                                   [this, w, c](absl::Status s) { OnDone(w, c, std::move(s)); });
      }
    }
  }

  void OnDone(Worker* w, const std::shared_ptr<Closure>& c, absl::Status s) {
    std::vector<Tensor> outputs;
    if (s.ok()) {
      for (const TensorProto& p : c->response.outputs()) {
        absl::StatusOr<Tensor> t = FromProto(p);
        if (!t.ok()) {
          s = absl::InternalError(absl::StrCat("closure \"", c->request.closure(),
                                               "\" returned a bad tensor: ", t.status().message()));
          break;
        }
        outputs.push_back(*std::move(t));
      }
    }
    absl::MutexLock lock(&mu_);
    --w->inflight;
    if (c->dealer != nullptr) {
      if (s.ok()) {
        c->dealer->Completed(w->index, outputs);
      } else {
        c->dealer->Returned(w->index);
      }
    }
    if (!s.ok() && IsWorkerFailure(s)) {
      MarkFailedLocked(w, s);
      RequeueLocked(c, /*front=*/true);
      return;
    }
    if (s.code() == absl::StatusCode::kAborted && c->ps_retries < options_.ps_failure_retries) {
      ++c->ps_retries;
      Count(ps_failures_);
      LOG(WARNING) << "closure \"" << c->request.closure() << "\" hit a ps failure (" << s.message()
                   << "); checking the ps tasks, then retry " << c->ps_retries << " of "
                   << options_.ps_failure_retries;
      // Hold dispatch until the ps tasks are checked (and recovered if they restarted).
      if (ps_ != nullptr) ++ps_checks_asked_;
      RequeueLocked(c, /*front=*/true);
      return;
    }
    --outstanding_;
    Count(s.ok() ? closures_done_ : closures_failed_);
    if (s.ok()) {
      c->value->Finish(ValueState::kReady, absl::OkStatus(), std::move(outputs));
      return;
    }
    c->value->Finish(ValueState::kFailed, s, {});
    FailLocked(s);
  }

  // Records the job's first error and cancels everything still queued (TF semantics).
  void FailLocked(const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!error_.ok()) return;
    error_ = s;
    const absl::Status cancelled = absl::CancelledError(absl::StrCat(
        "closure cancelled because another closure failed: ", s.message(), "; schedule it again"));
    for (auto& q : queue_) q->value->Finish(ValueState::kCancelled, cancelled, {});
    outstanding_ -= static_cast<int64_t>(queue_.size());
    queue_.clear();
  }

  void RequeueLocked(const std::shared_ptr<Closure>& c, bool front)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!error_.ok() || stopping_) {
      // The queue was cancelled meanwhile: this closure goes with it.
      --outstanding_;
      c->value->Finish(ValueState::kCancelled,
                       absl::CancelledError(absl::StrCat(
                           "closure cancelled because another closure failed: ", error_.message())),
                       {});
      return;
    }
    if (front) {
      queue_.push_front(c);
    } else {
      queue_.push_back(c);
    }
  }

  const CoordinatorOptions options_;
  std::unique_ptr<PsConnection> ps_;
  std::unique_ptr<VariableCreator> creator_;
  // Metrics (CoordinatorOptions::metrics): null without.
  static void Count(Counter* c) {
    if (c != nullptr) c->Increment();
  }
  Counter* closures_done_ = nullptr;
  Counter* closures_failed_ = nullptr;
  Counter* worker_failures_ = nullptr;
  Counter* worker_recoveries_ = nullptr;
  Counter* ps_failures_ = nullptr;
  Counter* ps_recoveries_ = nullptr;
  int collector_ = 0;
  std::vector<std::unique_ptr<Worker>> workers_;  // fixed after construction
  std::thread ps_thread_;                         // checks ps tasks after ps failures
  // Held through an exclusive section or a ps check, so that the two never overlap.
  absl::Mutex exclusive_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  mutable absl::Mutex mu_;
  // Below: guarded by mu_ (and the Worker fields marked so).
  std::deque<std::shared_ptr<Closure>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;  // scheduled, not finished (queued + running)
  absl::Status error_ ABSL_GUARDED_BY(mu_);       // first closure error, not yet returned
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool exclusive_ ABSL_GUARDED_BY(mu_) = false;         // RunExclusive holds dispatch
  // A ps failure holds dispatch until a check started after it has finished.
  int64_t ps_checks_asked_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ps_checks_done_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_resource_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<CreateResourceRequest> resources_ ABSL_GUARDED_BY(mu_);
  // Every dealer a closure was scheduled with (told of lost workers).
  std::vector<std::shared_ptr<ClosureDealer>> dealers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterCoordinator>> ClusterCoordinator::Create(
    std::vector<std::unique_ptr<WorkerClient>> workers, std::unique_ptr<PsConnection> ps,
    const CoordinatorOptions& options) {
  if (workers.empty()) return absl::InvalidArgumentError("a coordinator needs at least one worker");
  if (options.max_queued_closures < 1 || options.max_inflight_per_worker < 1) {
    return absl::InvalidArgumentError(
        "max_queued_closures and max_inflight_per_worker must be at least 1");
  }
  return std::unique_ptr<ClusterCoordinator>(
      new ClusterCoordinatorImpl(std::move(workers), std::move(ps), options));
}

absl::StatusOr<std::unique_ptr<ClusterCoordinator>> ClusterCoordinator::Create(
    const ClusterSpec& spec, const CoordinatorOptions& options) {
  std::vector<std::unique_ptr<WorkerClient>> workers;
  for (int i = 0; i < spec.num_workers(); ++i) {
    workers.push_back(NewGrpcWorkerClient(i, spec.tasks(kWorker)[i]));
  }
  return Create(std::move(workers), PsConnection::ToAddresses(spec.tasks(kPs)), options);
}

}  // namespace pstrain
