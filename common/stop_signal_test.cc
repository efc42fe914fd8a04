#include "common/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// Each case in a child process (death tests fork): the flag and the handlers are the process's.
TEST(StopSignalDeathTest, FirstSigterm_SetsTheFlagAndTheProcessGoesOn) {
  EXPECT_EXIT(
      {
        InstallStopSignals();
        if (StopSignalled()) _exit(3);
        ::raise(SIGTERM);
        _exit(StopSignalled() && StopSignalNumber() == SIGTERM ? 0 : 4);
      },
      ::testing::ExitedWithCode(0), "SIGTERM: stopping after the steps in flight");
}

TEST(StopSignalDeathTest, SecondSignal_EndsTheProcessAsTheDefaultWould) {
  EXPECT_EXIT(
      {
        InstallStopSignals();
        ::raise(SIGINT);
        ::raise(SIGINT);  // the same stop, delivered twice
        ::usleep(1100 * 1000);
        ::raise(SIGTERM);
        _exit(0);  // not reached
      },
      ::testing::KilledBySignal(SIGTERM), "SIGINT: stopping");
}

}  // namespace
}  // namespace pstrain
