// Where a ps may read and write checkpoints: every database path a request names (SaveShards'
// db_path, RestoreShards' sources) must lie under the task's checkpoint root once `.` and `..`
// are applied and the symlinks of its existing part resolved; anything else is PERMISSION_DENIED
// naming the path, and nothing is created. A relative path is taken from the root.
//
// The ps binary's root is --checkpoint_root (default: the directory it was started in); the
// coordinator's checkpoint directory must lie under it (ps and coordinator see one file system at
// the same paths, as for every checkpoint). An empty root confines nothing: the in-process
// cluster's servers, which share one process with the coordinator and listen on localhost only.
//
// Not protected: a local user who can write inside the root can swap a directory for a symlink
// between the check and the open; the check resolves the path once and the ps then uses the
// resolved path, so the window is that of a rename inside the root.
#ifndef PSTRAIN_PS_CHECKPOINT_ROOT_H_
#define PSTRAIN_PS_CHECKPOINT_ROOT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {

class CheckpointRoot {
 public:
  // No confinement.
  CheckpointRoot() = default;

  // `root` made absolute (from the working directory), created if missing, and resolved.
  // Errors: kInvalidArgument (empty), kFailedPrecondition (not a directory, or can't be made).
  static absl::StatusOr<CheckpointRoot> Open(const std::string& root);

  // The resolved path to use for `requested`, or kPermissionDenied naming both when it lies
  // outside the root; kInvalidArgument for an empty path or one holding a NUL byte.
  absl::StatusOr<std::string> Confine(absl::string_view requested) const;

  const std::string& path() const { return root_; }  // empty: no confinement

 private:
  explicit CheckpointRoot(std::string root) : root_(std::move(root)) {}
  std::string root_;
};

// `path` with `.`, `..` and repeated slashes applied lexically (".." above "/" stays at "/");
// `path` must be absolute.
std::string NormalizeAbsolutePath(absl::string_view path);

}  // namespace pstrain

#endif  // PSTRAIN_PS_CHECKPOINT_ROOT_H_
