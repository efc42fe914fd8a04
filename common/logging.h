// A small logger: LOG(INFO) << "..."; writes one line to stderr with time, level, thread and file.
// LOG(FATAL) aborts after writing. Abseil 20220623 has no absl/log, and glog is not a dependency.
#ifndef PSTRAIN_COMMON_LOGGING_H_
#define PSTRAIN_COMMON_LOGGING_H_

#include <sstream>

namespace pstrain {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

// Messages below this level are dropped. Default kInfo; PSTRAIN_LOG_LEVEL=debug|info|warning|error
// in the environment changes it (read once, by SetMinLogLevelFromEnv(), which mains call).
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();
void SetMinLogLevelFromEnv();

// Installs Abseil's failure signal handler: on SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP
// (and SIGTERM where a main has not blocked it) the process writes the signal and a symbolized
// stack trace of the faulting thread to stderr (the task's log), then dies of the signal as it
// would have. Mains call it first, with their argv[0].
void InstallFailureSignalHandler(const char* argv0);

namespace logging_internal {

// One log line: collects the message and writes it (atomically, one write) when destroyed.
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

// Swallows the stream when the level is disabled.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace logging_internal
}  // namespace pstrain

#define PSTRAIN_LOG_LEVEL_DEBUG ::pstrain::LogLevel::kDebug
#define PSTRAIN_LOG_LEVEL_INFO ::pstrain::LogLevel::kInfo
#define PSTRAIN_LOG_LEVEL_WARNING ::pstrain::LogLevel::kWarning
#define PSTRAIN_LOG_LEVEL_ERROR ::pstrain::LogLevel::kError
#define PSTRAIN_LOG_LEVEL_FATAL ::pstrain::LogLevel::kFatal

#define LOG(level)                                                         \
  (PSTRAIN_LOG_LEVEL_##level < ::pstrain::MinLogLevel())                   \
      ? (void)0                                                            \
      : ::pstrain::logging_internal::Voidify() &                           \
            ::pstrain::logging_internal::LogMessage(PSTRAIN_LOG_LEVEL_##level, \
                                                    __FILE__, __LINE__)    \
                .stream()

#define CHECK(cond) \
  if (!(cond)) LOG(FATAL) << "Check failed: " #cond " "

#endif  // PSTRAIN_COMMON_LOGGING_H_
