#include "common/memory_account.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(MemoryAccountTest, Admit_WithinTheSize_HeldUntilReleased) {
  MemoryAccount account(100, "the account");
  absl::StatusOr<MemoryAccount::Admission> a = account.Admit(60, absl::Seconds(1), "a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(account.held(), 60);
  {
    absl::StatusOr<MemoryAccount::Admission> b = account.Admit(40, absl::Seconds(1), "b");
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(account.held(), 100);
  }
  EXPECT_EQ(account.held(), 60);
  a->Release();
  a->Release();  // idempotent
  EXPECT_EQ(account.held(), 0);
  EXPECT_EQ(account.peak(), 100);
}

TEST(MemoryAccountTest, Admit_LargerThanTheSize_RefusedAtOnceNamingBoth) {
  MemoryAccount account(100, "ps:0's in-flight account");
  const absl::Time start = absl::Now();
  EXPECT_THAT(account.Admit(101, absl::Seconds(30), "a request").status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("101 bytes"), HasSubstr("ps:0's in-flight account of 100"))));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(account.Admit(-1, absl::Seconds(1), "x").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("-1")));
}

TEST(MemoryAccountTest, Admit_DoesNotFitInTime_ResourceExhaustedAndNothingHeld) {
  MemoryAccount account(100, "the account", /*small_bytes=*/0);
  MemoryAccount::Admission a = *account.Admit(80, absl::Seconds(1), "a");
  EXPECT_THAT(account.Admit(30, absl::Milliseconds(50), "b").status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("did not fit")));
  EXPECT_EQ(account.held(), 80);
  // The line moved on: a small one fits now.
  EXPECT_TRUE(account.Admit(20, absl::Milliseconds(50), "c").ok());
}

TEST(MemoryAccountTest, Admit_WaitsForBytesGivenBack) {
  MemoryAccount account(100, "the account");
  auto a = std::make_unique<MemoryAccount::Admission>(*account.Admit(100, absl::Seconds(1), "a"));
  std::atomic<bool> released{false};
  std::atomic<bool> saw_released{false};
  std::thread waiter([&] {
    absl::StatusOr<MemoryAccount::Admission> b = account.Admit(50, absl::Seconds(30), "b");
    saw_released = released.load();
    EXPECT_TRUE(b.ok()) << b.status();
  });
  absl::SleepFor(absl::Milliseconds(50));
  released = true;
  a.reset();
  waiter.join();
  EXPECT_TRUE(saw_released.load());
}

// First come, first served: a large admission waiting is not passed by small ones arriving
// after it, however much room they would find.
TEST(MemoryAccountTest, Admit_InArrivalOrder_LargeNotStarvedBySmall) {
  MemoryAccount account(100, "the account", /*small_bytes=*/5);
  auto first = std::make_unique<MemoryAccount::Admission>(*account.Admit(60, absl::Seconds(1), "a"));
  std::vector<int> order;
  absl::Mutex mu;
  absl::Notification large_waiting;
  std::thread large([&] {
    large_waiting.Notify();
    absl::StatusOr<MemoryAccount::Admission> big = account.Admit(90, absl::Seconds(30), "big");
    ASSERT_TRUE(big.ok());
    absl::MutexLock lock(&mu);
    order.push_back(90);
  });
  large_waiting.WaitForNotification();
  absl::SleepFor(absl::Milliseconds(50));  // the large one is in line
  std::thread small([&] {
    // 20: it fits beside the first admission (60), not beside the large one (90).
    absl::StatusOr<MemoryAccount::Admission> s = account.Admit(20, absl::Seconds(30), "small");
    ASSERT_TRUE(s.ok());
    absl::MutexLock lock(&mu);
    order.push_back(20);
  });
  absl::SleepFor(absl::Milliseconds(50));
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(order.empty()) << "the small one passed the large one";
  }
  first.reset();
  large.join();
  small.join();
  EXPECT_EQ(order, (std::vector<int>{90, 20}));
}

TEST(MemoryAccountTest, Charge_PastTheSize_LaterAdmissionsWait) {
  MemoryAccount account(100, "the account");
  MemoryAccount::Admission reply = account.Charge(150);
  EXPECT_EQ(account.held(), 150);
  EXPECT_THAT(account.Admit(1, absl::Milliseconds(20), "x").status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("did not fit")));
  reply.Release();
  EXPECT_TRUE(account.Admit(100, absl::Milliseconds(20), "y").ok());
  EXPECT_EQ(account.peak(), 150);
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

// Small admissions don't wait in line behind a large one waiting for room.
TEST(MemoryAccountTest, SmallAdmission_PassesALargeOneWaitingForRoom) {
  MemoryAccount account(100, "the account", /*small_bytes=*/5);
  MemoryAccount::Admission first = *account.Admit(60, absl::Seconds(1), "a");
  absl::Notification large_waiting;
  std::thread large([&] {
    large_waiting.Notify();
    EXPECT_TRUE(account.Admit(90, absl::Seconds(30), "big").ok());
  });
  large_waiting.WaitForNotification();
  absl::SleepFor(absl::Milliseconds(50));  // the large one is in line
  EXPECT_TRUE(account.Admit(5, absl::Milliseconds(100), "small").ok());
  // A larger one than small_bytes waits its turn.
  EXPECT_THAT(account.Admit(6, absl::Milliseconds(100), "not small").status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("did not fit")));
  first.Release();
  large.join();
}

}  // namespace
}  // namespace pstrain
