// Splitting a variable's rows into shards, finding the shard of a row id, and placing shards on ps
// tasks, as TensorFlow's ParameterServerStrategy does:
//
//   - N rows over K shards: the first N % K shards get N / K + 1 rows, the rest N / K
//     (13 over 5 -> 3,3,3,2,2). Shard i starts at row i * (N / K) + min(i, N % K).
//   - A row id goes to its shard by embedding_lookup's "div" rule, which for this split is the
//     shard that holds the row; its row inside the shard is id - offset(shard).
//   - Shards are named "name/part_i" (an unsharded variable keeps "name") and placed round-robin
//     over the ps tasks by one counter that every shard and every unsharded variable advances, in
//     creation order.
#ifndef PSTRAIN_PARTITIONERS_SHARDING_H_
#define PSTRAIN_PARTITIONERS_SHARDING_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/tensor.h"
#include "partitioners/partitioner.h"

namespace pstrain {

// The row count of each of `num_shards` shards of `num_rows` rows: the first num_rows % num_shards
// shards get one extra row. SplitRows(13, 5) = {3, 3, 3, 2, 2}. Shards may be empty when
// num_shards > num_rows. Returns {} if num_shards < 1 or num_rows < 0.
std::vector<int64_t> SplitRows(int64_t num_rows, int num_shards);

// A shard index and a row inside that shard.
struct ShardRow {
  int shard = 0;
  int64_t row = 0;

  bool operator==(const ShardRow& o) const { return shard == o.shard && row == o.row; }
};

// The split of `num_rows` rows into `num_shards` shards (as SplitRows), with O(1) lookups.
// Immutable, cheap to copy, safe to share between threads.
class ShardLayout {
 public:
  // Errors: kInvalidArgument if num_rows < 0, num_shards < 1, or num_shards > max(num_rows, 1)
  // (TF never makes more shards than rows; a 0-row variable is 1 empty shard).
  static absl::StatusOr<ShardLayout> Create(int64_t num_rows, int num_shards);

  int64_t num_rows() const { return num_rows_; }
  int num_shards() const { return num_shards_; }

  // Rows in `shard` (0 <= shard < num_shards()).
  int64_t rows(int shard) const { return ids_per_shard_ + (shard < extras_ ? 1 : 0); }
  // The global row where `shard` starts (0 <= shard <= num_shards(); num_shards() gives num_rows()).
  int64_t row_offset(int shard) const {
    return static_cast<int64_t>(shard) * ids_per_shard_ + std::min<int64_t>(shard, extras_);
  }
  // rows(i) for every shard: SplitRows(num_rows(), num_shards()).
  std::vector<int64_t> AllRows() const;

  // Whether `id` is a row of this variable: 0 <= id < num_rows().
  bool Contains(int64_t id) const { return id >= 0 && id < num_rows_; }

  // The shard holding global row `id` and the row inside it, by TF's "div" rule:
  //   ids_per_shard = N / K, extras = N % K;
  //   id <  extras * (ids_per_shard + 1): shard id / (ids_per_shard + 1)
  //   otherwise:                           shard extras + (id - extras * (ids_per_shard + 1)) / ids_per_shard
  // Requires Contains(id) (the caller checks); any other id gives an unspecified result, but no
  // undefined behaviour. O(1): one division, no search.
  ShardRow ShardOf(int64_t id) const {
    if (id < split_) {
      const int64_t big = ids_per_shard_ + 1;
      return {static_cast<int>(id / big), id % big};
    }
    const int64_t rest = id - split_;
    return {static_cast<int>(extras_ + rest / divisor_), rest % divisor_};
  }

 private:
  ShardLayout(int64_t num_rows, int num_shards);

  int64_t num_rows_;
  int num_shards_;
  int64_t ids_per_shard_;  // N / K
  int64_t extras_;         // N % K: shards with one extra row
  int64_t split_;          // extras * (ids_per_shard + 1): the first id in a small shard
  int64_t divisor_;        // max(ids_per_shard, 1), so an out-of-range id never divides by 0
};

// Where one shard of a variable lives.
struct ShardPlacement {
  std::string name;      // "name/part_i" when the variable has several shards, else "name"
  int shard = 0;         // index in [0, num_shards)
  int64_t row_offset = 0;  // first global row of this shard
  int64_t rows = 0;      // rows in this shard (1 for a rank-0 variable: its single element)
  Shape full_shape;      // the whole variable's shape
  Shape shape;           // this shard's shape: {rows, full_shape[1:]...} ({} for rank 0)
  int64_t bytes = 0;     // NumElements(shape) * bytes per element (an estimate for kString),
                         // saturating at the int64 maximum
  int ps = 0;            // ps task index
};

// Places variables' shards on ps tasks, round-robin, in the order Place is called. One placer per
// strategy (or per plan); its counter covers every shard and every unsharded variable, so a
// 4-shard variable on 2 ps goes to ps 0,1,0,1 and the next variable starts on ps 0.
// Thread-safe: concurrent Place calls are serialized (their order decides the placement).
class ShardPlacer {
 public:
  ShardPlacer() = default;
  ShardPlacer(const ShardPlacer&) = delete;
  ShardPlacer& operator=(const ShardPlacer&) = delete;

  // Splits the variable `name` of `shape` and `dtype` into `num_shards` shards (SplitRows) and
  // places them on ps tasks [0, num_ps). A rank-0 variable must have 1 shard. `bytes_per_string`
  // sizes DType::kString elements in ShardPlacement::bytes.
  // Errors (kInvalidArgument; the counter does not move): empty name, invalid shape or dtype,
  // num_ps < 1, num_shards < 1, num_shards > max(shape[0], 1), rank 0 with num_shards != 1,
  // bytes_per_string < 1 for DType::kString.
  absl::StatusOr<std::vector<ShardPlacement>> Place(const std::string& name, const Shape& shape,
                                                    DType dtype, int num_shards, int num_ps,
                                                    int64_t bytes_per_string = kDefaultBytesPerString);

  // Places the `num_shards` shards of a table without rows (a dynamic table, whose shards split
  // its key space): the ps task of each, by the same counter. Errors (kInvalidArgument; the
  // counter does not move): num_shards < 1, num_ps < 1.
  absl::StatusOr<std::vector<int>> PlaceKeyed(int num_shards, int num_ps);

  // Shards and unsharded variables placed so far (the round-robin counter).
  int64_t num_placed() const;

 private:
  mutable absl::Mutex mu_;
  // Below: guarded by mu_
  int64_t next_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_PARTITIONERS_SHARDING_H_
