#include "ps/dynamic_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "partitioners/key_routing.h"
#include "ps/sharded_variable.h"

namespace pstrain {

absl::StatusOr<DynamicTable> DynamicTable::Create(std::string name, int64_t dim,
                                                  std::vector<std::string> shards,
                                                  std::vector<int> ps_of_shard,
                                                  std::vector<PsClient*> ps) {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("dynamic table \"", name, "\": ", why));
  };
  if (dim < 1) return invalid(absl::StrCat("dim ", dim, " < 1"));
  if (shards.empty()) return invalid("no shards");
  if (shards.size() != ps_of_shard.size()) return invalid("a ps task per shard is needed");
  for (size_t s = 0; s < shards.size(); ++s) {
    const int task = ps_of_shard[s];
    if (task < 0 || task >= static_cast<int>(ps.size()) || ps[task] == nullptr) {
      return invalid(absl::StrCat("shard \"", shards[s], "\" is on ps ", task, " but only ",
                                  ps.size(), " ps task(s) are known"));
    }
  }
  DynamicTable t;
  t.name_ = std::move(name);
  t.dim_ = dim;
  t.shards_ = std::move(shards);
  t.ps_of_shard_ = std::move(ps_of_shard);
  t.ps_ = std::move(ps);
  return t;
}

int DynamicTable::ShardOf(int64_t key) const { return ShardOfKey(key, num_shards()); }

absl::Status DynamicTable::Lookup(absl::Span<const int64_t> keys, float* out, LookupMode mode,
                                  int64_t step) const {
  LookupBatch batch;
  batch.set_step(step);
  RETURN_IF_ERROR(batch.Add(*this, keys, reinterpret_cast<char*>(out), mode));
  return batch.Run();
}

absl::Status DynamicTable::ApplyGradients(absl::Span<const int64_t> keys, const float* grads,
                                          int64_t step) const {
  UpdateBatch batch;
  batch.set_step(step);
  RETURN_IF_ERROR(batch.AddSparse(*this, UpdateOp::APPLY_GRADIENT, keys,
                                  reinterpret_cast<const char*>(grads)));
  return batch.Run();
}

absl::Status DynamicTable::Assign(absl::Span<const int64_t> keys, const float* values,
                                  int64_t step) const {
  UpdateBatch batch;
  batch.set_step(step);
  RETURN_IF_ERROR(
      batch.AddSparse(*this, UpdateOp::ASSIGN, keys, reinterpret_cast<const char*>(values)));
  return batch.Run();
}

absl::Status DynamicTable::Erase(absl::Span<const int64_t> keys) const {
  UpdateBatch batch;
  RETURN_IF_ERROR(batch.AddSparse(*this, UpdateOp::ERASE, keys, nullptr));
  return batch.Run();
}

absl::StatusOr<std::vector<DynamicShardStats>> DynamicTable::Stats() const {
  // One ListShards per ps task that holds a shard.
  std::vector<int> tasks;
  for (int task : ps_of_shard_) {
    if (std::find(tasks.begin(), tasks.end(), task) == tasks.end()) tasks.push_back(task);
  }
  std::vector<ListShardsRequest> requests(tasks.size());
  std::vector<ListShardsResponse> responses(tasks.size());
  RETURN_IF_ERROR(CallAll(static_cast<int>(tasks.size()), [&](int i, PsClient::Done done) {
    ps_[tasks[i]]->ListShardsAsync(&requests[i], &responses[i], std::move(done));
  }));
  std::vector<DynamicShardStats> stats(shards_.size());
  std::vector<bool> found(shards_.size(), false);
  for (size_t i = 0; i < tasks.size(); ++i) {
    for (const DynamicShardStats& s : responses[i].dynamic_stats()) {
      for (size_t k = 0; k < shards_.size(); ++k) {
        if (ps_of_shard_[k] == tasks[i] && shards_[k] == s.shard()) {
          stats[k] = s;
          found[k] = true;
        }
      }
    }
  }
  for (size_t k = 0; k < shards_.size(); ++k) {
    if (!found[k]) {
      return absl::NotFoundError(absl::StrCat("dynamic table \"", name_, "\": ",
                                              ps_[ps_of_shard_[k]]->name(),
                                              " does not hold its shard \"", shards_[k], "\""));
    }
  }
  return stats;
}

absl::StatusOr<int64_t> DynamicTable::Size() const {
  ASSIGN_OR_RETURN(std::vector<DynamicShardStats> stats, Stats());
  int64_t keys = 0;
  for (const DynamicShardStats& s : stats) keys += s.keys();
  return keys;
}

absl::Status DynamicTable::Export(
    bool with_slots, int64_t max_keys_per_chunk,
    const std::function<absl::Status(int shard, const ExportResponse& chunk)>& fn) const {
  for (int s = 0; s < num_shards(); ++s) {
    ExportRequest request;
    request.set_shard(shards_[s]);
    request.set_max_keys(max_keys_per_chunk);
    request.set_with_slots(with_slots);
    for (;;) {
      ExportResponse response;
      RETURN_IF_ERROR(ps_of(s)->Export(request, &response));
      RETURN_IF_ERROR(fn(s, response));
      if (response.next_cursor().empty()) break;
      request.set_cursor(response.next_cursor());
    }
  }
  return absl::OkStatus();
}

}  // namespace pstrain
