#include "ps/dense_cache.h"

#include <algorithm>
#include <cstring>

namespace pstrain {

bool DenseCache::Read(const ShardedVariable& v, char* out) const {
  auto it = copies_.find(v.name());
  if (it == copies_.end() || !it->second.complete) return false;
  const std::string& rows = it->second.rows;
  if (static_cast<int64_t>(rows.size()) != v.num_rows() * v.row_bytes()) return false;
  std::memcpy(out, rows.data(), rows.size());
  return true;
}

bool DenseCache::Holds(const ShardedVariable& v) const {
  auto it = copies_.find(v.name());
  return it != copies_.end() && it->second.complete;
}

int64_t DenseCache::Version(const ShardedVariable& v, int shard) const {
  auto it = copies_.find(v.name());
  if (it == copies_.end() || !it->second.complete || shard < 0 ||
      shard >= static_cast<int>(it->second.versions.size())) {
    return 0;
  }
  return it->second.versions[shard];
}

void DenseCache::Begin(const ShardedVariable& v) {
  Copy& c = copies_[v.name()];
  c.rows.resize(static_cast<size_t>(v.num_rows() * v.row_bytes()));
  c.versions.assign(v.shards().size(), 0);
  c.arrived.assign(v.shards().size(), false);
  c.complete = false;
}

void DenseCache::Put(const ShardedVariable& v, int shard, absl::string_view rows,
                     int64_t version) {
  auto it = copies_.find(v.name());
  if (it == copies_.end() || shard < 0 || shard >= static_cast<int>(v.shards().size())) return;
  Copy& c = it->second;
  const ShardLocation& loc = v.shards()[shard];
  const size_t at = static_cast<size_t>(loc.row_offset * v.row_bytes());
  const size_t bytes = static_cast<size_t>(loc.num_rows * v.row_bytes());
  if (rows.size() != bytes || at + bytes > c.rows.size() || version <= 0) return;
  std::memcpy(c.rows.data() + at, rows.data(), bytes);
  c.versions[shard] = version;
  c.arrived[shard] = true;
}

void DenseCache::Commit(const ShardedVariable& v) {
  auto it = copies_.find(v.name());
  if (it == copies_.end()) return;
  Copy& c = it->second;
  if (!std::all_of(c.arrived.begin(), c.arrived.end(), [](bool a) { return a; })) {
    copies_.erase(it);
    return;
  }
  c.complete = true;
}

void DenseCache::Drop(const ShardedVariable& v) { copies_.erase(v.name()); }

}  // namespace pstrain
