// The NCCL group. Without a GPU (or without CUDA in the build) only the factory's failures are
// observable, and the tests that need GPUs skip, saying why. With GPUs: the cases of
// gloo_group_test.cc, the ranks as threads of this process, one GPU each (NCCL refuses two ranks
// of one group on one GPU), so the two-rank cases need two GPUs.
#include "collective/nccl_group.h"

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/rendezvous_service.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Why `ranks` ranks can't run here, or "" if they can.
std::string NoGpusFor(int ranks) {
  std::string why;
  const int gpus = NcclGpuCount(&why);
  if (gpus == 0) return "NCCL group checks skipped: " + why;
  if (gpus < ranks) {
    return "NCCL group checks skipped: " + std::to_string(ranks) + " ranks need " +
           std::to_string(ranks) + " GPUs (one each), this machine has " + std::to_string(gpus);
  }
  return "";
}

CollectiveGroupOptions Unreachable() {
  CollectiveGroupOptions options;
  options.rendezvous_address = "127.0.0.1:1";  // never contacted: the checks come first
  return options;
}

TEST(NcclGroupFactoryTest, Create_NoGpu_FailedPreconditionSayingWhy) {
  std::string why;
  if (NcclGpuCount(&why) > 0) {
    GTEST_SKIP() << "this machine has a GPU: the no-GPU failure is not observable here";
  }
  EXPECT_FALSE(NcclGroupAvailable());
  EXPECT_THAT(why, AnyOf(HasSubstr("no GPU"), HasSubstr("no CUDA")));
  // A build with CUDA names the CUDA error (or the device count); one without says so.
  EXPECT_THAT(CreateNcclGroup(Unreachable()).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AnyOf(HasSubstr("NCCL collectives need a CUDA build (this one has none)"),
                             AllOf(HasSubstr("NCCL collectives need a GPU"), HasSubstr(why)))));
  EXPECT_THAT(CreateNcclGroup(Unreachable(), /*gpu=*/0).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("NCCL collectives need a")));
}

TEST(NcclGroupFactoryTest, Create_BadRank_InvalidArgument) {
  CollectiveGroupOptions options = Unreachable();
  options.rank = 2;
  options.size = 2;
  EXPECT_THAT(CreateNcclGroup(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2 of a group of 2")));
}

// The GPU is checked once the GPUs are found (without any, kFailedPrecondition says so first).
TEST(NcclGroupFactoryTest, Create_NoSuchGpu_InvalidArgumentOrFailedPrecondition) {
  const std::string why = NoGpusFor(1);
  if (!why.empty()) GTEST_SKIP() << why;
  EXPECT_THAT(CreateNcclGroup(Unreachable(), /*gpu=*/-2).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gpu -2")));
  EXPECT_THAT(CreateNcclGroup(Unreachable(), /*gpu=*/NcclGpuCount()).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("asked for")));
}

class NcclGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = RendezvousServer::Start("127.0.0.1:0");
    ASSERT_TRUE(server.ok()) << server.status();
    rendezvous_ = std::move(*server);
  }

  CollectiveGroupOptions Options(int rank, int size, uint64_t generation = 1) {
    CollectiveGroupOptions options;
    options.rendezvous_address = rendezvous_->address();
    options.generation = generation;
    options.rank = rank;
    options.size = size;
    options.name = "worker:" + std::to_string(rank);
    options.join_timeout = absl::Seconds(20);
    options.timeout = absl::Seconds(20);
    return options;
  }

  // Forms a group of `size` ranks (one thread each, on GPU `rank`) and runs fn(group) on every
  // rank; `tweak`, if given, changes each rank's options first.
  void OnEveryRank(int size, const std::function<void(CollectiveGroup&)>& fn,
                   uint64_t generation = 1,
                   const std::function<void(CollectiveGroupOptions&)>& tweak = nullptr) {
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        CollectiveGroupOptions options = Options(r, size, generation);
        if (tweak) tweak(options);
        auto group = CreateNcclGroup(options);
        ASSERT_TRUE(group.ok()) << group.status();
        fn(**group);
      });
    }
    for (auto& t : threads) t.join();
  }

  std::unique_ptr<RendezvousServer> rendezvous_;
};

