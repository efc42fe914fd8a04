// A ps task's part of a checkpoint: its shards written into one RocksDB database, and rows read
// back from such databases into shards of any (other) partitioning.
//
// Keys are <variable> \0 <tensor> \0 <global first row, 8 bytes big-endian>, where <tensor> is
// "values" or an optimizer slot's name; each value holds whole rows, about `chunk_bytes` of them.
// Keys sort by variable, tensor and row, so any row range of a variable is one seek and a forward
// scan, whichever shard (and ps) wrote it. The database is built as one SST file and ingested, so
// the data is written once, sequentially, with RocksDB's block checksums (XXH3) around it.
//
// A dynamic table's keys are written as records sorted by (routing hash, key as unsigned):
//   <variable> \0 "records" \0 <routing hash, 4 bytes BE> <key, 8 bytes BE>   (of a chunk's first)
// each value a chunk of records of 24 + 4 * floats bytes: key (int64), last step (int64), count
// (uint32), 4 zero bytes, then the row and each slot's row (float32), all little-endian. A delta
// (incremental save) also writes the keys erased since its base, as int64s, under "erased".
// Since a table's shard holds a contiguous range of routing hashes (partitioners/key_routing.h),
// any shard of any later partitioning finds its keys with one seek per database.
#ifndef PSTRAIN_PS_SHARD_CHECKPOINT_H_
#define PSTRAIN_PS_SHARD_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/ps_service.pb.h"
#include "ps/dynamic_shard.h"
#include "ps/variable_shard.h"

namespace pstrain {

// Bytes of rows per RocksDB value when the request leaves it 0.
inline constexpr int64_t kDefaultCheckpointChunkBytes = int64_t{4} << 20;

// The key of the chunk of `tensor` of `variable` that starts at global row `first_row`.
std::string CheckpointKey(absl::string_view variable, absl::string_view tensor, int64_t first_row);

// Writes `shards` (values, then each slot) and `dynamic` (their records: all of them, or with
// `delta_since` > 0 those changed after that generation plus the keys erased after it) into a new
// RocksDB database at `db_path`, synced to disk before it returns. The caller keeps the shards
// still while this runs.
// Errors: kInvalidArgument (empty path, chunk_bytes < 0), kAlreadyExists (db_path exists),
// kInternal (I/O, naming the path).
absl::StatusOr<SaveShardsResponse> WriteShardCheckpoint(
    const std::string& db_path, const std::vector<std::shared_ptr<VariableShard>>& shards,
    const std::vector<std::shared_ptr<DynamicShard>>& dynamic, int64_t chunk_bytes,
    uint32_t delta_since = 0);

// Fills a fresh shard (created with the live shard's definition, uninitialized) from `op.sources`:
// values, every slot, and the gradient count (the largest of the sources'). Opens each database
// read-only once per reader. Not thread-safe; one reader per restore.
class ShardCheckpointReader {
 public:
  ShardCheckpointReader();
  ~ShardCheckpointReader();

  // Errors: kInvalidArgument (sources that don't cover the shard's rows exactly once),
  // kDataLoss (a database that can't be opened, a missing, short or corrupt chunk; naming the
  // database, tensor and rows). Returns the bytes read.
  absl::StatusOr<int64_t> ReadInto(const RestoreShardOp& op, VariableShard* shard);
  // Fills a fresh dynamic shard (created with the live definition) with the keys that route to it
  // from each source in order (a full checkpoint, then its deltas: erasures, then records), and
  // the gradient count (the largest). Errors: kDataLoss (as above, or records of another size than
  // the shard's), kResourceExhausted (the budget). Returns the bytes read.
  absl::StatusOr<int64_t> ReadDynamicInto(const RestoreShardOp& op, DynamicShard* shard);

 private:
  struct Db;
  absl::StatusOr<Db*> Open(const std::string& path);
  std::vector<std::unique_ptr<Db>> dbs_;
};

// Reads one variable's entries from a checkpoint database, for readers outside a ps (a
// prediction server that follows training, serving/model_follower.h): nothing is restored into a
// shard. The database is opened read-only and every block's checksum verified.
struct CheckpointEntries {
  // A fixed variable: each chunk of its rows, `bytes` of whole rows from global row `first_row`.
  std::function<absl::Status(int64_t first_row, absl::string_view bytes)> on_rows;
  // A dynamic table: each key erased (deltas), then each record's key and its `floats` floats
  // (the row, then each optimizer slot's row).
  std::function<absl::Status(int64_t key)> on_erased;
  std::function<absl::Status(int64_t key, const float* floats)> on_record;
};
// `record_floats`: a dynamic table's floats per record (dim * (1 + slots)); 0 for a fixed
// variable. Errors: kDataLoss naming the database and variable (can't be opened, a corrupt block,
// a chunk not whole entries), and the callbacks' own.
absl::Status ReadCheckpointEntries(const std::string& db_path, absl::string_view variable,
                                   int64_t record_floats, const CheckpointEntries& entries);

}  // namespace pstrain

#endif  // PSTRAIN_PS_SHARD_CHECKPOINT_H_
