#include "coordinator/checkpoint_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

constexpr char kMagic[] = "PSCKPT01";
constexpr size_t kMagicSize = 8;
constexpr size_t kHeaderSize = kMagicSize + 8 + 4;
constexpr char kPrefix[] = "ckpt-";

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno("writing", path);
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("opening directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Errno("syncing directory", dir);
  return absl::OkStatus();
}

// Writes `bytes` to `dir`/`name` atomically: a temporary file, synced, renamed over the final
// name (after `before_rename`, if any), and the directory synced.
absl::Status WriteFileAtomically(const std::string& dir, absl::string_view name,
                                 const std::string& bytes,
                                 const std::function<absl::Status()>& before_rename = nullptr) {
  const std::string final_path = absl::StrCat(dir, "/", name);
  const std::string temp_path = final_path + ".tmp";
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("creating", temp_path);
  absl::Status s = WriteAll(fd, bytes.data(), bytes.size(), temp_path);
  if (s.ok() && ::fdatasync(fd) != 0) s = Errno("syncing", temp_path);
  ::close(fd);
  RETURN_IF_ERROR(s);
  if (before_rename) RETURN_IF_ERROR(before_rename());
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0) return Errno("renaming", temp_path);
  return SyncDir(dir);
}

// Reads the open `fd` (of `path`) to its end, or until more than `max_bytes` were read, into
// `out`; closes it.
absl::Status ReadToEnd(int fd, const std::string& path, size_t max_bytes, std::string* out) {
  char buffer[1 << 16];
  while (out->size() <= max_bytes) {
    const ssize_t r = ::read(fd, buffer, sizeof(buffer));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      absl::Status s = Errno("reading", path);
      ::close(fd);
      return s;
    }
    if (r == 0) break;
    out->append(buffer, static_cast<size_t>(r));
  }
  ::close(fd);
  return absl::OkStatus();
}

}  // namespace

std::string CheckpointPath(const std::string& dir, int64_t step) {
  return absl::StrFormat("%s/%s%012d", dir, kPrefix, step);
}

int64_t CheckpointStep(const std::string& base_name) {
  if (!absl::StartsWith(base_name, kPrefix)) return -1;
  const std::string digits = base_name.substr(sizeof(kPrefix) - 1);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit)) return -1;
  int64_t step;
  if (!absl::SimpleAtoi(digits, &step)) return -1;
  return step;
}

absl::Status WriteManifest(const std::string& checkpoint_path, const CheckpointManifest& manifest,
                           const std::function<absl::Status()>& before_rename) {
  std::string payload;
  if (!manifest.SerializeToString(&payload)) {
    return absl::InternalError(absl::StrCat("can't serialize the manifest of ", checkpoint_path));
  }
  std::string file(kMagic, kMagicSize);
  const uint64_t length = payload.size();
  for (int i = 0; i < 8; ++i) file.push_back(static_cast<char>(length >> (8 * i)));
  const uint32_t crc = crc32c::Mask(crc32c::Value(payload));
  for (int i = 0; i < 4; ++i) file.push_back(static_cast<char>(crc >> (8 * i)));
  file += payload;
  return WriteFileAtomically(checkpoint_path, kManifestFileName, file, before_rename);
}

absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& checkpoint_path) {
  const std::string path = absl::StrCat(checkpoint_path, "/", kManifestFileName);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(
          "no checkpoint at ", checkpoint_path, " (", path,
          " is missing: not a checkpoint, or a save that did not finish)"));
    }
    return Errno("opening", path);
  }
  std::string file;
  RETURN_IF_ERROR(ReadToEnd(fd, path, std::numeric_limits<size_t>::max(), &file));
  auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("checkpoint manifest ", path, " is corrupt: ", why));
  };
  if (file.size() < kHeaderSize) return corrupt(absl::StrCat("only ", file.size(), " bytes"));
  if (file.compare(0, kMagicSize, kMagic) != 0) return corrupt("bad magic");
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) {
    length |= static_cast<uint64_t>(static_cast<unsigned char>(file[kMagicSize + i])) << (8 * i);
  }
  uint32_t crc = 0;
  for (int i = 0; i < 4; ++i) {
    crc |= static_cast<uint32_t>(static_cast<unsigned char>(file[kMagicSize + 8 + i])) << (8 * i);
  }
  if (file.size() - kHeaderSize != length) {
    return corrupt(absl::StrCat("payload is ", file.size() - kHeaderSize, " bytes, header says ",
                                length));
  }
  const absl::string_view payload(file.data() + kHeaderSize, length);
  if (crc32c::Unmask(crc) != crc32c::Value(payload)) return corrupt("CRC-32C mismatch");
  CheckpointManifest manifest;
  if (!manifest.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return corrupt("unparsable");
  }
  return manifest;
}

absl::StatusOr<std::vector<CheckpointEntry>> ListCheckpointDirs(const std::string& dir) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(dir, ec);
  if (!std::filesystem::exists(st)) {
    return absl::NotFoundError(absl::StrCat("checkpoint directory ", dir, " does not exist"));
  }
  if (!std::filesystem::is_directory(st)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint directory ", dir,
                                                   " is not a directory"));
  }
  std::vector<CheckpointEntry> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const int64_t step = CheckpointStep(entry.path().filename().string());
    if (step < 0 || !entry.is_directory()) continue;
    CheckpointEntry e;
    e.step = step;
    e.path = entry.path().string();
    e.complete = std::filesystem::exists(entry.path() / kManifestFileName);
    out.push_back(std::move(e));
  }
  if (ec) {
    return absl::InternalError(absl::StrCat("listing ", dir, ": ", ec.message()));
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return out;
}

absl::Status WriteBestMarker(const std::string& dir, const std::string& checkpoint_path,
                             const std::string& note) {
  const std::filesystem::path p(checkpoint_path);
  const std::string name = p.filename().string();
  std::error_code ec;
  if (CheckpointStep(name) < 0 || !std::filesystem::equivalent(dir, p.parent_path(), ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(checkpoint_path, " is not a checkpoint directory in ", dir));
  }
  return WriteFileAtomically(dir, kBestFileName, absl::StrCat(name, "\n", note, "\n"));
}

absl::StatusOr<std::optional<BestMarker>> ReadBestMarker(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kBestFileName);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    return Errno("opening", path);
  }
  std::string text;
  RETURN_IF_ERROR(ReadToEnd(fd, path, /*max_bytes=*/65536, &text));
  const size_t eol = text.find('\n');
  const std::string name = text.substr(0, eol);
  const int64_t step = CheckpointStep(name);
  if (eol == std::string::npos || step < 0 || text.size() > 65536) {
    return absl::DataLossError(absl::StrCat(path, " is malformed: its first line must name a "
                                            "checkpoint directory (ckpt-...)"));
  }
  BestMarker m;
  m.path = absl::StrCat(dir, "/", name);
  m.step = step;
  m.note = text.substr(eol + 1);
  while (!m.note.empty() && m.note.back() == '\n') m.note.pop_back();
  return m;
}

absl::Status RemoveBestMarker(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kBestFileName);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("removing", path);
  return absl::OkStatus();
}

absl::StatusOr<CheckpointEntry> LatestCheckpoint(const std::string& dir) {
  ASSIGN_OR_RETURN(std::vector<CheckpointEntry> all, ListCheckpointDirs(dir));
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->complete) return *it;
  }
  return absl::NotFoundError(absl::StrCat("no complete checkpoint in ", dir));
}

}  // namespace pstrain
