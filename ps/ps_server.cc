#include "ps/ps_server.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/slice.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/grpc_status.h"
#include "proto/ps_service.grpc.pb.h"
#include "ps/checkpoint_root.h"
#include "ps/variable_store.h"

namespace pstrain {
namespace {

// The data path is served raw: Lookup's and Read's replies are written in protobuf's wire format
// straight into the slice gRPC sends (VariableStore::LookupSerialized, ReadSerialized), and
// Update's request is applied from the slices gRPC received (VariableStore::UpdateWire). Every
// other method is typed.
class PsServiceImpl final
    : public PsService::WithRawCallbackMethod_Lookup<PsService::WithRawCallbackMethod_Read<
          PsService::WithRawCallbackMethod_Update<PsService::CallbackService>>> {
 public:
  PsServiceImpl(int64_t memory_budget_bytes, CheckpointRoot root)
      : store_(/*data_threads=*/-1, memory_budget_bytes), root_(std::move(root)) {}

  void SetIdentity(const TaskIdentity& identity) { identity_.Set(identity); }

  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const HealthRequest* /*request*/,
                                   HealthResponse* response) override {
    identity_.Get().ToHealthResponse(response);
    return Finish(context, absl::OkStatus());
  }

  grpc::ServerUnaryReactor* CreateShards(grpc::CallbackServerContext* context,
                                         const CreateShardsRequest* request,
                                         CreateShardsResponse* response) override {
    std::vector<VariableShardDef> defs(request->shards().begin(), request->shards().end());
    absl::StatusOr<std::vector<bool>> created = store_.CreateShards(defs);
    if (created.ok()) {
      for (bool c : *created) response->add_created(c);
    }
    return Finish(context, created.status());
  }

  grpc::ServerUnaryReactor* ListShards(grpc::CallbackServerContext* context,
                                       const ListShardsRequest* /*request*/,
                                       ListShardsResponse* response) override {
    for (VariableShardDef& def : store_.ListShards()) *response->add_shards() = std::move(def);
    for (DynamicShardStats& stats : store_.DynamicStats()) {
      *response->add_dynamic_stats() = std::move(stats);
    }
    return Finish(context, absl::OkStatus());
  }

  grpc::ServerUnaryReactor* Export(grpc::CallbackServerContext* context,
                                   const ExportRequest* request,
                                   ExportResponse* response) override {
    return Finish(context, store_.Export(*request, response));
  }

  // The data-path handlers run inline on gRPC's callback threads: the work is memory-bound and
  // short, and a hand-off to another pool would only add a wake-up.
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request_bytes,
                                   grpc::ByteBuffer* response) override {
    return ServeSerialized<LookupRequest>(
        context, request_bytes, response, "lookup",
        [this](const LookupRequest& request, const std::function<char*(size_t)>& allocate) {
          return store_.LookupSerialized(request, allocate);
        });
  }

  grpc::ServerUnaryReactor* Read(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request_bytes,
                                 grpc::ByteBuffer* response) override {
    return ServeSerialized<ReadRequest>(
        context, request_bytes, response, "read",
        [this](const ReadRequest& request, const std::function<char*(size_t)>& allocate) {
          return store_.ReadSerialized(request, allocate);
        });
  }

  grpc::ServerUnaryReactor* Update(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request_bytes,
                                   grpc::ByteBuffer* response) override {
    std::vector<grpc::Slice> slices;  // references to the received bytes, not copies
    absl::Status status;
    if (!request_bytes->Dump(&slices).ok()) {
      status = absl::InvalidArgumentError("update: unreadable UpdateRequest");
    } else {
      status = store_.UpdateWire(SliceViews(slices));
    }
    grpc::Slice empty;  // UpdateResponse has no fields: zero bytes
    *response = grpc::ByteBuffer(&empty, 1);
    return Finish(context, status);
  }

