#include "collective/gloo_group.h"

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "collective/rendezvous_service.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

class GlooGroupTest : public ::testing::Test {
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

  // Forms a group of `size` ranks (one thread each) and runs fn(group) on every rank.
  void OnEveryRank(int size, const std::function<void(CollectiveGroup&)>& fn) {
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        auto group = CreateGlooGroup(Options(r, size));
        ASSERT_TRUE(group.ok()) << group.status();
        fn(**group);
      });
    }
    for (auto& t : threads) t.join();
  }

  std::unique_ptr<RendezvousServer> rendezvous_;
};

class GlooGroupSizesTest : public GlooGroupTest, public ::testing::WithParamInterface<int> {};

TEST_P(GlooGroupSizesTest, AllReduce_SumAndMean_Exact) {
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

TEST_P(GlooGroupSizesTest, AllReduce_LargeBufferTakesTheRing_Exact) {
  const int size = GetParam();
  const int64_t n = (1 << 20) + 3;  // 4 MiB and a bit: the ring, in segments, with a ragged end
  OnEveryRank(size, [&](CollectiveGroup& group) {
    std::vector<float> data(n);
    for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>((i % 1000) + group.rank());
    ASSERT_TRUE(group.AllReduce(data.data(), n, ReduceOp::kSum).ok());
    const float ranks = size * (size - 1) / 2.0f;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(data[i], size * static_cast<float>(i % 1000) + ranks) << "element " << i;
    }
  });
}

TEST_P(GlooGroupSizesTest, Broadcast_FromLastRank) {
  const int size = GetParam();
  OnEveryRank(size, [&](CollectiveGroup& group) {
    std::vector<float> data = {float(group.rank()), 0.5f, -1.f};
    ASSERT_TRUE(group.Broadcast(data.data(), data.size(), /*root=*/size - 1).ok());
    EXPECT_THAT(data, ElementsAre(size - 1.0f, 0.5f, -1.f));
    EXPECT_THAT(group.Broadcast(data.data(), data.size(), /*root=*/size),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("root")));
  });
}

TEST_P(GlooGroupSizesTest, AllGather_UnequalLengths_InRankOrder) {
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

// Many collectives back to back, of mixed kinds and odd sizes, as a training step makes them: a
// rank that finishes one early and starts the next must not mix their messages.
TEST_P(GlooGroupSizesTest, BackToBack_MixedCollectives_Exact) {
  const int size = GetParam();
  OnEveryRank(size, [&](CollectiveGroup& group) {
    for (int it = 0; it < 200; ++it) {
      const int64_t n = 1 + (it * 37) % 300;
      std::vector<float> data(n);
      for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>((i + it) % 7 + group.rank());
      const int64_t tag = it * 10 + group.rank();
      std::vector<int64_t> all, counts;
      ASSERT_TRUE(group.AllGather(absl::MakeConstSpan(&tag, 1), &all, &counts).ok());
      for (int r = 0; r < size; ++r) ASSERT_EQ(all[r], it * 10 + r) << "iteration " << it;
      ASSERT_TRUE(group.AllReduce(data.data(), n, ReduceOp::kSum).ok());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(data[i], size * static_cast<float>((i + it) % 7) + size * (size - 1) / 2.0f)
            << "iteration " << it << " element " << i;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Workers, GlooGroupSizesTest, ::testing::Values(1, 2, 4));

TEST_F(GlooGroupTest, Create_RankNeverJoins_DeadlineExceededNamingIt) {
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CollectiveGroupOptions options = Options(r, /*size=*/3);
      options.join_timeout = absl::Seconds(1);
      results[r] = CreateGlooGroup(options).status();
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& status : results) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                 HasSubstr("rank 2 never joined within 1000 ms")));
  }
}

TEST_F(GlooGroupTest, Create_BadRank_InvalidArgument) {
  EXPECT_THAT(CreateGlooGroup(Options(/*rank=*/2, /*size=*/2)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2 of a group of 2")));
}

// A rank dies (its group is destroyed: its connections close and its heartbeats stop) while the
// others are in an all-reduce: they fail within seconds, naming it, and a new generation works.
TEST_F(GlooGroupTest, AllReduce_PeerDies_OthersFailNamingItThenRegroup) {
  const int size = 3;
  std::vector<absl::Status> results(size);
  std::vector<absl::Duration> took(size);
  absl::Notification formed0, formed1, dead;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto group = CreateGlooGroup(Options(r, size));
      ASSERT_TRUE(group.ok()) << group.status();
      if (r == 2) {
        formed0.WaitForNotification();
        formed1.WaitForNotification();
        absl::SleepFor(absl::Milliseconds(300));  // let the others enter the all-reduce
        group->reset();                            // dies without a word
        dead.Notify();
        return;
      }
      (r == 0 ? formed0 : formed1).Notify();
      std::vector<float> data(1000, 1.0f);
      const absl::Time start = absl::Now();
      results[r] = (*group)->AllReduce(data.data(), data.size(), ReduceOp::kSum);
      took[r] = absl::Now() - start;
      // Later calls on the broken group say so.
      EXPECT_THAT((*group)->Barrier(), StatusIs(absl::StatusCode::kAborted, HasSubstr("form it again with a higher generation")));
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(results[r],
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr("worker:2 (rank 2, silent")))
        << "rank " << r;
    EXPECT_LT(took[r], absl::Seconds(10)) << "rank " << r;  // the timeout is 20 s
  }
  // The same three form generation 2 and all-reduce again.
  threads.clear();
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto group = CreateGlooGroup(Options(r, size, /*generation=*/2));
      ASSERT_TRUE(group.ok()) << group.status();
      float x = 1.0f;
      ASSERT_TRUE((*group)->AllReduce(&x, 1, ReduceOp::kSum).ok());
      EXPECT_EQ(x, 3.0f);
    });
  }
  for (auto& t : threads) t.join();
}

// A peer that is alive but never makes the call: the collective times out (kDeadlineExceeded).
TEST_F(GlooGroupTest, AllReduce_PeerNeverCalls_DeadlineExceeded) {
  absl::Notification done;
  absl::Status result;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CollectiveGroupOptions options = Options(r, 2);
      options.timeout = absl::Seconds(1);
      options.diagnose_wait = absl::Milliseconds(500);
      auto group = CreateGlooGroup(options);
      ASSERT_TRUE(group.ok()) << group.status();
      if (r == 1) {
        done.WaitForNotification();
        return;
      }
      float x = 1.0f;
      result = (*group)->AllReduce(&x, 1, ReduceOp::kSum);
      done.Notify();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("all_reduce on worker:0")));
}

// Abort from another thread wakes a collective in flight on this rank.
TEST_F(GlooGroupTest, Abort_WakesACollectiveInFlight) {
  absl::Notification aborted;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto group = CreateGlooGroup(Options(r, 2));
      ASSERT_TRUE(group.ok()) << group.status();
      if (r == 1) {
        aborted.WaitForNotification();
        return;
      }
      std::thread aborter([&] {
        absl::SleepFor(absl::Milliseconds(300));
        (*group)->Abort("the job is stopping");
      });
      float x = 1.0f;
      const absl::Time start = absl::Now();
      absl::Status status = (*group)->AllReduce(&x, 1, ReduceOp::kSum);
      EXPECT_LT(absl::Now() - start, absl::Seconds(10));
      EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("the job is stopping")));
      aborter.join();
      aborted.Notify();
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace pstrain
