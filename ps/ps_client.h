// How closures and the coordinator reach one ps task. The core has no gRPC dependency; the gRPC
// implementation is grpc_ps_client.h, and tests may use fakes.
#ifndef PSTRAIN_PS_PS_CLIENT_H_
#define PSTRAIN_PS_PS_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/ps_service.pb.h"

namespace pstrain {

// PsService's method `name` as a number: its index in the service's descriptor, which is how the
// ps's handlers (ps/ps_service_handlers.h) number them for the data plane and in-process calls.
int PsMethodNumber(const char* name);

// A Lookup reply as it arrived, unparsed: LookupResponse's wire format in one or more chunks whose
// memory `owner` keeps alive (for gRPC, the received slices, not copied). It lets LookupBatch copy
// each row straight to where the caller wants it instead of first into protobuf strings.
class LookupWireReply {
 public:
  void Set(std::vector<absl::string_view> chunks, std::shared_ptr<const void> owner) {
    chunks_ = std::move(chunks);
    owner_ = std::move(owner);
  }
  // One value per op (LookupResponse.values), each as the pieces of the chunks it spans.
  // Errors: kInternal naming what is malformed (a field other than values, a cut length or value).
  absl::StatusOr<std::vector<std::vector<absl::string_view>>> Values() const;

 private:
  std::vector<absl::string_view> chunks_;
  std::shared_ptr<const void> owner_;
};

// Thread-safe. Async calls return at once and run `done` exactly once, on some other thread, with
// the call's status; the request and response must stay alive until then. `done` must not block or
// wait for another call: it may run on one of gRPC's internal threads (an update's, where gRPC lets
// go of the request's memory, which it sends without copying). Errors are the ps
// service's (see proto/ps_service.proto), plus kUnavailable / kDeadlineExceeded when the ps can't
// be reached; messages name the ps task.
class PsClient {
 public:
  using Done = std::function<void(absl::Status)>;

  virtual ~PsClient() = default;

  // "ps:1 at host:port", for messages.
  virtual const std::string& name() const = 0;
  // Whether this client's updates wait on other workers (a synchronous worker's replica, whose
  // updates all-reduce first: worker/mirrored_ps_client.h). UpdateBatch sends to such a client only
  // after the batch's other updates (to asynchronous ps tasks) completed, so once a synchronous
  // step's collective is through, every worker's asynchronous pushes of that step have landed.
  // Default false.
  virtual bool synchronous() const { return false; }
  // Whether updates with return_rows made one after another (each UpdateWithValuesAsync returned
  // before the next was made) are applied by the ps in that order: a worker may then give its
  // turn at the dense part back as soon as its push is sent (ps/dense_cache.h). The data plane's
  // are (they travel on one connection, which the ps serves in order); gRPC's calls are not.
  // Default false.
  virtual bool ordered() const { return false; }

  virtual void CreateShardsAsync(const CreateShardsRequest* request,
                                 CreateShardsResponse* response, Done done) = 0;
  virtual void ListShardsAsync(const ListShardsRequest* request, ListShardsResponse* response,
                               Done done) = 0;
  virtual void LookupAsync(const LookupRequest* request, LookupResponse* response, Done done) = 0;
  // Lookup with the reply left in wire format. The default runs LookupAsync and serializes its
  // response into one chunk; the gRPC client hands over the received slices as they are.
  virtual void LookupWireAsync(const LookupRequest* request, LookupWireReply* reply, Done done);
  virtual void ReadAsync(const ReadRequest* request, ReadResponse* response, Done done) = 0;
  // The size of the row ranges a large read is best split into, read side by side
  // (ShardedVariable::ReadAll); 0: read it whole. The default: 0.
  virtual int64_t read_piece_bytes() const { return 0; }
  virtual void UpdateAsync(const UpdateRequest* request, UpdateResponse* response, Done done) = 0;
  // Update with op i's values given apart as (*values)[i] (an empty view: the op's own values),
  // which must stay alive and unchanged until `done`: the gRPC client sends them from where they
  // are instead of copying them into the request. The default copies them into a request.
  virtual void UpdateWithValuesAsync(const UpdateRequest* request,
                                     const std::vector<absl::string_view>* values,
                                     UpdateResponse* response, Done done);
  // A chunk of a dynamic table's shard.
  virtual void ExportAsync(const ExportRequest* request, ExportResponse* response, Done done) = 0;
  // Liveness and identity (fails fast with kUnavailable when the ps is down).
  virtual void HealthAsync(const HealthRequest* request, HealthResponse* response, Done done) = 0;
  // Checkpoints (see proto/ps_service.proto).
  virtual void SaveShardsAsync(const SaveShardsRequest* request, SaveShardsResponse* response,
                               Done done) = 0;
  virtual void RestoreShardsAsync(const RestoreShardsRequest* request,
                                  RestoreShardsResponse* response, Done done) = 0;
  virtual void CommitRestoreAsync(const CommitRestoreRequest* request,
                                  CommitRestoreResponse* response, Done done) = 0;

  // Blocking forms of the above.
  absl::Status CreateShards(const CreateShardsRequest& request, CreateShardsResponse* response);
  absl::Status ListShards(const ListShardsRequest& request, ListShardsResponse* response);
  absl::Status Lookup(const LookupRequest& request, LookupResponse* response);
  absl::Status Read(const ReadRequest& request, ReadResponse* response);
  absl::Status Update(const UpdateRequest& request, UpdateResponse* response);
  absl::Status Export(const ExportRequest& request, ExportResponse* response);
  absl::Status Health(const HealthRequest& request, HealthResponse* response);
  absl::Status SaveShards(const SaveShardsRequest& request, SaveShardsResponse* response);
  absl::Status RestoreShards(const RestoreShardsRequest& request, RestoreShardsResponse* response);
  absl::Status CommitRestore(const CommitRestoreRequest& request, CommitRestoreResponse* response);
};

// Starts start(i, done) for every i in [0, n) at once (one async call per ps, say) and waits for all
// of them; `started` (if given) runs once every call is on its way, before the wait. Returns OK, or
// the error of the lowest i that failed.
absl::Status CallAll(int n, const std::function<void(int i, PsClient::Done done)>& start,
                     const std::function<void()>& started = nullptr);

}  // namespace pstrain

#endif  // PSTRAIN_PS_PS_CLIENT_H_
