// Saves and restores checkpoints of every variable (values, optimizer slots, definitions) plus the
// step and the trainer's own state, through the ps tasks (see coordinator/checkpoint_files.h for
// the layout and ps/shard_checkpoint.h for each ps's database).
//
// Consistency: Save() must run while no updates happen: the trainer calls it inside
// ClusterCoordinator::RunExclusive(), which stops dispatch and lets running closures finish. Each
// ps also holds its updates while it writes, so values and slots of a shard always agree.
//
// Atomicity: the manifest is written last (atomically); a save that dies at any point leaves the
// previous checkpoint as the latest complete one. Older checkpoints are deleted only after a newer
// one is complete, and only whole chains of incremental checkpoints: a checkpoint is kept while it
// is one of the newest `keep`, the one marked best (MarkBest), or the base of one kept.
//
// Restore works into any partitioning: each current shard is filled from the saved shards that
// overlap its rows, whatever their number or ps tasks. It is two-phase (stage on every ps, then
// commit on every ps), so a bad checkpoint changes nothing.
//
// The ps tasks read and write the checkpoint directory themselves: with separate processes on
// separate machines it must be on a shared filesystem, at the same path everywhere.
#ifndef PSTRAIN_COORDINATOR_CHECKPOINT_MANAGER_H_
#define PSTRAIN_COORDINATOR_CHECKPOINT_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/checkpoint_files.h"
#include "coordinator/variable_creator.h"
#include "proto/checkpoint.pb.h"
#include "ps/ps_client.h"

namespace pstrain {

struct CheckpointOptions {
  // The directory checkpoints go into (created if missing). Required.
  std::string dir;
  // Complete checkpoints kept; older ones are deleted after a newer one is complete. Default 3.
  int keep = 3;
  // Bytes of rows per RocksDB value. Default 4 MiB.
  int64_t chunk_bytes = int64_t{4} << 20;
  // Incremental checkpoints: each save after a full one holds, of every dynamic table, only the
  // keys changed or erased since the previous save (fixed variables are saved whole every time);
  // every `full_every`-th save is full again, starting a new chain. A restore reads a chain's full
  // checkpoint and its deltas in order. Default false: every save is full.
  bool incremental = false;
  // Checkpoints per chain (the full one and its deltas). Default 10.
  int full_every = 10;
  // Tests only: called at named points of Save() ("start", "after_ps_write", "before_manifest",
  // "before_manifest_rename", "after_manifest"); an error stops the save there, as a crash would.
  std::function<absl::Status(absl::string_view point)> fault_hook;
};

struct RestoreOptions {
  // Skip current variables the checkpoint doesn't have (they keep their values) instead of
  // failing. Default false.
  bool skip_missing = false;
  // Restore only the shards on these ps tasks. Default (empty): every ps task. The hybrid
  // strategy's workers other than the chief restore only their own replica this way.
  std::vector<int> only_ps;
};

// What a restore brought back.
struct RestoredCheckpoint {
  std::string path;
  int64_t step = 0;
  std::map<std::string, std::string> state;
  int64_t bytes = 0;            // values + slots read
  std::vector<std::string> skipped;  // current variables the checkpoint lacked (skip_missing)
};

// Thread-compatible: one save or restore at a time.
class CheckpointManager {
 public:
  // `ps` (by task index) and `variables` are not owned and must outlive the manager.
  // Errors: kInvalidArgument (empty dir, keep < 1, chunk_bytes < 1), kInternal (can't create dir).
  static absl::StatusOr<std::unique_ptr<CheckpointManager>> Create(
      const CheckpointOptions& options, std::vector<PsClient*> ps, VariableCreator* variables);

  // Saves every variable at `step` with `state`; returns the checkpoint's path. Saving a step that
  // is already saved returns the existing one. Errors: the ps errors (naming the ps), kInternal
  // (I/O), kFailedPrecondition (a ps lacks shards it should hold: it restarted and was not
  // recovered), and the fault hook's.
  absl::StatusOr<std::string> Save(int64_t step, const std::map<std::string, std::string>& state);

  // Restores the checkpoint at `path` into every variable and dynamic table created so far (a delta
  // with its chain; each table's keys re-routed to however many shards it has now).
  // Errors: kNotFound (no checkpoint there; or a variable missing from it, naming them all, unless
  // skip_missing), kInvalidArgument (a variable saved with another shape, dtype or optimizer, naming
  // it), kDataLoss (corrupt or truncated files, a missing base of a delta, naming them). Nothing
  // changes on error.
  absl::StatusOr<RestoredCheckpoint> Restore(const std::string& path,
                                             const RestoreOptions& options = {});
  // Restores the latest complete checkpoint; nullopt if there is none yet.
  absl::StatusOr<std::optional<RestoredCheckpoint>> RestoreLatest(
      const RestoreOptions& options = {});
  // Restores only the shards on ps task `ps` from the latest checkpoint (that ps restarted and
  // its shards were re-created); nullopt if there is no checkpoint yet.
  absl::StatusOr<std::optional<RestoredCheckpoint>> RestorePs(int ps);

  // The best validation's checkpoint (<dir>/BEST; coordinator/checkpoint_files.h): marked, read,
  // cleared. A marked checkpoint and the chain it stands on are never deleted by the keep policy.
  // Errors: as WriteBestMarker, ReadBestMarker, RemoveBestMarker.
  absl::Status MarkBest(const std::string& checkpoint_path, const std::string& note);
  absl::StatusOr<std::optional<BestMarker>> Best() const;
  absl::Status ClearBest();

  const CheckpointOptions& options() const { return options_; }

 private:
  CheckpointManager(const CheckpointOptions& options, std::vector<PsClient*> ps,
                    VariableCreator* variables)
      : options_(options), ps_(std::move(ps)), variables_(variables) {}

  absl::Status Fault(absl::string_view point) const;
  // RestoreShards from the latest complete checkpoint; nullopt if there is none.
  absl::StatusOr<std::optional<RestoredCheckpoint>> RestoreLatestShards(
      const RestoreOptions& options);
  // Restores shards of every ps, or of options.only_ps.
  absl::StatusOr<RestoredCheckpoint> RestoreShards(const std::string& path,
                                                   const RestoreOptions& options);
  // Deletes checkpoints beyond `keep` (whole chains only) and incomplete saves older than the
  // newest complete one.
  void CollectGarbage();

  const CheckpointOptions options_;
  const std::vector<PsClient*> ps_;
  VariableCreator* const variables_;
  // The chain the next incremental save extends: its last checkpoint, and the generation each ps
  // covered in it. Invalid at first and after any restore (the next save is then full).
  struct Chain {
    bool valid = false;
    std::string last;                   // the last checkpoint's directory name
    std::vector<uint32_t> generations;  // per ps
    int length = 0;                     // checkpoints in the chain
  };
  Chain chain_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_CHECKPOINT_MANAGER_H_
