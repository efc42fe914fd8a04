// The client-side handle of a dynamic table: rows keyed by int64 over shards on ps tasks (the
// server side is ps/dynamic_shard.h). Keys go to shards by ShardOfKey (partitioners/key_routing.h);
// string keys become int64 keys by KeyOfString there.
//
// Operations dedupe the keys, send one request per ps in parallel and put the rows back in the
// caller's order; LookupBatch / UpdateBatch (ps/sharded_variable.h) add a table's keys to a step's
// one request per ps with every other variable's.
#ifndef PSTRAIN_PS_DYNAMIC_TABLE_H_
#define PSTRAIN_PS_DYNAMIC_TABLE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/ps_service.pb.h"
#include "ps/ps_client.h"

namespace pstrain {

// Training lookups store keys the table lacks (admission permitting) and count sightings;
// evaluation lookups never change the table (a key it lacks reads the default row).
enum class LookupMode { kTrain, kEval };

// Immutable after creation; safe to use from many threads.
class DynamicTable {
 public:
  // `shards` are the table's shard names by shard index, `ps_of_shard` their ps tasks; `ps` is
  // indexed by ps task (not owned; must outlive the handle).
  // Errors: kInvalidArgument naming the table (no shards, dim < 1, a shard on an unknown ps).
  static absl::StatusOr<DynamicTable> Create(std::string name, int64_t dim,
                                             std::vector<std::string> shards,
                                             std::vector<int> ps_of_shard,
                                             std::vector<PsClient*> ps);

  const std::string& name() const { return name_; }
  int64_t dim() const { return dim_; }
  int64_t row_bytes() const { return dim_ * 4; }
  int num_shards() const { return static_cast<int>(shards_.size()); }
  const std::string& shard_name(int shard) const { return shards_[shard]; }
  int ps_task(int shard) const { return ps_of_shard_[shard]; }
  PsClient* ps_of(int shard) const { return ps_[ps_of_shard_[shard]]; }
  int ShardOf(int64_t key) const;

  // Rows for `keys`, keys.size() * dim() floats into `out`. `step`: the global step (recency and
  // TTL of dynamic tables; 0: the shards' latest). Each distinct key is sent once, so a key that
  // occurs several times in one lookup counts one sighting (admission counts sightings per lookup).
  // Errors: the ps errors (kResourceExhausted: a training lookup past a ps's memory budget).
  absl::Status Lookup(absl::Span<const int64_t> keys, float* out, LookupMode mode,
                      int64_t step = 0) const;
  // Gradients (keys.size() * dim() floats) through the table's optimizer; repeated keys are
  // summed; rows of keys the table lacks are dropped.
  absl::Status ApplyGradients(absl::Span<const int64_t> keys, const float* grads,
                              int64_t step = 0) const;
  // Sets the rows (storing keys the table lacks, without admission).
  absl::Status Assign(absl::Span<const int64_t> keys, const float* values, int64_t step = 0) const;
  absl::Status Erase(absl::Span<const int64_t> keys) const;
  // Keys held, and every shard's counters (in shard order).
  absl::StatusOr<int64_t> Size() const;
  absl::StatusOr<std::vector<DynamicShardStats>> Stats() const;
  // Every key of every shard, a chunk at a time (see ExportRequest): fn(shard, chunk) for each
  // chunk, in shard order. Errors: the ps errors, and fn's (which stop the export).
  absl::Status Export(bool with_slots, int64_t max_keys_per_chunk,
                      const std::function<absl::Status(int shard, const ExportResponse& chunk)>&
                          fn) const;

 private:
  DynamicTable() = default;

  std::string name_;
  int64_t dim_ = 0;
  std::vector<std::string> shards_;
  std::vector<int> ps_of_shard_;
  std::vector<PsClient*> ps_;
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_DYNAMIC_TABLE_H_
