#include "ps/grpc_ps_client.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/grpc_util.h"
#include "grpcpp/client_context.h"
#include "proto/ps_service.grpc.pb.h"

namespace pstrain {
namespace {

class GrpcPsClient final : public PsClient {
 public:
  GrpcPsClient(int task_index, const std::string& address, const GrpcPsClientOptions& options)
      : name_(absl::StrCat("ps:", task_index, " at ", address)),
        options_(options),
        stub_(PsService::NewStub(CreateChannel(address))) {}

  const std::string& name() const override { return name_; }

  void CreateShardsAsync(const CreateShardsRequest* request, CreateShardsResponse* response,
                         Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->CreateShards(c, request, response, std::move(cb));
    }, std::move(done), /*wait_for_ready=*/true);
  }
  void ListShardsAsync(const ListShardsRequest* request, ListShardsResponse* response,
                       Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->ListShards(c, request, response, std::move(cb));
    }, std::move(done));
  }
  void LookupAsync(const LookupRequest* request, LookupResponse* response, Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->Lookup(c, request, response, std::move(cb));
    }, std::move(done));
  }
  void ReadAsync(const ReadRequest* request, ReadResponse* response, Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->Read(c, request, response, std::move(cb));
    }, std::move(done));
  }
  void UpdateAsync(const UpdateRequest* request, UpdateResponse* response, Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->Update(c, request, response, std::move(cb));
    }, std::move(done));
  }

  void HealthAsync(const HealthRequest* request, HealthResponse* response, Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->Health(c, request, response, std::move(cb));
    }, std::move(done));
  }
  void SaveShardsAsync(const SaveShardsRequest* request, SaveShardsResponse* response, Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->SaveShards(c, request, response, std::move(cb));
    }, std::move(done), /*wait_for_ready=*/true);
  }
  void RestoreShardsAsync(const RestoreShardsRequest* request, RestoreShardsResponse* response, Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->RestoreShards(c, request, response, std::move(cb));
    }, std::move(done), /*wait_for_ready=*/true);
  }
  void CommitRestoreAsync(const CommitRestoreRequest* request, CommitRestoreResponse* response, Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->CommitRestore(c, request, response, std::move(cb));
    }, std::move(done), /*wait_for_ready=*/true);
  }

 private:
  // Issues one callback-API call through `start`; the context lives until the callback has run.
  // Creating shards and checkpoint calls wait for the connection, up to the deadline: a ps still
  // starting, or a handshake lost on a busy machine, is waited for rather than failed. Data-path
  // calls, ListShards and Health fail fast, so a down ps is noticed at once (and recovered).
  template <typename Start>
  void Call(Start start, Done done, bool wait_for_ready = false) {
    auto* context = new grpc::ClientContext();
    context->set_wait_for_ready(wait_for_ready);
    context->set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
    start(context, [this, context, done = std::move(done)](grpc::Status status) {
      delete context;
      done(FromGrpcStatus(status, name_));
    });
  }

  const std::string name_;
  const GrpcPsClientOptions options_;
  std::unique_ptr<PsService::Stub> stub_;
};

}  // namespace

std::unique_ptr<PsClient> NewGrpcPsClient(int task_index, const std::string& address,
                                          const GrpcPsClientOptions& options) {
  return std::make_unique<GrpcPsClient>(task_index, address, options);
}

}  // namespace pstrain
