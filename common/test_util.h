// Helpers for tests: a status matcher, a fresh temporary directory, a process's memory, float
// bytes, a message cut into pieces. Test-only.
#ifndef PSTRAIN_COMMON_TEST_UTIL_H_
#define PSTRAIN_COMMON_TEST_UTIL_H_

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"

namespace pstrain {
namespace testing_internal {
inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace testing_internal

// EXPECT_THAT(result, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shape"))) for an
// absl::Status or an absl::StatusOr<T>.
MATCHER_P2(StatusIs, code, message_matcher, "") {
  const absl::Status& status = ::pstrain::testing_internal::GetStatus(arg);
  if (status.code() != code) {
    *result_listener << "status is " << status;
    return false;
  }
  return ::testing::ExplainMatchResult(message_matcher, std::string(status.message()),
                                       result_listener);
}

// A /proc/<pid>/status field of process `pid` (default: this one) in bytes ("VmRSS", "VmHWM"), or
// -1.
inline int64_t ProcStatusBytes(const std::string& field, pid_t pid = ::getpid()) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::istringstream words(line.substr(field.size() + 1));
    int64_t kib = -1;
    words >> kib;
    return kib * 1024;
  }
  return -1;
}

// An empty directory `name` under the test's temporary folder ($TEST_TMPDIR, else /tmp); whatever
// was there before is removed.
inline std::string FreshTempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Raw little-endian float32 bytes (a variable's rows as the ps sends them) and back.
inline std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}
inline std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// `bytes` cut into pieces of `n` bytes (the last one shorter), as views of it: a message as gRPC
// might receive it. And the pieces joined again.
inline std::vector<absl::string_view> CutIntoPieces(const std::string& bytes, size_t n) {
  std::vector<absl::string_view> pieces;
  for (size_t at = 0; at < bytes.size(); at += n) {
    pieces.push_back(absl::string_view(bytes).substr(at, n));
  }
  return pieces;
}
inline std::string JoinPieces(const std::vector<absl::string_view>& pieces) {
  std::string s;
  for (absl::string_view p : pieces) s.append(p.data(), p.size());
  return s;
}

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_TEST_UTIL_H_
