#include "worker/worker_server.h"

#include <algorithm>
#include <map>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/tensor_proto.h"
#include "common/thread_pool.h"
#include "proto/worker_service.grpc.pb.h"
#include "worker/ps_connection.h"

namespace pstrain {
namespace {

// One per-worker resource: this worker's dataset instance. Closures using it take its lock, unless
// it says it is shared (thread-safe).
struct Resource {
  absl::Mutex mu;
  std::unique_ptr<Dataset> dataset;
};

class WorkerServiceImpl final : public WorkerService::CallbackService {
 public:
  WorkerServiceImpl(std::shared_ptr<const ClosureRegistry> registry,
                    std::unique_ptr<PsConnection> ps, int num_threads)
      : registry_(std::move(registry)),
        ps_(std::move(ps)),
        pool_(std::make_unique<ThreadPool>(num_threads)) {}

  // Runs the closures already queued to their end, then stops the pool. Call after the server's
  // Shutdown() and before its Wait(): queued closures still finish their calls.
  void StopClosures() { pool_.reset(); }

  void SetIdentity(const TaskIdentity& identity) { identity_.Set(identity); }

  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const HealthRequest* /*request*/,
                                   HealthResponse* response) override {
    identity_.Get().ToHealthResponse(response);
    return Finish(context, absl::OkStatus());
  }

  grpc::ServerUnaryReactor* RunClosure(grpc::CallbackServerContext* context,
                                       const RunClosureRequest* request,
                                       RunClosureResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    // Closures may block on ps RPCs: run them on the pool, not on gRPC's callback threads.
    pool_->Schedule([this, reactor, request, response] {
      reactor->Finish(ToGrpcStatus(Run(*request, response)));
    });
    return reactor;
  }

  grpc::ServerUnaryReactor* CreateResource(grpc::CallbackServerContext* context,
                                           const CreateResourceRequest* request,
                                           CreateResourceResponse* /*response*/) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    pool_->Schedule(
        [this, reactor, request] { reactor->Finish(ToGrpcStatus(Create(*request))); });
    return reactor;
  }

 private:
  static grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                          const absl::Status& status) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  }

  absl::Status CheckIncarnation(uint64_t expected, const TaskIdentity& me) {
    if (expected != 0 && expected != me.incarnation) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "worker:%d restarted (incarnation %016x, caller expected %016x); its per-worker "
          "resources must be re-created",
          me.index, me.incarnation, expected));
    }
    return absl::OkStatus();
  }

  absl::Status Create(const CreateResourceRequest& request) {
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

  absl::Status Run(const RunClosureRequest& request, RunClosureResponse* response) {
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
    for (Resource* r : order) r->mu.Lock();
    ClosureContext context;
    context.worker_index = me.index;
    context.num_workers = num_workers_;
    context.ps = ps_.get();
    for (auto& r : resources) context.datasets.push_back(r->dataset.get());
    absl::StatusOr<std::vector<Tensor>> outputs = (*fn)(context, args);
    for (auto it = order.rbegin(); it != order.rend(); ++it) (*it)->mu.Unlock();

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

 public:
  void set_num_workers(int n) { num_workers_ = n; }

 private:
  std::shared_ptr<const ClosureRegistry> registry_;
  std::unique_ptr<PsConnection> ps_;
  int num_workers_ = 1;
  PendingIdentity identity_;
  absl::Mutex mu_;
  // Below: guarded by mu_.
  std::map<int64_t, std::shared_ptr<Resource>> resources_ ABSL_GUARDED_BY(mu_);
  // Last: destroyed first, so queued closures finish while everything above is alive.
  std::unique_ptr<ThreadPool> pool_;
};

class WorkerServerImpl final : public WorkerServer {
 public:
  WorkerServerImpl() = default;
  ~WorkerServerImpl() override { Shutdown(); }

  absl::Status Init(const WorkerServerOptions& options) {
    std::shared_ptr<const ClosureRegistry> registry = options.registry;
    if (registry == nullptr) {
      auto builtins = std::make_shared<ClosureRegistry>();
      RETURN_IF_ERROR(RegisterBuiltinClosures(builtins.get()));
      registry = std::move(builtins);
    }
    int threads = options.num_closure_threads;
    if (threads <= 0) threads = 4 * std::max(1u, std::thread::hardware_concurrency());
    service_ = std::make_unique<WorkerServiceImpl>(
        std::move(registry), PsConnection::ToAddresses(options.ps_addresses), threads);
    service_->set_num_workers(std::max(1, options.num_workers));
    ASSIGN_OR_RETURN(StartedServer started,
                     StartGrpcServer(options.listen_address, {service_.get()}));
    server_ = std::move(started.server);
    identity_ = TaskIdentity::New("worker", options.task_index, started.address);
    service_->SetIdentity(identity_);
    LOG(INFO) << "worker server " << identity_.DebugString() << " started";
    return absl::OkStatus();
  }

  const TaskIdentity& identity() const override { return identity_; }

  void Shutdown() override {
    absl::MutexLock lock(&mu_);
    if (server_ == nullptr) return;
    // No new calls; calls still open after a grace period are cancelled. Then let the queued
    // closures run out (they Finish() their calls), then wait for gRPC, and only then free the
    // service the server points at.
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    service_->StopClosures();
    server_->Wait();
    server_.reset();
    service_.reset();
    LOG(INFO) << "worker server " << identity_.DebugString() << " stopped";
  }

 private:
  TaskIdentity identity_;
  std::unique_ptr<WorkerServiceImpl> service_;
  absl::Mutex mu_;
  // Below: guarded by mu_.
  std::unique_ptr<grpc::Server> server_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    const WorkerServerOptions& options) {
  auto server = std::make_unique<WorkerServerImpl>();
  RETURN_IF_ERROR(server->Init(options));
  return std::unique_ptr<WorkerServer>(std::move(server));
}

}  // namespace pstrain
