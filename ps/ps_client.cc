#include "ps/ps_client.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "common/wire_reader.h"

namespace pstrain {
namespace {

// Runs one async call and waits for it.
template <typename Call>
absl::Status Wait(Call call) {
  absl::Notification done;
  absl::Status result;
  call([&](absl::Status status) {
    result = std::move(status);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<absl::string_view>>> LookupWireReply::Values() const {
  WireReader reader(&chunks_, "lookup reply");
  std::vector<std::vector<absl::string_view>> values;
  while (!reader.Done()) {
    int field = 0, type = 0;
    absl::Status s = reader.ReadTag(&field, &type);
    if (s.ok() && (field != 1 || type != 2)) {  // LookupResponse.values: field 1, bytes
      return absl::InternalError(absl::StrCat("lookup reply: unexpected field ", field,
                                              " (wire type ", type, ") after ", values.size(),
                                              " values"));
    }
    if (s.ok()) s = reader.ReadBytes(&values.emplace_back());
    if (!s.ok()) return absl::InternalError(s.message());
  }
  return values;
}

void PsClient::UpdateWithValuesAsync(const UpdateRequest* request,
                                     const std::vector<absl::string_view>* values,
                                     UpdateResponse* response, Done done) {
  auto copy = std::make_shared<UpdateRequest>(*request);
  for (int i = 0; i < copy->ops_size() && i < static_cast<int>(values->size()); ++i) {
    if (!(*values)[i].empty()) copy->mutable_ops(i)->set_values(std::string((*values)[i]));
  }
  UpdateAsync(copy.get(), response, [copy, done = std::move(done)](absl::Status s) mutable {
    done(std::move(s));
  });
}

void PsClient::LookupWireAsync(const LookupRequest* request, LookupWireReply* reply, Done done) {
  auto response = std::make_shared<LookupResponse>();
  LookupAsync(request, response.get(),
              [response, reply, done = std::move(done)](absl::Status status) {
                if (status.ok()) {
                  auto bytes = std::make_shared<std::string>(response->SerializeAsString());
                  reply->Set({absl::string_view(*bytes)}, bytes);
                }
                done(std::move(status));
              });
}

absl::Status PsClient::CreateShards(const CreateShardsRequest& request,
                                    CreateShardsResponse* response) {
  return Wait([&](Done d) { CreateShardsAsync(&request, response, std::move(d)); });
}
absl::Status PsClient::ListShards(const ListShardsRequest& request, ListShardsResponse* response) {
  return Wait([&](Done d) { ListShardsAsync(&request, response, std::move(d)); });
}
absl::Status PsClient::Lookup(const LookupRequest& request, LookupResponse* response) {
  return Wait([&](Done d) { LookupAsync(&request, response, std::move(d)); });
}
absl::Status PsClient::Read(const ReadRequest& request, ReadResponse* response) {
  return Wait([&](Done d) { ReadAsync(&request, response, std::move(d)); });
}
absl::Status PsClient::Update(const UpdateRequest& request, UpdateResponse* response) {
  return Wait([&](Done d) { UpdateAsync(&request, response, std::move(d)); });
}

absl::Status PsClient::Export(const ExportRequest& request, ExportResponse* response) {
  return Wait([&](Done d) { ExportAsync(&request, response, std::move(d)); });
}

absl::Status PsClient::Health(const HealthRequest& request, HealthResponse* response) {
  return Wait([&](Done d) { HealthAsync(&request, response, std::move(d)); });
}
absl::Status PsClient::SaveShards(const SaveShardsRequest& request, SaveShardsResponse* response) {
  return Wait([&](Done d) { SaveShardsAsync(&request, response, std::move(d)); });
}
absl::Status PsClient::RestoreShards(const RestoreShardsRequest& request,
                                     RestoreShardsResponse* response) {
  return Wait([&](Done d) { RestoreShardsAsync(&request, response, std::move(d)); });
}
absl::Status PsClient::CommitRestore(const CommitRestoreRequest& request,
                                     CommitRestoreResponse* response) {
  return Wait([&](Done d) { CommitRestoreAsync(&request, response, std::move(d)); });
}

int PsMethodNumber(const char* name) {
  return LookupRequest::descriptor()->file()->FindServiceByName("PsService")
      ->FindMethodByName(name)->index();
}

absl::Status CallAll(int n, const std::function<void(int i, PsClient::Done done)>& start,
                     const std::function<void()>& started) {
  if (n <= 0) {
    if (started) started();
    return absl::OkStatus();
  }
  std::vector<absl::Status> statuses(n);
  absl::BlockingCounter pending(n);
  for (int i = 0; i < n; ++i) {
    start(i, [&statuses, &pending, i](absl::Status s) {
      statuses[i] = std::move(s);
      pending.DecrementCount();
    });
  }
  if (started) started();
  pending.Wait();
  for (absl::Status& s : statuses) {
    if (!s.ok()) return std::move(s);
  }
  return absl::OkStatus();
}

}  // namespace pstrain
