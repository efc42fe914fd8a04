#include "collective/rendezvous_service.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "collective/rendezvous_client.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::_;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

RendezvousJoinRequest JoinRequest(int rank, int size, uint64_t generation = 1,
                                  int64_t timeout_ms = 5000) {
  RendezvousJoinRequest request;
  request.set_group("train");
  request.set_generation(generation);
  request.set_rank(rank);
  request.set_size(size);
  request.set_name("worker:" + std::to_string(rank));
  request.set_timeout_ms(timeout_ms);
  return request;
}

RendezvousSetRequest SetRequest(const std::string& key, const std::string& value,
                                uint64_t generation = 1) {
  RendezvousSetRequest request;
  request.set_group("train");
  request.set_generation(generation);
  request.set_key(key);
  request.set_value(value);
  return request;
}

RendezvousGetRequest GetRequest(const std::string& key, int64_t timeout_ms, uint64_t generation = 1) {
  RendezvousGetRequest request;
  request.set_group("train");
  request.set_generation(generation);
  request.set_key(key);
  request.set_timeout_ms(timeout_ms);
  return request;
}

TEST(RendezvousStateTest, Join_AllRanks_EveryRankGetsEveryName) {
  RendezvousState state;
  std::vector<absl::StatusOr<RendezvousJoinResponse>> results(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] { results[r] = state.Join(JoinRequest(r, 3)); });
  }
  for (auto& t : threads) t.join();
  for (const auto& result : results) {
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_THAT(result->names(), ElementsAre("worker:0", "worker:1", "worker:2"));
  }
}

TEST(RendezvousStateTest, Join_RankNeverComes_DeadlineExceededNamingIt) {
  RendezvousState state;
  absl::StatusOr<RendezvousJoinResponse> other;
  std::thread t([&] { other = state.Join(JoinRequest(0, 3, 1, 300)); });
  auto mine = state.Join(JoinRequest(1, 3, 1, 300));
  t.join();
  EXPECT_THAT(mine, StatusIs(absl::StatusCode::kDeadlineExceeded,
                             HasSubstr("rank 2 never joined within 300 ms (joined: worker:0, "
                                       "worker:1)")));
  EXPECT_THAT(other, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("rank 2 never")));
}

TEST(RendezvousStateTest, Join_BadRankOrSize_InvalidArgument) {
  RendezvousState state;
  EXPECT_THAT(state.Join(JoinRequest(/*rank=*/3, /*size=*/3)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 3 is outside [0, 3)")));
  EXPECT_THAT(state.Join(JoinRequest(/*rank=*/0, /*size=*/0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("group size 0")));
  // Rank 0 joins a group of 2 (and stays registered after its wait runs out at once).
  EXPECT_THAT(state.Join(JoinRequest(/*rank=*/0, /*size=*/2, 1, /*timeout_ms=*/0)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("rank 1 never joined")));
  EXPECT_THAT(state.Join(JoinRequest(/*rank=*/1, /*size=*/4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("said 2")));
}

TEST(RendezvousStateTest, Get_WaitsForTheKey) {
  RendezvousState state;
  absl::StatusOr<RendezvousGetResponse> got;
  std::thread t([&] { got = state.Get(GetRequest("addr/1", 5000)); });
  ASSERT_TRUE(state.Set(SetRequest("addr/1", "host:1234")).ok());
  t.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value(), "host:1234");
}

TEST(RendezvousStateTest, Get_NeverSet_DeadlineExceededNamingTheKey) {
  RendezvousState state;
  EXPECT_THAT(state.Get(GetRequest("addr/7", 50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("key 'addr/7'")));
}

TEST(RendezvousStateTest, Generations_NewerForgetsOlder_OlderIsRefused) {
  RendezvousState state;
  ASSERT_TRUE(state.Set(SetRequest("k", "v1", /*generation=*/1)).ok());
  ASSERT_TRUE(state.Set(SetRequest("other", "v2", /*generation=*/2)).ok());
  EXPECT_THAT(state.Get(GetRequest("k", 0, /*generation=*/2)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("key 'k'")));
  EXPECT_THAT(state.Set(SetRequest("k", "v3", /*generation=*/1)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("generation 1 is over: the group is at generation 2")));
  EXPECT_THAT(state.Set(SetRequest("k", "v", /*generation=*/0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("generation 0")));
}

// Status tells a (re)starting rank where the group stands, without starting anything.
TEST(RendezvousStateTest, Status_NewestGenerationJoinedAndAborted) {
  RendezvousState state;
  RendezvousStatusRequest request;
  request.set_group("train");
  auto status = state.Status(request);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->generation(), 0u);  // nothing yet
  std::thread joining([&] { (void)state.Join(JoinRequest(0, 2, /*generation=*/3, 2000)); });
  absl::SleepFor(absl::Milliseconds(100));
  status = state.Status(request);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->generation(), 3u);
  EXPECT_EQ(status->size(), 2);
  EXPECT_EQ(status->joined(), 1);
  EXPECT_EQ(status->aborted(), "");
  RendezvousAbortRequest abort;
  abort.set_group("train");
  abort.set_generation(3);
  abort.set_rank(0);
  abort.set_reason("stopping");
  abort.set_deliberate(true);
  ASSERT_TRUE(state.Abort(abort).ok());
  joining.join();
  status = state.Status(request);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->aborted(), "stopping");
  request.set_group("");
  EXPECT_THAT(state.Status(request).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("group name")));
}

TEST(RendezvousStateTest, Set_OverLimits_RefusedAndNothingStored) {
  RendezvousOptions options;
  options.max_value_bytes = 8;
  options.max_total_bytes = 20;
  RendezvousState state(options);
  EXPECT_THAT(state.Set(SetRequest("k", std::string(9, 'x'))),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("over the limit of 8")));
  EXPECT_THAT(state.Set(SetRequest("", "v")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a key of 0 bytes")));
  ASSERT_TRUE(state.Set(SetRequest("a", "12345678")).ok());
  ASSERT_TRUE(state.Set(SetRequest("b", "12345678")).ok());
  EXPECT_THAT(state.Set(SetRequest("c", "12345678")),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("key 'c'")));
  EXPECT_THAT(state.Get(GetRequest("c", 0)), StatusIs(absl::StatusCode::kDeadlineExceeded, _));
  // Replacing a value counts the old one out.
  EXPECT_TRUE(state.Set(SetRequest("a", "87654321")).ok());
}

TEST(RendezvousStateTest, Heartbeat_SilentRank_AbortsNamingIt) {
  RendezvousOptions options;
  options.stale_after = absl::Milliseconds(200);
  RendezvousState state(options);
  std::thread t([&] { ASSERT_TRUE(state.Join(JoinRequest(0, 2)).ok()); });
  ASSERT_TRUE(state.Join(JoinRequest(1, 2)).ok());
  t.join();
  RendezvousHeartbeatRequest beat;
  beat.set_group("train");
  beat.set_generation(1);
  beat.set_rank(0);
  auto first = state.Heartbeat(beat);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->aborted(), "");
  // Rank 1 stays silent; rank 0 keeps beating.
  absl::StatusOr<RendezvousHeartbeatResponse> later;
  for (int i = 0; i < 10; ++i) {
    absl::SleepFor(absl::Milliseconds(50));  // rank 0's heartbeat period in this test
    later = state.Heartbeat(beat);
  }
  ASSERT_TRUE(later.ok());
  EXPECT_THAT(later->aborted(), HasSubstr("worker:1 (rank 1, silent"));
  beat.set_rank(5);
  EXPECT_THAT(state.Heartbeat(beat),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("rank 5 has not joined")));
}

