#include "worker/worker_server.h"

#include <algorithm>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/raw_service.h"
#include "common/service_metrics.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "ps/grpc_ps_client.h"
#include "worker/ps_connection.h"
#include "worker/worker_service_handlers.h"

namespace pstrain {
namespace {

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
    if (threads <= 0) {
      threads = std::max<int>(kMinClosureThreads,
                              4 * std::max(1u, std::thread::hardware_concurrency()));
    }
    std::vector<std::unique_ptr<PsClient>> clients;
    for (int i = 0; i < static_cast<int>(options.ps_addresses.size()); ++i) {
      std::unique_ptr<PsClient> client = options.local_ps ? options.local_ps(i) : nullptr;
      if (client == nullptr) client = NewGrpcPsClient(i, options.ps_addresses[i]);
      if (options.mirror.group != nullptr && i >= options.mirror.replica_ps_begin) {
        client = NewMirroredPsClient(std::move(client), options.mirror);
      }
      clients.push_back(std::move(client));
    }
    auto ps = std::make_unique<PsConnection>(std::move(clients));
    handlers_ = std::make_unique<WorkerServiceHandlers>(std::move(registry), std::move(ps),
                                                        options.num_workers);
    if (options.mirror.group != nullptr) {
      handlers_->SetReplica(options.mirror.group->rank(), options.mirror.group->size());
    }
    handlers_->SetMetrics(options.metrics);
    pool_ = std::make_unique<ThreadPool>(threads);
    service_ = std::make_unique<RawUnaryService>(
        WorkerServiceHandlers::Service(),
        InstrumentRawHandler(
            [handlers = handlers_.get()](int method, const std::vector<absl::string_view>& request,
                                         const ReplyAllocator& reply) {
              return handlers->Serve(method, request, reply);
            },
            WorkerServiceHandlers::Service(), options.metrics, "pstrain_worker"),
        // Closures may block on ps RPCs: they run on the pool, not on gRPC's callback threads.
        [pool = pool_.get()](int method, std::function<void()> work) {
          if (WorkerServiceHandlers::Blocks(method)) {
            pool->Schedule(std::move(work));
          } else {
            work();
          }
        });
    ASSIGN_OR_RETURN(StartedServer started,
                     StartGrpcServer(options.listen_address, {service_.get()}));
    {
      absl::MutexLock lock(&mu_);
      server_ = std::move(started.server);
    }
    identity_ = TaskIdentity::New("worker", options.task_index, started.address);
    handlers_->SetIdentity(identity_);
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
    pool_.reset();  // runs the queued closures to their end (they finish their calls)
    server_->Wait();
    server_.reset();
    service_.reset();
    LOG(INFO) << "worker server " << identity_.DebugString() << " stopped";
  }

 private:
  TaskIdentity identity_;
  std::unique_ptr<WorkerServiceHandlers> handlers_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<RawUnaryService> service_;
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
