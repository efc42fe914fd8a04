#include "common/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace pstrain {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "signal handlers need a lock-free flag");

void Write(const char* s) {
  // write(2) is async-signal-safe; its result is of no use here.
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, s, std::strlen(s));
}

void OnStopSignal(int sig) {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) {
    Write(sig == SIGINT ? "\nSIGINT: stopping after the steps in flight, with a final checkpoint "
                          "(a second signal ends the job at once)\n"
                        : "\nSIGTERM: stopping after the steps in flight, with a final checkpoint "
                          "(a second signal ends the job at once)\n");
    return;
  }
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