TEST(RendezvousStateTest, Abort_WaitsForTheDeadRankToBeSilent) {
  RendezvousOptions options;
  options.stale_after = absl::Milliseconds(300);
  RendezvousState state(options);
  std::thread t([&] { ASSERT_TRUE(state.Join(JoinRequest(0, 2)).ok()); });
  ASSERT_TRUE(state.Join(JoinRequest(1, 2)).ok());
  t.join();
  // Rank 0 (the reporter) keeps beating; rank 1 is dead from the start.
  absl::Notification reported;
  std::thread beats([&] {
    RendezvousHeartbeatRequest beat;
    beat.set_group("train");
    beat.set_generation(1);
    beat.set_rank(0);
    do {
      state.Heartbeat(beat).status().IgnoreError();
    } while (!reported.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  });
  RendezvousAbortRequest abort;
  abort.set_group("train");
  abort.set_generation(1);
  abort.set_rank(0);
  abort.set_reason("all_reduce: connection reset");
  abort.set_wait_ms(5000);
  const absl::Time start = absl::Now();
  auto response = state.Abort(abort);
  reported.Notify();
  beats.join();
  ASSERT_TRUE(response.ok()) << response.status();
  // Answered once rank 1 went silent (300 ms after it joined), not at the end of the wait.
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  EXPECT_THAT(response->silent_ranks(), ElementsAre(1));
  EXPECT_THAT(response->silent(), ElementsAre(HasSubstr("worker:1 (rank 1, silent")));
  EXPECT_THAT(response->aborted(), HasSubstr("worker:0 failed: all_reduce: connection reset"));
}

TEST(RendezvousServiceTest, Client_OverGrpc_SetGetJoin) {
  auto server = RendezvousServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  RendezvousClient client((*server)->address(), "train", 1);
  ASSERT_TRUE(client.Set("k", std::string("\0v", 2)).ok());
  auto value = client.Get("k", absl::Seconds(1));
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, std::string("\0v", 2));
  auto names = client.Join(0, 1, "worker:0", absl::Seconds(1));
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, ElementsAre("worker:0"));
  EXPECT_THAT(client.Get("missing", absl::Milliseconds(100)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("key 'missing'")));
}

TEST(RendezvousServiceTest, Client_NoServer_UnavailableNamingTheAddress) {
  RendezvousClient client("127.0.0.1:1", "train", 1);
  EXPECT_THAT(client.Set("k", "v"),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("collective rendezvous at 127.0.0.1:1 unreachable")));
}

}  // namespace
}  // namespace pstrain