class NcclGroupSizesTest : public NcclGroupTest, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override {
    const std::string why = NoGpusFor(GetParam());
    if (!why.empty()) GTEST_SKIP() << why;
    NcclGroupTest::SetUp();
  }
};

TEST_P(NcclGroupSizesTest, AllReduce_SumAndMean_Exact) {
  const int size = GetParam();
  OnEveryRank(size, [&](CollectiveGroup& group) {
    // Rank r holds [1, 2, 3, 4] * (r + 1): the sum is [1, 2, 3, 4] * size(size+1)/2.
    std::vector<float> data;
    for (float x : {1.f, 2.f, 3.f, 4.f}) data.push_back(x * (group.rank() + 1));
    ASSERT_TRUE(group.AllReduce(data.data(), data.size(), ReduceOp::kSum).ok());
    const float k = size * (size + 1) / 2.0f;
    EXPECT_THAT(data, ElementsAre(1 * k, 2 * k, 3 * k, 4 * k));
    std::vector<float> mean = {2.f * group.rank(), 8.f};
    ASSERT_TRUE(group.AllReduce(mean.data(), mean.size(), ReduceOp::kMean).ok());
    EXPECT_THAT(mean, ElementsAre(size - 1.0f, 8.f));
  });
}

TEST_P(NcclGroupSizesTest, Broadcast_FromLastRank) {
  const int size = GetParam();
  OnEveryRank(size, [&](CollectiveGroup& group) {
    std::vector<float> data = {float(group.rank()), 0.5f, -1.f};
    ASSERT_TRUE(group.Broadcast(data.data(), data.size(), /*root=*/size - 1).ok());
    EXPECT_THAT(data, ElementsAre(size - 1.0f, 0.5f, -1.f));
    EXPECT_THAT(group.Broadcast(data.data(), data.size(), /*root=*/size),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("root")));
  });
}

TEST_P(NcclGroupSizesTest, AllGather_UnequalLengths_InRankOrder) {
  const int size = GetParam();
  OnEveryRank(size, [&](CollectiveGroup& group) {
    // Rank r sends r values (rank 0 sends none): r*10, r*10+1, ...
    std::vector<float> mine;
    std::vector<int64_t> ids;
    for (int i = 0; i < group.rank(); ++i) {
      mine.push_back(group.rank() * 10 + i);
      ids.push_back((int64_t{1} << 40) + group.rank() * 10 + i);
    }
    std::vector<float> all;
    std::vector<int64_t> counts;
    ASSERT_TRUE(group.AllGather(absl::MakeConstSpan(mine), &all, &counts).ok());
    std::vector<float> expected;
    std::vector<int64_t> expected_ids, expected_counts;
    for (int r = 0; r < size; ++r) {
      expected_counts.push_back(r);
      for (int i = 0; i < r; ++i) {
        expected.push_back(r * 10 + i);
        expected_ids.push_back((int64_t{1} << 40) + r * 10 + i);
      }
    }
    EXPECT_THAT(all, ElementsAreArray(expected));
    EXPECT_THAT(counts, ElementsAreArray(expected_counts));
    std::vector<int64_t> all_ids;
    ASSERT_TRUE(group.AllGather(absl::MakeConstSpan(ids), &all_ids, &counts).ok());
    EXPECT_THAT(all_ids, ElementsAreArray(expected_ids));
    ASSERT_TRUE(group.Barrier().ok());
  });
}

