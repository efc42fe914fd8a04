#include "worker/worker_service_handlers.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/tensor_proto.h"

namespace pstrain {
namespace {

// Locks each resource of `order` (sorted, so that closures sharing several can't deadlock), and
// unlocks them in reverse. (The analysis can't follow a run-time set of locks.)
template <typename R>
void LockInOrder(const std::vector<R*>& order) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (R* r : order) r->mu.Lock();
}
template <typename R>
void UnlockInReverse(const std::vector<R*>& order) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (auto it = order.rbegin(); it != order.rend(); ++it) (*it)->mu.Unlock();
}

}  // namespace

const google::protobuf::ServiceDescriptor* WorkerServiceHandlers::Service() {
  static const google::protobuf::ServiceDescriptor* service =
      FindService("pstrain.WorkerService");
  return service;
}

bool WorkerServiceHandlers::Blocks(int method) {
  if (method < 0 || method >= Service()->method_count()) return false;
  return Service()->method(method)->name() != "Health";
}

WorkerServiceHandlers::WorkerServiceHandlers(std::shared_ptr<const ClosureRegistry> registry,
                                             std::unique_ptr<PsConnection> ps, int num_workers)
    : registry_(std::move(registry)), ps_(std::move(ps)), num_workers_(std::max(1, num_workers)) {}

absl::Status WorkerServiceHandlers::Serve(int method, const std::vector<absl::string_view>& request,
                                          const ReplyAllocator& reply) {
  if (method < 0 || method >= Service()->method_count()) {
    return absl::UnimplementedError(absl::StrCat("WorkerService has no method number ", method));
  }
  const std::string& name = Service()->method(method)->name();
  if (name == "Health") {
    HealthRequest parsed;
    RETURN_IF_ERROR(ParseRequest(request, name, &parsed));
    HealthResponse response;
    identity_.Get().ToHealthResponse(&response);
    return WriteReply(response, reply);
  }
  if (name == "RunClosure") {
    RunClosureRequest parsed;
    RETURN_IF_ERROR(ParseRequest(request, name, &parsed));
    RunClosureResponse response;
    RETURN_IF_ERROR(Run(parsed, &response));
    return WriteReply(response, reply);
  }
  if (name == "CreateResource") {
    CreateResourceRequest parsed;
    RETURN_IF_ERROR(ParseRequest(request, name, &parsed));
    return Create(parsed);  // CreateResourceResponse has no fields: zero bytes
  }
  return absl::UnimplementedError(absl::StrCat("WorkerService.", name, " is not served here"));
}

absl::Status WorkerServiceHandlers::CheckIncarnation(uint64_t expected, const TaskIdentity& me) {
  if (expected != 0 && expected != me.incarnation) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "worker:%d restarted (incarnation %016x, caller expected %016x); its per-worker "
        "resources must be re-created",
        me.index, me.incarnation, expected));
  }
  return absl::OkStatus();
}

absl::Status WorkerServiceHandlers::Create(const CreateResourceRequest& request) {
  const TaskIdentity me = identity_.Get();
  RETURN_IF_ERROR(CheckIncarnation(request.worker_incarnation(), me));
  const DatasetFn* fn = registry_->FindDataset(request.dataset());
  if (fn == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("worker:", me.index, ": unknown dataset \"", request.dataset(), "\""));
  }
  std::vector<Tensor> args;
  for (const TensorProto& p : request.args()) {
    absl::StatusOr<Tensor> t = FromProto(p);
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("dataset \"", request.dataset(), "\" argument: ", t.status().message()));
    }
    args.push_back(*std::move(t));
  }
  absl::StatusOr<std::unique_ptr<Dataset>> dataset =
      (*fn)(me.index, std::max(1, request.num_workers()), args);
  if (!dataset.ok()) {
    return absl::Status(dataset.status().code(),
                        absl::StrCat("dataset \"", request.dataset(), "\" on worker:", me.index,
                                     ": ", dataset.status().message()));
  }
  auto resource = std::make_shared<Resource>();
  resource->dataset = std::move(*dataset);
  absl::MutexLock lock(&mu_);
  resources_[request.resource_id()] = std::move(resource);  // replaces an older instance
  return absl::OkStatus();
}

