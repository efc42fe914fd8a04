#include "worker/dense_turns.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

// How long a test lets a thread that should be blocked show that it is.
constexpr absl::Duration kBlocked = absl::Milliseconds(50);
// How long a thread that should go on may take.
constexpr absl::Duration kDeadline = absl::Seconds(10);

// A thread that takes a turn for `step`, notes when it holds it, and gives it back when told.
class Taker {
 public:
  Taker(DenseTurns* turns, int64_t step, bool in_step_order = false) {
    thread_ = std::thread([this, turns, step, in_step_order] {
      DenseTurn turn = turns->Take(step, in_step_order);
      holds_.Notify();
      release_.WaitForNotification();
    });
  }
  ~Taker() {
    if (!release_.HasBeenNotified()) release_.Notify();
    thread_.join();
  }
  bool HoldsWithin(absl::Duration d) { return holds_.WaitForNotificationWithTimeout(d); }
  void Release() { release_.Notify(); }

 private:
  absl::Notification holds_, release_;
  std::thread thread_;
};

TEST(DenseTurnsTest, OneTurn_SecondStepWaitsUntilTheFirstGivesItBack) {
  DenseTurns turns;
  DenseTurn first = turns.Take(/*step=*/1);
  EXPECT_TRUE(first.held());
  Taker second(&turns, /*step=*/2);
  EXPECT_FALSE(second.HoldsWithin(kBlocked));
  first.Release();
  EXPECT_FALSE(first.held());
  EXPECT_TRUE(second.HoldsWithin(kDeadline));
}

TEST(DenseTurnsTest, OneTurn_GrantedInTheOrderAsked) {
  DenseTurns turns;
  DenseTurn first = turns.Take(/*step=*/10);
  // Each waiter asks only once the one before it is waiting (a ticket is taken at once).
  std::vector<std::unique_ptr<Taker>> waiting;
  for (int64_t step : {7, 3, 9}) {
    waiting.push_back(std::make_unique<Taker>(&turns, step));
    ASSERT_TRUE(turns.AwaitWaiting(static_cast<int>(waiting.size()), kDeadline));
  }
  EXPECT_FALSE(waiting.back()->HoldsWithin(kBlocked));
  first.Release();
  for (size_t i = 0; i < waiting.size(); ++i) {
    ASSERT_TRUE(waiting[i]->HoldsWithin(kDeadline)) << "waiter " << i;
    for (size_t j = i + 1; j < waiting.size(); ++j) {
      EXPECT_FALSE(waiting[j]->HoldsWithin(absl::ZeroDuration())) << "waiter " << j;
    }
    waiting[i]->Release();
  }
}

TEST(DenseTurnsTest, TwoTurns_TwoHeldAtOnceTheThirdWaits) {
  DenseTurnsOptions options;
  options.turns = 2;
  DenseTurns turns(options);
  DenseTurn a = turns.Take(1);
  DenseTurn b = turns.Take(2);
  EXPECT_EQ(turns.held(), 2);
  Taker third(&turns, 3);
  EXPECT_FALSE(third.HoldsWithin(kBlocked));
  b.Release();
  EXPECT_TRUE(third.HoldsWithin(kDeadline));
  EXPECT_EQ(turns.held(), 2);
}

TEST(DenseTurnsTest, NoLimit_EveryStepTakesATurnAtOnce) {
  DenseTurnsOptions options;
  options.turns = 0;
  DenseTurns turns(options);
  std::vector<DenseTurn> held;
  for (int64_t step = 1; step <= 100; ++step) held.push_back(turns.Take(step));
  EXPECT_EQ(turns.held(), 100);
  held.clear();
  EXPECT_EQ(turns.held(), 0);
}

TEST(DenseTurnsTest, Destroyed_GivesTheTurnBack) {
  DenseTurns turns;
  {
    DenseTurn turn = turns.Take(1);
    EXPECT_EQ(turns.held(), 1);
  }
  EXPECT_EQ(turns.held(), 0);
  DenseTurn again = turns.Take(2);  // does not block
  EXPECT_TRUE(again.held());
}

TEST(DenseTurnsTest, Moved_TheTurnGoesWithIt) {
  DenseTurns turns;
  DenseTurn a = turns.Take(1);
  DenseTurn b = std::move(a);
  EXPECT_FALSE(a.held());  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_TRUE(b.held());
  EXPECT_EQ(turns.held(), 1);
  a.Release();  // nothing held: nothing given back
  EXPECT_EQ(turns.held(), 1);
  DenseTurn c;
  c = std::move(b);
  EXPECT_EQ(turns.held(), 1);
  c = DenseTurn();
  EXPECT_EQ(turns.held(), 0);
}

TEST(DenseTurnsTest, InStepOrder_AStepWaitsForThePreviousEvenIfItAskedFirst) {
  DenseTurns turns;
  DenseTurn fifth = turns.Take(5, /*in_step_order=*/true);  // the first to ask starts the order
  EXPECT_NE(fifth.cache(), nullptr);
  Taker seventh(&turns, 7, /*in_step_order=*/true);
  Taker sixth(&turns, 6, /*in_step_order=*/true);
  ASSERT_TRUE(turns.AwaitWaiting(2, kDeadline));
  EXPECT_FALSE(seventh.HoldsWithin(kBlocked));
  EXPECT_FALSE(sixth.HoldsWithin(absl::ZeroDuration()));
  fifth.Release();
  EXPECT_TRUE(sixth.HoldsWithin(kDeadline));
  EXPECT_FALSE(seventh.HoldsWithin(kBlocked));
  sixth.Release();
  EXPECT_TRUE(seventh.HoldsWithin(kDeadline));
}

TEST(DenseTurnsTest, Cache_OnlyWithOneTurn) {
  DenseTurns one;
  DenseTurn a = one.Take(1);
  EXPECT_NE(a.cache(), nullptr);
  a.Release();
  EXPECT_EQ(a.cache(), nullptr);  // not held
  DenseTurnsOptions options;
  options.turns = 2;
  DenseTurns two(options);
  EXPECT_EQ(two.Take(1).cache(), nullptr);
  options.turns = 0;
  DenseTurns unlimited(options);
  EXPECT_EQ(unlimited.Take(1).cache(), nullptr);
}

}  // namespace
}  // namespace pstrain