  // Checkpoint calls run long (disk I/O): they run on gRPC's callback thread too; the ps has
  // nothing else to do meanwhile (the coordinator pauses training around them).
  grpc::ServerUnaryReactor* SaveShards(grpc::CallbackServerContext* context,
                                       const SaveShardsRequest* request,
                                       SaveShardsResponse* response) override {
    absl::StatusOr<std::string> db_path = root_.Confine(request->db_path());
    if (!db_path.ok()) return Finish(context, db_path.status());
    SaveShardsRequest confined = *request;
    confined.set_db_path(*db_path);
    absl::StatusOr<SaveShardsResponse> saved = store_.SaveShards(confined);
    if (saved.ok()) *response = *std::move(saved);
    return Finish(context, saved.status());
  }

  grpc::ServerUnaryReactor* RestoreShards(grpc::CallbackServerContext* context,
                                          const RestoreShardsRequest* request,
                                          RestoreShardsResponse* response) override {
    RestoreShardsRequest confined = *request;
    for (RestoreShardOp& op : *confined.mutable_ops()) {
      for (CheckpointSource& source : *op.mutable_sources()) {
        absl::StatusOr<std::string> db_path = root_.Confine(source.db_path());
        if (!db_path.ok()) return Finish(context, db_path.status());
        source.set_db_path(*db_path);
      }
    }
    absl::StatusOr<RestoreShardsResponse> restored = store_.RestoreShards(confined);
    if (restored.ok()) *response = *std::move(restored);
    return Finish(context, restored.status());
  }

  grpc::ServerUnaryReactor* CommitRestore(grpc::CallbackServerContext* context,
                                          const CommitRestoreRequest* request,
                                          CommitRestoreResponse* /*response*/) override {
    return Finish(context, store_.CommitRestore(request->restore_id(), request->abort()));
  }

 private:
  // Parses a Request from `request_bytes`, then has serve(request, allocate) write the reply's
  // wire format into one slice of the size it asks `allocate` for.
  template <typename Request, typename Serve>
  static grpc::ServerUnaryReactor* ServeSerialized(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request_bytes,
                                                   grpc::ByteBuffer* response,
                                                   absl::string_view what, Serve serve) {
    Request request;
    grpc::ByteBuffer copy(*request_bytes);  // shares the slices; Deserialize consumes its argument
    const grpc::Status parsed = grpc::SerializationTraits<Request>::Deserialize(&copy, &request);
    if (!parsed.ok()) {
      return Finish(context, absl::InvalidArgumentError(
                                 absl::StrCat(what, ": malformed ", Request::descriptor()->name(),
                                              ": ", parsed.error_message())));
    }
    grpc::Slice reply;
    const absl::Status status = serve(request, [&reply](size_t bytes) {
      reply = grpc::Slice(grpc_slice_malloc(bytes), grpc::Slice::STEAL_REF);
      return reinterpret_cast<char*>(const_cast<uint8_t*>(reply.begin()));
    });
    if (status.ok()) *response = grpc::ByteBuffer(&reply, 1);
    return Finish(context, status);
  }

  static grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                          const absl::Status& status) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  }

  VariableStore store_;
  const CheckpointRoot root_;  // where checkpoint databases may be
  PendingIdentity identity_;
};

class PsServerImpl final : public PsServer {
 public:
  PsServerImpl() = default;
  ~PsServerImpl() override { Shutdown(); }

  absl::Status Init(const PsServerOptions& options) {
    CheckpointRoot root;
    if (!options.checkpoint_root.empty()) {
      ASSIGN_OR_RETURN(root, CheckpointRoot::Open(options.checkpoint_root));
    }
    service_ = std::make_unique<PsServiceImpl>(options.memory_budget_bytes, std::move(root));
    ASSIGN_OR_RETURN(StartedServer started,
                     StartGrpcServer(options.listen_address, {service_.get()}));
    server_ = std::move(started.server);
    identity_ = TaskIdentity::New("ps", options.task_index, started.address);
    service_->SetIdentity(identity_);
    LOG(INFO) << "ps server " << identity_.DebugString() << " started";
    return absl::OkStatus();
  }

  const TaskIdentity& identity() const override { return identity_; }

  void Shutdown() override {
    absl::MutexLock lock(&mu_);
    if (server_ == nullptr) return;
    server_->Shutdown();
    server_->Wait();
    server_.reset();
    LOG(INFO) << "ps server " << identity_.DebugString() << " stopped";
  }

 private:
  TaskIdentity identity_;
  std::unique_ptr<PsServiceImpl> service_;
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