WorkerServiceHandlers::ClosureSeries* WorkerServiceHandlers::SeriesOf(const std::string& closure) {
  if (metrics_ == nullptr) return nullptr;
  absl::MutexLock lock(&series_mu_);
  auto [it, inserted] = series_.try_emplace(closure);
  if (inserted) {
    const Labels l{{"closure", closure}};
    it->second = ClosureSeries{
        metrics_->GetCounter("pstrain_worker_closures_total", "Closures run, by name.", l),
        metrics_->GetCounter("pstrain_worker_closures_failed_total", "Closures that failed.", l),
        metrics_->GetCounter("pstrain_worker_examples_total",
                             "Examples the closures report having processed (data rows read).", l),
        metrics_->GetHistogram("pstrain_worker_closure_seconds",
                               "Time to run a closure (a training step's latency).",
                               LatencyBuckets(), l)};
  }
  return &it->second;
}

absl::Status WorkerServiceHandlers::Run(const RunClosureRequest& request,
                                      RunClosureResponse* response) {
  const TaskIdentity me = identity_.Get();
  RETURN_IF_ERROR(CheckIncarnation(request.worker_incarnation(), me));
  const ClosureFn* fn = registry_->FindClosure(request.closure());
  if (fn == nullptr) {
    return absl::NotFoundError(absl::StrCat("worker:", me.index, ": unknown closure \"",
                                            request.closure(), "\" (registered: ",
                                            absl::StrJoin(registry_->closure_names(), ", "),
                                            ")"));
  }
  std::vector<Tensor> args;
  for (int i = 0; i < request.args_size(); ++i) {
    absl::StatusOr<Tensor> t = FromProto(request.args(i));
    if (!t.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("closure \"", request.closure(),
                                                     "\" argument ", i, ": ",
                                                     t.status().message()));
    }
    args.push_back(*std::move(t));
  }
  std::vector<std::shared_ptr<Resource>> resources;
  {
    absl::MutexLock lock(&mu_);
    for (int64_t id : request.resource_ids()) {
      auto it = resources_.find(id);
      if (it == resources_.end()) {
        return absl::NotFoundError(absl::StrCat("worker:", me.index,
                                                ": no per-worker resource ", id,
                                                " (created before this worker restarted?)"));
      }
      resources.push_back(it->second);
    }
  }
  // Lock the resources in id order (no deadlock between closures sharing several).
  std::vector<Resource*> order;
  for (auto& r : resources) order.push_back(r.get());
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  // A shared resource (read-only data) is not locked: closures on it run side by side.
  order.erase(std::remove_if(order.begin(), order.end(),
                             [](Resource* r) { return r->dataset->shared(); }),
              order.end());
  LockInOrder(order);
  ClosureContext context;
  context.worker_index = me.index;
  context.num_workers = num_workers_;
  context.replica_index = replica_index_;
  context.num_replicas = num_replicas_;
  context.steps_in_order = synchronous_;
  context.ps = ps_.get();
  for (auto& r : resources) context.datasets.push_back(r->dataset.get());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<Tensor>> outputs = (*fn)(context, args);
  UnlockInReverse(order);
  if (ClosureSeries* series = SeriesOf(request.closure()); series != nullptr) {
    series->runs->Increment();
    series->seconds->ObserveDuration(absl::Now() - start);
    if (!outputs.ok()) {
      series->failures->Increment();
    } else if (outputs->size() >= 2 && (*outputs)[1].Is<int64_t>() &&
               (*outputs)[1].num_elements() == 1) {
      series->examples->Increment((*outputs)[1].scalar<int64_t>());
    }
  }

  if (!outputs.ok()) {
    const absl::Status& s = outputs.status();
    // A ps that could not be reached inside the closure is not this worker failing: say so
    // with ABORTED, so the coordinator retries the closure instead of dropping the worker. A
    // ps that doesn't know a shard we have a handle for restarted: the same.
    if (s.code() == absl::StatusCode::kUnavailable ||
        s.code() == absl::StatusCode::kDeadlineExceeded ||
        (s.code() == absl::StatusCode::kNotFound &&
         absl::StrContains(s.message(), "unknown variable shard"))) {
      return absl::AbortedError(absl::StrCat("closure \"", request.closure(), "\" on worker:",
                                             me.index, ": ps failure: ", s.message()));
    }
    return absl::Status(s.code(), absl::StrCat("closure \"", request.closure(), "\" on worker:",
                                               me.index, ": ", s.message()));
  }
  for (const Tensor& t : *outputs) ToProto(t, response->add_outputs());
  return absl::OkStatus();
}

}  // namespace pstrain
