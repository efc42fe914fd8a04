#include "worker/ps_connection.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "ps/grpc_ps_client.h"

namespace pstrain {

std::unique_ptr<PsConnection> PsConnection::ToAddresses(const std::vector<std::string>& addresses) {
  std::vector<std::unique_ptr<PsClient>> clients;
  for (size_t i = 0; i < addresses.size(); ++i) {
    clients.push_back(NewGrpcPsClient(static_cast<int>(i), addresses[i]));
  }
  return std::make_unique<PsConnection>(std::move(clients));
}

PsConnection::PsConnection(std::vector<std::unique_ptr<PsClient>> clients)
    : clients_(std::move(clients)) {}

std::vector<PsClient*> PsConnection::clients() const {
  std::vector<PsClient*> out;
  for (const auto& c : clients_) out.push_back(c.get());
  return out;
}

absl::StatusOr<ShardedVariable> PsConnection::Variable(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = variables_.find(name);
  if (it != variables_.end()) return it->second;
  absl::Status refreshed = RefreshLocked();
  if (!refreshed.ok()) return refreshed;
  it = variables_.find(name);
  if (it == variables_.end()) {
    return absl::NotFoundError(absl::StrCat("variable \"", name,
                                            "\" is not (completely) on the ps tasks; was it created?"));
  }
  return it->second;
}

absl::StatusOr<DynamicTable> PsConnection::Table(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = tables_.find(name);
  if (it != tables_.end()) return it->second;
  absl::Status refreshed = RefreshLocked();
  if (!refreshed.ok()) return refreshed;
  it = tables_.find(name);
  if (it == tables_.end()) {
    return absl::NotFoundError(absl::StrCat("dynamic table \"", name,
                                            "\" is not (completely) on the ps tasks; was it created?"));
  }
  return it->second;
}

void PsConnection::Invalidate() {
  absl::MutexLock lock(&mu_);
  variables_.clear();
  tables_.clear();
}

absl::Status PsConnection::RefreshLocked() {
  const int n = num_ps();
  std::vector<ListShardsRequest> requests(n);
  std::vector<ListShardsResponse> responses(n);
  absl::Status listed = CallAll(n, [&](int i, PsClient::Done done) {
    clients_[i]->ListShardsAsync(&requests[i], &responses[i], std::move(done));
  });
  if (!listed.ok()) return listed;
  struct Found {
    VariableShardDef def;  // of any shard: shape and dtype
    std::vector<ShardLocation> shards;
  };
  std::map<std::string, Found> found;
  // Dynamic tables: each shard's name and ps task, by shard index.
  struct FoundTable {
    int64_t dim = 0;
    int num_shards = 0;
    std::map<int, std::pair<std::string, int>> shards;
  };
  std::map<std::string, FoundTable> found_tables;
  for (int i = 0; i < n; ++i) {
    for (const VariableShardDef& def : responses[i].shards()) {
      if (def.has_dynamic()) {
        FoundTable& t = found_tables[def.variable()];
        t.dim = def.dynamic().dim();
        t.num_shards = def.num_shards();
        t.shards[def.shard_index()] = {def.name(), i};
        continue;
      }
      Found& f = found[def.variable()];
      f.def = def;
      f.shards.push_back(ShardLocation{def.name(), def.row_offset(), def.num_rows(), i});
    }
  }
  std::vector<PsClient*> ps = clients();
  for (auto& [name, f] : found) {
    std::sort(f.shards.begin(), f.shards.end(),
              [](const ShardLocation& a, const ShardLocation& b) {
                return a.row_offset < b.row_offset;
              });
    std::vector<int64_t> shape(f.def.full_shape().begin(), f.def.full_shape().end());
    absl::StatusOr<ShardedVariable> v = ShardedVariable::Create(
        name, shape, f.def.dtype(), f.shards, ps,
        f.def.has_optimizer() ? &f.def.optimizer() : nullptr);
    if (v.ok()) variables_.insert_or_assign(name, *std::move(v));  // incomplete: left out
  }
  for (auto& [name, t] : found_tables) {
    if (static_cast<int>(t.shards.size()) != t.num_shards) continue;  // incomplete: left out
    std::vector<std::string> names;
    std::vector<int> tasks;
    for (const auto& [index, shard] : t.shards) {
      names.push_back(shard.first);
      tasks.push_back(shard.second);
    }
    absl::StatusOr<DynamicTable> table = DynamicTable::Create(name, t.dim, names, tasks, ps);
    if (table.ok()) tables_.insert_or_assign(name, *std::move(table));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
