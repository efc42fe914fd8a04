#include "ps/ps_server.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/memory_account.h"
#include "common/raw_service.h"
#include "common/raw_tcp.h"
#include "common/transport_security.h"
#include "common/service_metrics.h"
#include "common/status_macros.h"
#include "ps/checkpoint_root.h"
#include "ps/local_ps_client.h"
#include "ps/ps_service_handlers.h"

namespace pstrain {
namespace {

class PsServerImpl final : public PsServer {
 public:
  PsServerImpl() = default;
  ~PsServerImpl() override { Shutdown(); }

  absl::Status Init(const PsServerOptions& options) {
    CheckpointRoot root;
    if (!options.checkpoint_root.empty()) {
      ASSIGN_OR_RETURN(root, CheckpointRoot::Open(options.checkpoint_root));
    }
    PsServiceLimits limits;
    limits.memory_budget_bytes = options.memory_budget_bytes;
    limits.disk_dir = options.disk_dir;
    limits.max_ids_per_request = options.max_ids_per_request;
    limits.max_concurrent_large_requests = options.max_concurrent_large_requests;
    handlers_ = std::make_shared<PsServiceHandlers>(limits, std::move(root));
    handlers_->ExportMetrics(options.metrics);
    // The handler keeps the handlers alive (a local client may outlive the server).
    RawHandler handler = InstrumentRawHandler(
        [handlers = handlers_](int method, const std::vector<absl::string_view>& request,
                               const ReplyAllocator& reply) {
          return handlers->Serve(method, request, reply);
        },
        PsServiceHandlers::Service(), options.metrics, "pstrain_ps");
    handler_ = std::make_shared<const RawHandler>(handler);
    if (options.inflight_bytes > 0) {
      account_ = std::make_unique<MemoryAccount>(
          options.inflight_bytes, absl::StrCat("ps:", options.task_index, "'s in-flight account"));
    }
    service_ = std::make_unique<RawUnaryService>(PsServiceHandlers::Service(), handler);
    ASSIGN_OR_RETURN(StartedServer started,
                     StartGrpcServer(options.listen_address, {service_.get()}));
    {
      absl::MutexLock lock(&mu_);
      server_ = std::move(started.server);
    }
    identity_ = TaskIdentity::New("ps", options.task_index, started.address);
    const std::shared_ptr<const TransportSecurity> security = CurrentTransportSecurity();
    if (options.data_port >= 0 && !security->tls()) {
      RawTcpServerOptions data;
      data.host = started.address.substr(0, started.address.rfind(':'));
      if (data.host.size() >= 2 && data.host.front() == '[') {
        data.host = data.host.substr(1, data.host.size() - 2);
      }
      data.port = options.data_port;
      data.token = security->auth_token;
      data.service_name = absl::StrCat("ps:", options.task_index);
      data.account = account_.get();
      data.admission_wait = kAdmissionWait;
      data.max_connections = options.max_data_connections;
      ASSIGN_OR_RETURN(data_plane_, RawTcpServer::Start(data, handler));
      identity_.data_port = data_plane_->port();
    }
    handlers_->SetIdentity(identity_);
    LOG(INFO) << "ps server " << identity_.DebugString() << " started";
    return absl::OkStatus();
  }

  const TaskIdentity& identity() const override { return identity_; }

  std::unique_ptr<PsClient> NewLocalClient() const override {
    return NewLocalPsClient(absl::StrCat(identity_.DebugString(), " (in process)"), handler_);
  }

  void Shutdown() override {
    absl::MutexLock lock(&mu_);
    if (server_ == nullptr) return;
    server_->Shutdown();
    server_->Wait();
    server_.reset();
    data_plane_.reset();
    LOG(INFO) << "ps server " << identity_.DebugString() << " stopped";
  }

 private:
  TaskIdentity identity_;
  std::shared_ptr<PsServiceHandlers> handlers_;
  std::shared_ptr<const RawHandler> handler_;
  // How long a request waits for room in the account before it is refused.
  static constexpr absl::Duration kAdmissionWait = absl::Seconds(60);

  std::unique_ptr<MemoryAccount> account_;  // null: none (outlives the servers that use it)
  std::unique_ptr<RawUnaryService> service_;
  std::unique_ptr<RawTcpServer> data_plane_;
  absl::Mutex mu_;
  // Below: guarded by mu_.
  std::unique_ptr<grpc::Server> server_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const PsServerOptions& options) {
  auto server = std::make_unique<PsServerImpl>();
  RETURN_IF_ERROR(server->Init(options));
  return std::unique_ptr<PsServer>(std::move(server));
}

}  // namespace pstrain
