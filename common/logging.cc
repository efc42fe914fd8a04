#include "common/logging.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"
#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pstrain {
namespace {

std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};

char LevelChar(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return 'D';
    case LogLevel::kInfo: return 'I';
    case LogLevel::kWarning: return 'W';
    case LogLevel::kError: return 'E';
    case LogLevel::kFatal: return 'F';
  }
  return '?';
}

}  // namespace

void SetMinLogLevel(LogLevel level) { min_level.store(static_cast<int>(level)); }

LogLevel MinLogLevel() { return static_cast<LogLevel>(min_level.load(std::memory_order_relaxed)); }

void InstallFailureSignalHandler(const char* argv0) {
  absl::InitializeSymbolizer(argv0);
  absl::FailureSignalHandlerOptions options;  // symbolized, to stderr, then the default action
  absl::InstallFailureSignalHandler(options);
}

void SetMinLogLevelFromEnv() {
  const char* env = std::getenv("PSTRAIN_LOG_LEVEL");
  if (env == nullptr) return;
  std::string v = absl::AsciiStrToLower(env);
  if (v == "debug") SetMinLogLevel(LogLevel::kDebug);
  if (v == "info") SetMinLogLevel(LogLevel::kInfo);
  if (v == "warning") SetMinLogLevel(LogLevel::kWarning);
  if (v == "error") SetMinLogLevel(LogLevel::kError);
}

namespace logging_internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  stream_ << LevelChar(level)
          << absl::FormatTime("%m%d %H:%M:%E3S ", absl::Now(), absl::LocalTimeZone())
          << static_cast<long>(syscall(SYS_gettid)) << ' ' << base << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string s = stream_.str();
  // One write() so that lines from different threads do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, s.data(), s.size());
  (void)ignored;
  if (level_ == LogLevel::kFatal) std::abort();
}

}  // namespace logging_internal
}  // namespace pstrain
