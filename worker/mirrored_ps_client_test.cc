#include "worker/mirrored_ps_client.h"

#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collective/gloo_group.h"
#include "collective/rendezvous_service.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Floats(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}
std::vector<float> AsFloats(const std::string& s) {
  std::vector<float> v(s.size() / sizeof(float));
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}
std::string Ids(std::vector<int64_t> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
}
std::vector<int64_t> AsIds(const std::string& s) {
  std::vector<int64_t> v(s.size() / sizeof(int64_t));
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

UpdateOp Dense(const std::string& shard, std::vector<float> grad) {
  UpdateOp op;
  op.set_shard(shard);
  op.set_kind(UpdateOp::APPLY_GRADIENT);
  op.mutable_range();
  op.set_values(Floats(grad));
  op.set_dtype(DT_FLOAT32);
  return op;
}

UpdateOp Sparse(const std::string& shard, std::vector<int64_t> ids, std::vector<float> rows) {
  UpdateOp op;
  op.set_shard(shard);
  op.set_kind(UpdateOp::APPLY_GRADIENT);
  op.set_ids(Ids(ids));
  op.set_values(Floats(rows));
  op.set_dtype(DT_FLOAT32);
  return op;
}

// Runs fn(rank, group) on every rank of a group of `size`.
void OnEveryRank(int size, const std::function<void(int, CollectiveGroup*)>& fn) {
  auto rendezvous = RendezvousServer::Start("127.0.0.1:0");
  ASSERT_TRUE(rendezvous.ok()) << rendezvous.status();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      CollectiveGroupOptions options;
      options.rendezvous_address = (*rendezvous)->address();
      options.rank = r;
      options.size = size;
      options.name = "worker:" + std::to_string(r);
      auto group = CreateGlooGroup(options);
      ASSERT_TRUE(group.ok()) << group.status();
      fn(r, group->get());
    });
  }
  for (auto& t : threads) t.join();
}

class MirrorGradientsTest : public ::testing::TestWithParam<bool> {};

// The same whether the layouts are checked by an all-gather first or inside the all-reduce.
TEST_P(MirrorGradientsTest, DenseMeanedSparseGatheredOthersKept) {
  const bool gather_first = GetParam();
  OnEveryRank(2, [gather_first](int rank, CollectiveGroup* group) {
    UpdateRequest request;
    request.set_step(7);
    // Two dense gradients (bucket of 2 floats: three all-reduces), a sparse one whose ids differ
    // by rank (rank 1 has an id rank 0 lacks, and a shard rank 0 doesn't touch), an ASSIGN_ADD.
    *request.add_ops() = Dense("w/part_0", {1.f + rank, 2.f});
    *request.add_ops() = Dense("b/part_0", {10.f * (rank + 1)});
    *request.add_ops() = Sparse("emb/part_0", {5, 6 + rank}, {1.f, 2.f, 3.f, 4.f});
    if (rank == 1) *request.add_ops() = Sparse("emb/part_1", {9}, {8.f, 8.f});
    UpdateOp count;
    count.set_shard("count/part_0");
    count.set_kind(UpdateOp::ASSIGN_ADD);
    count.mutable_range();
    count.set_values(Floats({1.f}));
    count.set_dtype(DT_FLOAT32);
    *request.add_ops() = count;
    ASSERT_TRUE(MirrorGradients(group, /*bucket_bytes=*/8, &request, gather_first).ok());
    EXPECT_EQ(request.step(), 7);
    ASSERT_EQ(request.ops_size(), 5);
    EXPECT_THAT(AsFloats(request.ops(0).values()), ElementsAre(1.5f, 2.f));
    EXPECT_THAT(AsFloats(request.ops(1).values()), ElementsAre(15.f));
    EXPECT_EQ(request.ops(2).shard(), "count/part_0");
    EXPECT_THAT(AsFloats(request.ops(2).values()), ElementsAre(1.f));  // not reduced
    EXPECT_EQ(request.ops(3).shard(), "emb/part_0");
    EXPECT_THAT(AsIds(request.ops(3).ids()), ElementsAre(5, 6, 5, 7));
    EXPECT_THAT(AsFloats(request.ops(3).values()),
                ElementsAre(.5f, 1.f, 1.5f, 2.f, .5f, 1.f, 1.5f, 2.f));
    EXPECT_EQ(request.ops(4).shard(), "emb/part_1");
    EXPECT_THAT(AsIds(request.ops(4).ids()), ElementsAre(9));
    EXPECT_THAT(AsFloats(request.ops(4).values()), ElementsAre(4.f, 4.f));
  });
}

TEST_P(MirrorGradientsTest, DenseLayoutsDiffer_FailedPreconditionOnEveryRank) {
  const bool gather_first = GetParam();
  OnEveryRank(2, [gather_first](int rank, CollectiveGroup* group) {
    UpdateRequest request;
    *request.add_ops() = Dense(rank == 0 ? "w/part_0" : "v/part_0", {1.f});
    EXPECT_THAT(MirrorGradients(group, 1 << 20, &request, gather_first),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("dense gradients (variables, shapes) or step differ")));
  });
}

TEST_P(MirrorGradientsTest, StepsDiffer_FailedPreconditionOnEveryRank) {
  const bool gather_first = GetParam();
  OnEveryRank(3, [gather_first](int rank, CollectiveGroup* group) {
    UpdateRequest request;
    request.set_step(rank == 2 ? 12 : 11);
    *request.add_ops() = Dense("w/part_0", {1.f, 2.f});
    EXPECT_THAT(MirrorGradients(group, 1 << 20, &request, gather_first),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr(gather_first ? "worker:2 sent step 12's gradients"
                                                : "or step differ")));
  });
}

INSTANTIATE_TEST_SUITE_P(GatherFirstOrInTheAllReduce, MirrorGradientsTest, ::testing::Bool());

TEST(MirrorGradientsNotFloatTest, NotFloat_InvalidArgument) {
  OnEveryRank(1, [](int, CollectiveGroup* group) {
    UpdateRequest request;
    UpdateOp op = Dense("w/part_0", {1.f});
    op.set_dtype(DT_INT64);
    *request.add_ops() = op;
    EXPECT_THAT(MirrorGradients(group, 1 << 20, &request),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shard 'w/part_0'")));
  });
}

}  // namespace
}  // namespace pstrain
