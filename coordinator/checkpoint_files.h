// Where checkpoints live on disk and how their manifests are written and read.
//
//   <dir>/ckpt-<step, 12 digits>/ps-<i>/    one RocksDB database per ps task
//   <dir>/ckpt-<step, 12 digits>/MANIFEST   written last, atomically (temp file, fsync, rename,
//                                           fsync of the directory): a checkpoint directory
//                                           without it is an incomplete save and is ignored
//   <dir>/BEST                              the best validation's checkpoint (its directory name
//                                           on the first line, a note on the second), replaced
//                                           atomically; kept by the garbage collection
//
// The manifest file is "PSCKPT01", the payload's length (8 bytes, little-endian), the masked
// CRC-32C of the payload (4 bytes), and the payload: a serialized CheckpointManifest.
#ifndef PSTRAIN_COORDINATOR_CHECKPOINT_FILES_H_
#define PSTRAIN_COORDINATOR_CHECKPOINT_FILES_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/checkpoint.pb.h"

namespace pstrain {

inline constexpr char kManifestFileName[] = "MANIFEST";
inline constexpr char kBestFileName[] = "BEST";

// "<dir>/ckpt-000000000120".
std::string CheckpointPath(const std::string& dir, int64_t step);
// The step of a checkpoint directory's base name ("ckpt-000000000120" -> 120); -1 if it isn't one.
int64_t CheckpointStep(const std::string& base_name);

// Writes `manifest` into `checkpoint_path`/MANIFEST atomically. `before_rename` (if set) runs after
// the temporary file is synced and before it is renamed into place; an error from it stops the
// write there (fault injection). Errors: kInternal naming the path.
absl::Status WriteManifest(const std::string& checkpoint_path, const CheckpointManifest& manifest,
                           const std::function<absl::Status()>& before_rename = nullptr);

// Errors: kNotFound (no manifest: not a checkpoint, or an incomplete one), kDataLoss (truncated,
// bad magic, CRC mismatch, unparsable), each naming the file.
absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& checkpoint_path);

struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
  bool complete = false;  // has a manifest
};

// Every ckpt-* directory in `dir`, by step. Errors: kNotFound (no such directory),
// kInvalidArgument (not a directory).
absl::StatusOr<std::vector<CheckpointEntry>> ListCheckpointDirs(const std::string& dir);

// The complete checkpoint with the highest step. Errors: kNotFound if there is none (naming dir).
absl::StatusOr<CheckpointEntry> LatestCheckpoint(const std::string& dir);

// The checkpoint marked best in a checkpoint directory.
struct BestMarker {
  std::string path;  // <dir>/ckpt-...
  int64_t step = 0;
  std::string note;  // "val_rmse=0.8712 at step 120"
};

// Marks `checkpoint_path` (a checkpoint in `dir`) as the best, atomically. Errors: kInvalidArgument
// (not a checkpoint directory name in `dir`), kInternal (I/O), naming the path.
absl::Status WriteBestMarker(const std::string& dir, const std::string& checkpoint_path,
                             const std::string& note);
// The marked checkpoint, or nullopt if none is marked. Errors: kDataLoss for a malformed marker
// (naming it), kInternal for I/O.
absl::StatusOr<std::optional<BestMarker>> ReadBestMarker(const std::string& dir);
// Removes the mark (if any). Errors: kInternal.
absl::Status RemoveBestMarker(const std::string& dir);

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_CHECKPOINT_FILES_H_