// Collectives of mixed kinds and sizes back to back: the staging buffer grows and shrinks in use.
TEST_P(NcclGroupSizesTest, BackToBack_GrowingBuffers_Exact) {
  const int size = GetParam();
  OnEveryRank(size, [&](CollectiveGroup& group) {
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{3}, int64_t{(1 << 20) + 3}, int64_t{7}}) {
      std::vector<float> data(n);
      for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(i % 1000 + group.rank());
      const int64_t tag = n * 10 + group.rank();
      std::vector<int64_t> all, counts;
      ASSERT_TRUE(group.AllGather(absl::MakeConstSpan(&tag, 1), &all, &counts).ok());
      for (int r = 0; r < size; ++r) ASSERT_EQ(all[r], n * 10 + r) << "n " << n;
      ASSERT_TRUE(group.AllReduce(data.data(), n, ReduceOp::kSum).ok());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(data[i], size * static_cast<float>(i % 1000) + size * (size - 1) / 2.0f)
            << "n " << n << " element " << i;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Workers, NcclGroupSizesTest, ::testing::Values(1, 2));

class NcclGroupFailureTest : public NcclGroupTest {
 protected:
  void SetUp() override {
    const std::string why = NoGpusFor(2);
    if (!why.empty()) GTEST_SKIP() << why;
    NcclGroupTest::SetUp();
  }
};

// Long enough for any step of these tests; a wait that runs out fails the test instead of hanging.
constexpr absl::Duration kPatience = absl::Seconds(60);

// A rank aborts while the other is in an all-reduce: the other fails within seconds, naming it
// (its heartbeat learns the reason; NCCL alone would wait on), later calls are kAborted, and the
// two form generation 2.
TEST_F(NcclGroupFailureTest, AllReduce_PeerAborts_OtherFailsNamingItThenRegroup) {
  absl::Status result, after;
  absl::Duration took;
  absl::Notification formed, done;
  OnEveryRank(/*size=*/2, [&](CollectiveGroup& group) {
    if (group.rank() == 1) {
      ASSERT_TRUE(formed.WaitForNotificationWithTimeout(kPatience));
      absl::SleepFor(absl::Milliseconds(300));  // let rank 0 enter the all-reduce
      group.Abort("the job is stopping");
      // This rank's GPU memory stays until rank 0's collective is over.
      EXPECT_TRUE(done.WaitForNotificationWithTimeout(kPatience));
      return;
    }
    formed.Notify();
    std::vector<float> data(1000, 1.0f);
    const absl::Time start = absl::Now();
    result = group.AllReduce(data.data(), data.size(), ReduceOp::kSum);
    took = absl::Now() - start;
    after = group.Barrier();
    done.Notify();
  });
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kUnavailable,
                               HasSubstr("worker:1 aborted the group: the job is stopping")));
  EXPECT_LT(took, absl::Seconds(10));  // the timeout is 20 s
  EXPECT_THAT(after, StatusIs(absl::StatusCode::kAborted,
                              HasSubstr("form it again with a higher generation")));
  OnEveryRank(
      /*size=*/2,
      [&](CollectiveGroup& group) {
        float x = 1.0f;
        ASSERT_TRUE(group.AllReduce(&x, 1, ReduceOp::kSum).ok());
        EXPECT_EQ(x, 2.0f);
      },
      /*generation=*/2);
}

// A peer that is alive but never makes the call: the collective times out (kDeadlineExceeded).
TEST_F(NcclGroupFailureTest, AllReduce_PeerNeverCalls_DeadlineExceeded) {
  absl::Notification done;
  absl::Status result;
  OnEveryRank(
      /*size=*/2,
      [&](CollectiveGroup& group) {
        if (group.rank() == 1) {
          EXPECT_TRUE(done.WaitForNotificationWithTimeout(kPatience));
          return;
        }
        float x = 1.0f;
        result = group.AllReduce(&x, 1, ReduceOp::kSum);
        done.Notify();
      },
      /*generation=*/1,
      [](CollectiveGroupOptions& options) {
        options.timeout = absl::Seconds(1);
        options.diagnose_wait = absl::Milliseconds(500);
      });
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kDeadlineExceeded,
                               AllOf(HasSubstr("all_reduce on worker:0"), HasSubstr("nccl: "))));
}

// Abort from another thread wakes a collective in flight on this rank.
TEST_F(NcclGroupFailureTest, Abort_WakesACollectiveInFlight) {
  absl::Notification done;
  OnEveryRank(/*size=*/2, [&](CollectiveGroup& group) {
    if (group.rank() == 1) {
      EXPECT_TRUE(done.WaitForNotificationWithTimeout(kPatience));
      return;
    }
    std::thread aborter([&] {
      absl::SleepFor(absl::Milliseconds(300));
      group.Abort("the job is stopping");
    });
    float x = 1.0f;
    const absl::Time start = absl::Now();
    const absl::Status status = group.AllReduce(&x, 1, ReduceOp::kSum);
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("the job is stopping")));
    aborter.join();
    done.Notify();
  });
}

}  // namespace
}  // namespace pstrain
