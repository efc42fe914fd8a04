// Runs a program as a child process for multi-process tests: output captured to files, waited for
// with a deadline, killed on request or when the Subprocess object is destroyed.
#ifndef PSTRAIN_TESTS_SUBPROCESS_H_
#define PSTRAIN_TESTS_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace pstrain {

// Not thread-safe: one test thread drives it.
class Subprocess {
 public:
  // Starts `argv[0]` with `argv` and, added to this process's environment, `extra_env` ("K=V").
  // stdout and stderr go to files under `output_dir`, named after `name`.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const std::string& name, const std::vector<std::string>& argv,
      const std::vector<std::string>& extra_env, const std::string& output_dir);

  ~Subprocess();  // SIGKILLs the child if it still runs, and reaps it

  pid_t pid() const { return pid_; }
  // Sends `signal` to the child.
  void Signal(int signal);
  // Waits until the child exits or `timeout` passes. Returns its exit code (128+N if killed by
  // signal N). Errors: kDeadlineExceeded.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // Waits until the child's stdout contains `text`. Errors: kDeadlineExceeded, or kAborted if the
  // child exited first.
  absl::Status WaitForStdout(const std::string& text, absl::Duration timeout);

  std::string Stdout() const;
  std::string Stderr() const;
  // The last line of stdout that starts with '{' (a job's one-line JSON summary); all of stdout
  // when none does.
  std::string SummaryLine() const;

 private:
  Subprocess() = default;

  pid_t pid_ = -1;
  std::string stdout_path_;
  std::string stderr_path_;
  int exit_code_ = -1;
  absl::Notification exited_;
  std::thread reaper_;  // blocks in waitpid, then notifies exited_
};

// The path of a binary built by Bazel and listed in the test's `data` (e.g. "ps/ps_server").
std::string RunfilePath(const std::string& workspace_relative);

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_SUBPROCESS_H_
