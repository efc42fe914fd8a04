#include "ps/ps_client.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "google/protobuf/wire_format_lite.h"

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
  // A cursor over the chunks.
  size_t chunk = 0, at = 0;
  auto next_chunk = [&] {
    while (chunk < chunks_.size() && at == chunks_[chunk].size()) {
      ++chunk;
      at = 0;
    }
    return chunk < chunks_.size();
  };
  auto read_byte = [&](uint8_t* b) {
    if (!next_chunk()) return false;
    *b = static_cast<uint8_t>(chunks_[chunk][at++]);
    return true;
  };
  std::vector<std::vector<absl::string_view>> values;
  while (next_chunk()) {
    uint8_t tag = 0;
    read_byte(&tag);
    using google::protobuf::internal::WireFormatLite;  // LookupResponse.values: field 1, bytes
    if (tag != WireFormatLite::MakeTag(1, WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) {
      return absl::InternalError(absl::StrCat("lookup reply: unexpected field tag ",
                                              static_cast<int>(tag), " after ", values.size(),
                                              " values"));
    }
    uint64_t length = 0;
    for (int shift = 0;; shift += 7) {
      uint8_t b = 0;
      if (shift > 63 || !read_byte(&b)) {
        return absl::InternalError(
            absl::StrCat("lookup reply: value ", values.size(), " has a cut or bad length"));
      }
      length |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) break;
    }
    std::vector<absl::string_view>& pieces = values.emplace_back();
    while (length > 0) {
      if (!next_chunk()) {
        return absl::InternalError(absl::StrCat("lookup reply: value ", values.size() - 1,
                                                " is cut short by ", length, " bytes"));
      }
      const size_t take = std::min<uint64_t>(length, chunks_[chunk].size() - at);
      pieces.push_back(chunks_[chunk].substr(at, take));
      at += take;
      length -= take;
    }
  }
  return values;
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
