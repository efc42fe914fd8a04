// Under --config=tsan: the annotations let absl's primitives order what they order (no report),
// and still leave a real race reported. Skipped in other builds.
#include <sys/wait.h>

#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif

TEST(AbslSyncAnnotationsTest, DataGuardedByAbslPrimitivesIsNotReported) {
  if (!kTsan) GTEST_SKIP() << "not a ThreadSanitizer build";
  absl::Mutex mu;
  int guarded = 0;  // under mu
  bool ready = false;
  int handed = 0;  // written before Notify, read after WaitForNotification
  absl::Notification done;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&ready));  // the Condition reads `ready` inside absl
    ++guarded;
  });
  std::thread notifier([&] {
    handed = 7;
    done.Notify();
  });
  {
    absl::MutexLock lock(&mu);
    ++guarded;
    ready = true;
  }
  done.WaitForNotification();
  EXPECT_EQ(handed, 7);
  waiter.join();
  notifier.join();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(guarded, 2);
}

TEST(AbslSyncAnnotationsTest, UnguardedDataIsStillReported) {
  if (!kTsan) GTEST_SKIP() << "not a ThreadSanitizer build";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        absl::Mutex mu;  // taken by both threads, but not around the write
        int racy = 0;
        std::thread other([&] {
          { absl::MutexLock lock(&mu); }
          racy = 1;
        });
        { absl::MutexLock lock(&mu); }
        racy = 2;
        other.join();
        std::exit(racy == 0 ? 1 : 0);
      },
      [](int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; },
      "data race");
}

}  // namespace
