#include "ps/checkpoint_root.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace pstrain {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// realpath(3) of an existing path; empty on failure.
std::string Resolve(const std::string& path) {
  char buffer[PATH_MAX];
  if (::realpath(path.c_str(), buffer) == nullptr) return "";
  return buffer;
}

std::string Absolute(absl::string_view path) {
  if (!path.empty() && path[0] == '/') return std::string(path);
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof(cwd)) == nullptr) return absl::StrCat("/", path);
  return absl::StrCat(cwd, "/", path);
}

}  // namespace

std::string NormalizeAbsolutePath(absl::string_view path) {
  std::vector<absl::string_view> parts;
  for (absl::string_view p : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (p == ".") continue;
    if (p == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(p);
  }
  return absl::StrCat("/", absl::StrJoin(parts, "/"));
}

absl::StatusOr<CheckpointRoot> CheckpointRoot::Open(const std::string& root) {
  if (root.empty()) return absl::InvalidArgumentError("the checkpoint root is empty");
  const std::string absolute = NormalizeAbsolutePath(Absolute(root));
  // Create it and its parents if missing.
  std::error_code ec;
  std::filesystem::create_directories(absolute, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("can't create the checkpoint root ", absolute, ": ", ec.message()));
  }
  struct stat st;
  const std::string resolved = Resolve(absolute);
  if (resolved.empty() || ::stat(resolved.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the checkpoint root ", absolute, " is not a directory"));
  }
  return CheckpointRoot(resolved);
}

absl::StatusOr<std::string> CheckpointRoot::Confine(absl::string_view requested) const {
  if (requested.empty()) return absl::InvalidArgumentError("empty checkpoint path");
  if (requested.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError("checkpoint path holds a NUL byte");
  }
  if (root_.empty()) return std::string(requested);
  const std::string normal = NormalizeAbsolutePath(
      requested[0] == '/' ? std::string(requested) : absl::StrCat(root_, "/", requested));
  // Resolve the symlinks of the longest existing prefix; what follows it does not exist yet, so it
  // holds no symlinks.
  std::string prefix = normal, rest;
  while (prefix != "/" && !Exists(prefix)) {
    const size_t slash = prefix.rfind('/');
    rest = absl::StrCat(prefix.substr(slash), rest);
    prefix = slash == 0 ? "/" : prefix.substr(0, slash);
  }
  std::string resolved = Resolve(prefix);
  if (resolved.empty()) {
    // A dangling symlink or an unreadable directory: refuse rather than guess.
    return absl::PermissionDeniedError(absl::StrCat("checkpoint path '", requested,
                                                    "' can't be resolved (", prefix, ": ",
                                                    std::strerror(errno), ")"));
  }
  if (resolved == "/") resolved.clear();
  resolved += rest;
  if (resolved.empty()) resolved = "/";
  if (resolved != root_ && resolved.rfind(root_ + "/", 0) != 0) {
    const std::string is =
        resolved == requested ? "" : absl::StrCat(" (", resolved, " once resolved)");
    return absl::PermissionDeniedError(absl::StrCat("checkpoint path '", requested, "'", is,
                                                    " is outside this ps's checkpoint root ",
                                                    root_, " (--checkpoint_root)"));
  }
  return resolved;
}

}  // namespace pstrain
