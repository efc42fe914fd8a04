// Keys of dynamic tables: how a string becomes an int64 key, and which shard of a table holds a key.
//
//   MixKey(k)        SplitMix64's finalizer of k + 0x9e3779b97f4a7c15 (a bijection of 64 bits:
//                    every bit of the key moves about half of the output bits)
//   RoutingHash(k)   the top 32 bits of MixKey(k)
//   ShardOfKey(k, n) floor(RoutingHash(k) * n / 2^32): shard i of n holds exactly the keys whose
//                    routing hash lies in [ceil(i * 2^32 / n), ceil((i + 1) * 2^32 / n))
//   KeyOfString(s)   MixKey(FNV-1a 64 of the bytes of s), as a signed int64
//
// Not `key % n`: structured ids (multiples of 1000, ids with the type in the low bits) would pile
// onto a few shards. Routing by a range of the hash means a checkpoint sorted by routing hash gives
// any shard of any later partitioning its keys as one contiguous range.
#ifndef PSTRAIN_PARTITIONERS_KEY_ROUTING_H_
#define PSTRAIN_PARTITIONERS_KEY_ROUTING_H_

#include <cstdint>
#include <utility>

#include "absl/strings/string_view.h"
#include "common/splitmix64.h"

namespace pstrain {

inline uint64_t MixKey(int64_t key) { return SplitMix64(static_cast<uint64_t>(key)); }

inline uint32_t RoutingHash(int64_t key) { return static_cast<uint32_t>(MixKey(key) >> 32); }

// A key in routing order, the order of checkpoints' dynamic records and of the ps's disk tiers:
// by routing hash, then by the key as unsigned.
struct RoutedKey {
  uint32_t route;
  uint64_t key;
  bool operator<(const RoutedKey& o) const {
    return route != o.route ? route < o.route : key < o.key;
  }
};
inline RoutedKey Routed(int64_t key) { return {RoutingHash(key), static_cast<uint64_t>(key)}; }

// num_shards >= 1.
inline int ShardOfKey(int64_t key, int num_shards) {
  return static_cast<int>((uint64_t{RoutingHash(key)} * static_cast<uint64_t>(num_shards)) >> 32);
}

// The routing hashes shard `shard` of `num_shards` holds: [first, second), as 64-bit numbers
// (second may be 2^32).
inline std::pair<uint64_t, uint64_t> RoutingHashRange(int shard, int num_shards) {
  const uint64_t n = static_cast<uint64_t>(num_shards);
  auto ceil_div = [n](uint64_t a) { return (a + n - 1) / n; };
  return {ceil_div(static_cast<uint64_t>(shard) << 32),
          ceil_div(static_cast<uint64_t>(shard + 1) << 32)};
}

inline int64_t KeyOfString(absl::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return static_cast<int64_t>(MixKey(static_cast<int64_t>(h)));
}

}  // namespace pstrain

#endif  // PSTRAIN_PARTITIONERS_KEY_ROUTING_H_
