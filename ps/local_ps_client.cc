#include "ps/local_ps_client.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/ps_service.pb.h"

namespace pstrain {
namespace {

// A PsService method: its name (for errors) and number (for the handlers).
struct Method {
  explicit Method(const char* name) : name(name), number(PsMethodNumber(name)) {}
  const char* name;
  int number;
};
// Every method the client calls, found once (on first use: not during static initialization,
// whose order against the descriptors' is not ours to rely on).
struct Methods {
  Method create_shards{"CreateShards"}, list_shards{"ListShards"}, lookup{"Lookup"},
      read{"Read"}, update{"Update"}, export_{"Export"}, health{"Health"},
      save_shards{"SaveShards"}, restore_shards{"RestoreShards"},
      commit_restore{"CommitRestore"};
};
const Methods& M() {
  static const Methods* methods = new Methods;
  return *methods;
}

class LocalPsClient final : public PsClient {
 public:
  LocalPsClient(std::string name, std::shared_ptr<const RawHandler> handler)
      : name_(std::move(name)), handler_(std::move(handler)) {}

  const std::string& name() const override { return name_; }
  bool ordered() const override { return true; }

  void CreateShardsAsync(const CreateShardsRequest* request, CreateShardsResponse* response,
                         Done done) override {
    done(Call(M().create_shards, *request, response));
  }
  void ListShardsAsync(const ListShardsRequest* request, ListShardsResponse* response,
                       Done done) override {
    done(Call(M().list_shards, *request, response));
  }
  void LookupAsync(const LookupRequest* request, LookupResponse* response, Done done) override {
    done(Call(M().lookup, *request, response));
  }
  // The reply stays in the buffer it was written into.
  void LookupWireAsync(const LookupRequest* request, LookupWireReply* reply, Done done) override {
    auto bytes = std::make_shared<std::string>();
    absl::Status s = Serve(M().lookup, request->SerializeAsString(), bytes.get());
    if (s.ok()) reply->Set({absl::string_view(*bytes)}, bytes);
    done(std::move(s));
  }
  void ReadAsync(const ReadRequest* request, ReadResponse* response, Done done) override {
    done(Call(M().read, *request, response));
  }
  void UpdateAsync(const UpdateRequest* request, UpdateResponse* response, Done done) override {
    done(Call(M().update, *request, response));
  }
  void ExportAsync(const ExportRequest* request, ExportResponse* response, Done done) override {
    done(Call(M().export_, *request, response));
  }
  void HealthAsync(const HealthRequest* request, HealthResponse* response, Done done) override {
    done(Call(M().health, *request, response));
  }
  void SaveShardsAsync(const SaveShardsRequest* request, SaveShardsResponse* response,
                       Done done) override {
    done(Call(M().save_shards, *request, response));
  }
  void RestoreShardsAsync(const RestoreShardsRequest* request, RestoreShardsResponse* response,
                          Done done) override {
    done(Call(M().restore_shards, *request, response));
  }
  void CommitRestoreAsync(const CommitRestoreRequest* request, CommitRestoreResponse* response,
                          Done done) override {
    done(Call(M().commit_restore, *request, response));
  }

 private:
  // Serves `request` (wire bytes) by method name; the reply's bytes into `reply`.
  absl::Status Serve(const Method& method, const std::string& request, std::string* reply) const {
    const ReplyAllocator allocate([reply](size_t bytes) {
      reply->resize(bytes);
      return reply->data();
    });
    absl::Status s = (*handler_)(method.number, {request}, allocate);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(name_, ": ", s.message()));
    return absl::OkStatus();
  }
  template <typename Request, typename Response>
  absl::Status Call(const Method& method, const Request& request, Response* response) const {
    std::string reply;
    absl::Status s = Serve(method, request.SerializeAsString(), &reply);
    if (!s.ok()) return s;
    if (!response->ParseFromString(reply)) {
      return absl::InternalError(absl::StrCat(name_, ": ", method.name, " reply: malformed"));
    }
    return absl::OkStatus();
  }

  const std::string name_;
  const std::shared_ptr<const RawHandler> handler_;
};

}  // namespace

std::unique_ptr<PsClient> NewLocalPsClient(std::string name,
                                           std::shared_ptr<const RawHandler> handler) {
  return std::make_unique<LocalPsClient>(std::move(name), std::move(handler));
}

}  // namespace pstrain
