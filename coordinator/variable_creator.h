// Creates variables on the ps tasks: applies the partitioner, places the shards round-robin by one
// counter over all shards and unsharded variables (in creation order, as TF does), creates them on
// their ps tasks in parallel, and hands back the ShardedVariable handle. Dynamic tables the same
// way: their K shards split the key space, placed by the same counter (DynamicTable handle).
#ifndef PSTRAIN_COORDINATOR_VARIABLE_CREATOR_H_
#define PSTRAIN_COORDINATOR_VARIABLE_CREATOR_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/tensor.h"
#include "partitioners/partitioner.h"
#include "partitioners/sharding.h"
#include "proto/ps_service.pb.h"
#include "ps/ps_client.h"
#include "ps/dynamic_table.h"
#include "ps/sharded_variable.h"

namespace pstrain {

struct VariableSpec {
  // Unique name; shards are "name/part_i" (or "name" when unsharded). Required.
  std::string name;
  // Full shape; dims[0] is split. Required (empty = a scalar).
  Shape shape;
  // float32 or int64. Default float32.
  DType dtype = DType::kFloat32;
  // How to split it. Default: none (one shard).
  PartitionerOptions partitioner;
  // How to fill it. Default: zeros.
  InitializerDef initializer;
  // Server-side optimizer for gradients; none means the variable takes no gradients.
  std::optional<OptimizerDef> optimizer;
};

// A dynamic table: rows keyed by int64, made when a key first appears (ps/dynamic_shard.h).
struct TableSpec {
  // Unique among variables and tables; shards are "name/part_i". Required.
  std::string name;
  // Floats per row. Required (at least 1).
  int64_t dim = 0;
  // Shards. Default 0: one per ps task.
  int num_shards = 0;
  // Each key's initial row, drawn from (initializer.seed, key). Default: zeros.
  InitializerDef initializer;
  // Server-side optimizer for gradients; none means the table takes no gradients.
  std::optional<OptimizerDef> optimizer;
  // Admission, eviction and the default row (DynamicTableDef; its dim is taken from above).
  // Default: every key stored on first sight, none evicted, default rows of zeros.
  DynamicTableDef options;
};

// A shard as created: its definition and its ps task.
struct PlacedShard {
  int ps = 0;
  VariableShardDef def;
};

// Which ps tasks take which kind of variable. The round-robin counter is one for both kinds; a
// shard's ps is the range's first task plus the counter modulo the range's size.
struct PlacementOptions {
  // Fixed variables go on ps tasks [variables_ps_begin, variables_ps_end), dynamic tables on
  // [tables_ps_begin, tables_ps_end). An end of -1 means the last ps task. Default: every kind
  // on every ps task. The hybrid strategy puts fixed variables on the worker's own replica and
  // the tables on the shared ps tasks.
  int variables_ps_begin = 0;
  int variables_ps_end = -1;
  int tables_ps_begin = 0;
  int tables_ps_end = -1;
  // Every dynamic table gets a disk tier (DynamicTableDef.disk_tier: rows past the ps's memory
  // budget move to its disk instead of failing the job). Default false: a table's own option.
  bool tables_disk_tier = false;
  // Every dynamic table stores its rows / its optimizer slots in this format (ps/row_format.h).
  // Default unset: each table's own DynamicTableDef.row_format / slot_format. Either way, a table
  // of width 10 or less asked for int8 rows gets bfloat16 (StoredFormatFor).
  std::optional<RowFormat> tables_row_format;
  std::optional<RowFormat> tables_slot_format;
};

// Thread-safe.
class VariableCreator {
 public:
  // `ps` is indexed by ps task; not owned, must outlive the creator and its handles.
  // `staleness_scaling`: what a fixed variable's optimizer takes when its spec leaves
  // OptimizerDef.staleness_scaling unset (tables keep theirs: it applies to fixed shards only).
  explicit VariableCreator(
      std::vector<PsClient*> ps, PlacementOptions placement = {},
      OptimizerDef::StalenessScaling staleness_scaling = OptimizerDef::STALENESS_NONE)
      : ps_(std::move(ps)), placement_(placement), staleness_scaling_(staleness_scaling) {}

  // Creates `spec` on the ps tasks. Creating the same spec again returns the same handle (and
  // placement); a different spec under a used name is kAlreadyExists. Errors: kInvalidArgument
  // (bad spec or partitioner, naming it), the ps errors (e.g. kUnavailable naming the ps).
  absl::StatusOr<ShardedVariable> Create(const VariableSpec& spec);

  // Creates dynamic table `spec` on the ps tasks. The same spec again returns the same handle; a
  // different spec under a used name is kAlreadyExists. Errors: kInvalidArgument (bad spec, naming
  // it), the ps errors.
  absl::StatusOr<DynamicTable> CreateTable(const TableSpec& spec);

  // Handles of every variable created so far, by name.
  std::map<std::string, ShardedVariable> variables() const;
  // Handles of every dynamic table created so far, by name.
  std::map<std::string, DynamicTable> tables() const;
  // Every shard created so far (of variables and tables), in creation order.
  std::vector<PlacedShard> placed_shards() const;

  // Creates again, with their initial values, the shards placed on ps task `ps` that it no longer
  // holds (after it restarted); those it still holds are left alone. Returns how many it created.
  // Errors: the ps errors.
  absl::StatusOr<int> RecreateOnPs(int ps);

 private:
  // The ps range [begin, end) of fixed variables (tables: false), or an error naming `what`.
  absl::StatusOr<std::pair<int, int>> Range(bool tables, absl::string_view what) const;

  const std::vector<PsClient*> ps_;
  const PlacementOptions placement_;
  const OptimizerDef::StalenessScaling staleness_scaling_;
  mutable absl::Mutex mu_;
  // Below: guarded by mu_.
  ShardPlacer placer_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::pair<std::string, ShardedVariable>> created_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::pair<std::string, DynamicTable>> tables_ ABSL_GUARDED_BY(mu_);
  std::vector<PlacedShard> placed_ ABSL_GUARDED_BY(mu_);
};

// The wire dtype of a variable dtype (kInvalid for types variables can't hold).
DataType ToDataType(DType dtype);

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_VARIABLE_CREATOR_H_
