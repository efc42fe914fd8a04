#include "tests/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace pstrain {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string RunfilePath(const std::string& workspace_relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr) return workspace_relative;
  return absl::StrCat(srcdir, "/", workspace ? workspace : "pstrain", "/", workspace_relative);
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::string& name, const std::vector<std::string>& argv,
    const std::vector<std::string>& extra_env, const std::string& output_dir) {
  std::unique_ptr<Subprocess> p(new Subprocess());
  p->stdout_path_ = absl::StrCat(output_dir, "/", name, ".stdout");
  p->stderr_path_ = absl::StrCat(output_dir, "/", name, ".stderr");

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, p->stdout_path_.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, p->stderr_path_.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);

  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  for (const std::string& e : extra_env) env.push_back(e);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (std::string& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);

  int rc = posix_spawn(&p->pid_, argp[0], &actions, /*attrp=*/nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("spawn ", argv[0], ": ", std::strerror(rc)));
  }
  Subprocess* raw = p.get();
  p->reaper_ = std::thread([raw] {
    int status = 0;
    while (waitpid(raw->pid_, &status, 0) < 0 && errno == EINTR) {
    }
    raw->exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    raw->exited_.Notify();
  });
  return p;
}

Subprocess::~Subprocess() {
  if (!exited_.HasBeenNotified()) ::kill(pid_, SIGKILL);
  if (reaper_.joinable()) reaper_.join();
}

void Subprocess::Signal(int signal) {
  if (!exited_.HasBeenNotified()) ::kill(pid_, signal);
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  if (!exited_.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("pid ", pid_, " still running after ", absl::FormatDuration(timeout)));
  }
  return exit_code_;
}

absl::Status Subprocess::WaitForStdout(const std::string& text, absl::Duration timeout) {
  // The child writes to a file; re-read it whenever the child may have written more. There is no
  // event to wait on for a regular file, so this checks every 20 ms until the deadline.
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (Stdout().find(text) != std::string::npos) return absl::OkStatus();
    if (exited_.HasBeenNotified()) {
      return absl::AbortedError(absl::StrCat("pid ", pid_, " exited (code ", exit_code_,
                                             ") before printing \"", text, "\"; stderr: ",
                                             Stderr()));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("no \"", text, "\" from pid ", pid_));
    }
    exited_.WaitForNotificationWithTimeout(absl::Milliseconds(20));
  }
}

std::string Subprocess::Stdout() const { return ReadFile(stdout_path_); }
std::string Subprocess::Stderr() const { return ReadFile(stderr_path_); }

std::string Subprocess::SummaryLine() const {
  const std::string out = Stdout();
  const size_t start = out.rfind("\n{");
  return start == std::string::npos ? out : out.substr(start + 1);
}

}  // namespace pstrain
