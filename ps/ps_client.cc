#include "ps/ps_client.h"

#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"

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

absl::Status CallAll(int n, const std::function<void(int i, PsClient::Done done)>& start) {
  if (n <= 0) return absl::OkStatus();
  std::vector<absl::Status> statuses(n);
  absl::BlockingCounter pending(n);
  for (int i = 0; i < n; ++i) {
    start(i, [&statuses, &pending, i](absl::Status s) {
      statuses[i] = std::move(s);
      pending.DecrementCount();
    });
  }
  pending.Wait();
  for (absl::Status& s : statuses) {
    if (!s.ok()) return std::move(s);
  }
  return absl::OkStatus();
}

}  // namespace pstrain
