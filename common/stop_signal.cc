#include "common/stop_signal.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace pstrain {
namespace {

std::atomic<int> g_signal{0};
std::atomic<int64_t> g_first_ns{0};  // when the first arrived (CLOCK_MONOTONIC)
static_assert(std::atomic<int>::is_always_lock_free, "signal handlers need a lock-free flag");
static_assert(std::atomic<int64_t>::is_always_lock_free, "signal handlers need a lock-free time");

// A second signal this soon after the first is the same stop, delivered twice: `timeout` signals
// its child and then the child's process group, and a shell's Ctrl-C reaches every process of
// the job.
constexpr int64_t kRepeatNs = 1000000000;

int64_t NowNs() {
  struct timespec t;
  ::clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

void Write(const char* s) {
  // write(2) is async-signal-safe; its result is of no use here.
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, s, std::strlen(s));
}

void OnStopSignal(int sig) {
  int expected = 0;
  const int64_t now = NowNs();
  if (g_signal.compare_exchange_strong(expected, sig)) {
    g_first_ns.store(now);
    Write(sig == SIGINT ? "\nSIGINT: stopping after the steps in flight, with a final checkpoint "
                          "(a second signal, a second later, ends the job at once)\n"
                        : "\nSIGTERM: stopping after the steps in flight, with a final checkpoint "
                          "(a second signal, a second later, ends the job at once)\n");
    return;
  }
  if (now - g_first_ns.load() < kRepeatNs) return;  // the first, again
  // The second: the default action, now.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void InstallStopSignals() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

bool StopSignalled() { return g_signal.load(std::memory_order_relaxed) != 0; }

int StopSignalNumber() { return g_signal.load(std::memory_order_relaxed); }

}  // namespace pstrain
