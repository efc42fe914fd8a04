// Serving that follows training: an exported model (serving/model_store.h) brought up to date
// with the training job's later checkpoints, version by version, without a re-export.
//
// The transport is the job's own checkpoints (--checkpoint_incremental, docs/checkpoints.md): a
// delta holds each dynamic table's keys changed or erased since the save before it, and every
// fixed variable whole. Reading them rather than pulling from the ps tasks means no serving traffic
// reaches the training cluster, the serving side needs only to see the checkpoint directory (as the
// evaluator does), a version is always one instant of the model (a save holds the updates while
// it writes), and what a sync carries is checksummed and complete before it is read (the manifest
// is written last). The price: a sync is a save, so its interval is the job's --checkpoint_every.
//
// Each Poll() reads the complete checkpoints newer than the version held, in step order:
//   - a delta whose base is the checkpoint last applied: its changed and erased keys and its
//     fixed variables are applied on top of what was applied before;
//   - a full checkpoint: every table is replaced by its records whole (held in memory until the
//     next export is loaded), its fixed variables as in a delta;
//   - a delta of another base (one skipped: corrupt, or collected before it was read): skipped,
//     until the next full checkpoint.
// A checkpoint that fails to read (a corrupt manifest or database: DATA_LOSS) is logged and
// skipped; the version held goes on serving. A new version is a new store: the export's store,
// shared, beneath the changes so far, each table's as layers, one per checkpoint, shared with the
// version before (a sync costs its own delta; past 8 layers they are merged into one). A request
// holds one version, never a mix.
//
// Tables keep what the export filtered out (--min_count, --top_k) out only until a delta changes
// the key. The changes are held as float32 rows, whatever the export's table format.
#ifndef PSTRAIN_SERVING_MODEL_FOLLOWER_H_
#define PSTRAIN_SERVING_MODEL_FOLLOWER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "proto/checkpoint.pb.h"
#include "serving/model_store.h"

namespace pstrain {

struct ModelChanges;  // model_follower.cc

// What Poll() has done so far.
struct FollowStats {
  int64_t step = 0;                 // of the version held
  std::string checkpoint;           // its checkpoint's directory name
  int64_t versions = 0;             // versions made since the export
  int64_t checkpoints_skipped = 0;  // corrupt, or a delta of a chain broken by one
  int64_t bytes_read = 0;           // of checkpoint entries, all syncs
  int64_t keys_changed = 0;         // table rows held over the export now (changed or erased)
  std::string last_error;           // the last skipped checkpoint's error
};

// Not thread-safe: one poller (the stores it returns are thread-safe, ModelStore's contract).
class ModelFollower {
 public:
  // `base`: the export (its manifest names the checkpoint it came from); `checkpoint_dir`: the
  // training job's checkpoint directory.
  ModelFollower(std::shared_ptr<const ModelStore> base, std::string checkpoint_dir);
  ~ModelFollower();

  // A new version when a checkpoint newer than the one held was applied, nullopt when none was.
  // Errors: kNotFound when checkpoint_dir isn't there; a checkpoint that fails to read is skipped
  // and logged (stats().last_error), never an error here.
  absl::StatusOr<std::optional<std::shared_ptr<const ModelStore>>> Poll();

  const FollowStats& stats() const { return stats_; }

 private:
  // Applies checkpoint `path` (manifest read) to a copy of changes_. Errors: kDataLoss.
  absl::Status Apply(const std::string& path, const CheckpointManifest& manifest,
                     std::shared_ptr<ModelChanges>* out);

  const std::shared_ptr<const ModelStore> base_;
  const std::string dir_;
  std::shared_ptr<const ModelChanges> changes_;
  bool chain_broken_ = false;  // waiting for a full checkpoint
  std::set<int64_t> skipped_;  // steps of the checkpoints skipped (each read and logged once)
  FollowStats stats_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVING_MODEL_FOLLOWER_H_
