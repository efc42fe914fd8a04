#include "ps/dense_cache.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/local_ps_client.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::Pointwise;

// The cache never calls a ps: the handles only need one to exist (one that refuses every call).
std::unique_ptr<PsClient> NoPs() {
  const RawHandler refuse = [](int, const std::vector<absl::string_view>&, const ReplyAllocator&) {
    return absl::UnimplementedError("no ps");
  };
  return NewLocalPsClient("no ps", std::make_shared<const RawHandler>(refuse));
}

absl::string_view Bytes(const std::vector<float>& v) {
  return absl::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

class DenseCacheTest : public ::testing::Test {
 protected:
  // A [3, 2] float32 variable in two shards (rows 0-1 on ps 0, row 2 on ps 1).
  ShardedVariable Variable(const OptimizerDef* optimizer) {
    absl::StatusOr<ShardedVariable> v = ShardedVariable::Create(
        "w", {3, 2}, DT_FLOAT32, {{"w/part_0", 0, 2, 0}, {"w/part_1", 2, 1, 1}},
        {ps_.get(), ps_.get()}, optimizer);
    EXPECT_TRUE(v.ok()) << v.status();
    return *v;
  }
  // A reply of the whole variable: rows, slots (one slot, or none), each shard at `version`.
  std::vector<DenseCache::ShardReply> Reply(const std::vector<float>& rows,
                                            const std::vector<float>& slot, int64_t version) {
    rows_ = rows;
    slot_ = slot;
    std::vector<DenseCache::ShardReply> r(2);
    r[0] = {true, Bytes(rows_).substr(0, 16), slot_.empty() ? "" : Bytes(slot_).substr(0, 16),
            version};
    r[1] = {true, Bytes(rows_).substr(16), slot_.empty() ? "" : Bytes(slot_).substr(16), version};
    return r;
  }
  std::vector<float> Read(const DenseCache& cache, const ShardedVariable& v) {
    std::vector<float> out(6, -99.0f);
    EXPECT_TRUE(cache.Read(v, reinterpret_cast<char*>(out.data())));
    return out;
  }

  std::unique_ptr<PsClient> ps_ = NoPs();
  std::vector<float> rows_, slot_;
};

OptimizerDef Sgd(double rate) {
  OptimizerDef def;
  def.set_kind(OptimizerDef::SGD);
  def.set_learning_rate(rate);
  return def;
}

TEST_F(DenseCacheTest, Read_NothingHeld_FalseAndNothingCopied) {
  DenseCache cache;
  const ShardedVariable v = Variable(nullptr);
  std::vector<float> out(6, 5.0f);
  EXPECT_FALSE(cache.Read(v, reinterpret_cast<char*>(out.data())));
  EXPECT_THAT(out, ElementsAre(5, 5, 5, 5, 5, 5));
  EXPECT_FALSE(cache.Holds(v));
  // A push of what the cache doesn't hold: not applied ahead, its read unknown.
  const std::vector<float> g(6, 1.0f);
  DenseCache::Ticket t = cache.Push(v, Bytes(g), /*step=*/1, /*ahead=*/true);
  EXPECT_FALSE(t.applied);
  EXPECT_THAT(t.read_versions, ElementsAre(0, 0));
}

TEST_F(DenseCacheTest, Returned_RowsReadBack_PushSaysTheirVersion) {
  DenseCache cache;
  const OptimizerDef sgd = Sgd(1.0);
  const ShardedVariable v = Variable(&sgd);
  cache.Returned(v, /*seq=*/0, Reply({1, 2, 3, 4, 5, 6}, {}, /*version=*/7));
  EXPECT_TRUE(cache.Holds(v));
  EXPECT_THAT(Read(cache, v), ElementsAre(1, 2, 3, 4, 5, 6));
  const std::vector<float> g(6, 1.0f);
  DenseCache::Ticket t = cache.Push(v, Bytes(g), /*step=*/1, /*ahead=*/true);
  EXPECT_THAT(t.read_versions, ElementsAre(7, 7));
  EXPECT_TRUE(t.applied);  // SGD has no slots to wait for
  EXPECT_THAT(Read(cache, v), ElementsAre(0, 1, 2, 3, 4, 5));
}

// SGD (no slots): the push is applied to the copy at once; the reply (the ps's rows after it and
// another worker's update) replaces the copy, with this worker's later push applied on top.
TEST_F(DenseCacheTest, PushAhead_AppliedAtOnce_ReplyRebasesThePushesSentSince) {
  DenseCache cache;
  const OptimizerDef sgd = Sgd(0.5);
  const ShardedVariable v = Variable(&sgd);
  const std::vector<float> zeros(6, 0.0f);
  DenseCache::Ticket first = cache.Push(v, Bytes(zeros), 1, true);
  cache.Returned(v, first.seq, Reply({0, 0, 0, 0, 0, 0}, {}, /*version=*/1));
  const std::vector<float> twos(6, 2.0f), fours(6, 4.0f);
  DenseCache::Ticket a = cache.Push(v, Bytes(twos), /*step=*/2, /*ahead=*/true);
  ASSERT_TRUE(a.applied);
  EXPECT_THAT(a.read_versions, ElementsAre(1, 1));
  EXPECT_THAT(Read(cache, v), ElementsAre(-1, -1, -1, -1, -1, -1));
  DenseCache::Ticket b = cache.Push(v, Bytes(fours), /*step=*/3, /*ahead=*/true);
  ASSERT_TRUE(b.applied);
  EXPECT_THAT(b.read_versions, ElementsAre(2, 2));  // its own push a is on its way first
  EXPECT_THAT(Read(cache, v), ElementsAre(-3, -3, -3, -3, -3, -3));
  // The ps applied a and another worker's gradient (-10 on row 0): version 3.
  cache.Returned(v, a.seq, Reply({-11, -1, -1, -1, -1, -1}, {}, /*version=*/3));
  EXPECT_THAT(Read(cache, v), ElementsAre(-13, -3, -3, -3, -3, -3));  // b again on top
  // An older reply than the copy's is not taken.
  cache.Returned(v, first.seq, Reply({9, 9, 9, 9, 9, 9}, {}, /*version=*/1));
  EXPECT_THAT(Read(cache, v), ElementsAre(-13, -3, -3, -3, -3, -3));
  cache.Returned(v, b.seq, Reply({-13, -3, -3, -3, -3, -3}, {}, /*version=*/4));
  EXPECT_THAT(Read(cache, v), ElementsAre(-13, -3, -3, -3, -3, -3));
}

// Adagrad: the copy's accumulator comes back with the rows; a push applied ahead updates both as
// the ps's optimizer does.
TEST_F(DenseCacheTest, PushAhead_Adagrad_RowsAndAccumulatorAsThePsComputes) {
  DenseCache cache;
  OptimizerDef def;
  def.set_kind(OptimizerDef::ADAGRAD);
  def.set_learning_rate(0.1);
  def.set_initial_accumulator_value(0.1);
  const ShardedVariable v = Variable(&def);
  const std::vector<float> g = {1, -2, 0.5f, 0, 3, -1};
  cache.Returned(v, /*seq=*/0, Reply({1, 1, 1, 1, 1, 1}, std::vector<float>(6, 0.1f), 5));
  DenseCache::Ticket t = cache.Push(v, Bytes(g), /*step=*/6, /*ahead=*/true);
  ASSERT_TRUE(t.applied);
  // What the ps's optimizer computes on the same rows and accumulator.
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(def);
  ASSERT_TRUE(opt.ok());
  std::vector<float> rows(6, 1.0f), accum(6, 0.1f);
  float* slots[1] = {accum.data()};
  (*opt)->ApplyRow(rows.data(), slots, reinterpret_cast<const UnalignedFloat*>(g.data()), 6,
                   (*opt)->Prepare(6, 5));
  EXPECT_THAT(Read(cache, v), Pointwise(FloatNear(1e-6), rows));
}

TEST_F(DenseCacheTest, NotAhead_WhenNotAskedOrTheOptimizerUnknownOrScaledByStaleness) {
  const std::vector<float> g(6, 1.0f);
  {
    DenseCache cache;
    const OptimizerDef sgd = Sgd(1.0);
    const ShardedVariable v = Variable(&sgd);
    cache.Returned(v, 0, Reply({1, 1, 1, 1, 1, 1}, {}, 2));
    EXPECT_FALSE(cache.Push(v, Bytes(g), 3, /*ahead=*/false).applied);
    EXPECT_THAT(Read(cache, v), ElementsAre(1, 1, 1, 1, 1, 1));
  }
  {
    DenseCache cache;
    const ShardedVariable v = Variable(nullptr);
    cache.Returned(v, 0, Reply({1, 1, 1, 1, 1, 1}, {}, 2));
    EXPECT_FALSE(cache.Push(v, Bytes(g), 3, /*ahead=*/true).applied);
  }
  {
    DenseCache cache;
    OptimizerDef scaled = Sgd(1.0);
    scaled.set_staleness_scaling(OptimizerDef::STALENESS_INVERSE);
    const ShardedVariable v = Variable(&scaled);
    cache.Returned(v, 0, Reply({1, 1, 1, 1, 1, 1}, {}, 2));
    EXPECT_FALSE(cache.Push(v, Bytes(g), 3, /*ahead=*/true).applied);
  }
}

TEST_F(DenseCacheTest, Returned_AShardMissingOrCut_DropsTheCopy) {
  DenseCache cache;
  const OptimizerDef sgd = Sgd(1.0);
  const ShardedVariable v = Variable(&sgd);
  cache.Returned(v, 0, Reply({1, 2, 3, 4, 5, 6}, {}, 1));
  ASSERT_TRUE(cache.Holds(v));
  std::vector<DenseCache::ShardReply> missing = Reply({1, 2, 3, 4, 5, 6}, {}, 2);
  missing[1].ok = false;
  cache.Returned(v, 1, missing);
  EXPECT_FALSE(cache.Holds(v));
  cache.Returned(v, 2, Reply({1, 2, 3, 4, 5, 6}, {}, 3));
  std::vector<DenseCache::ShardReply> cut = Reply({1, 2, 3, 4, 5, 6}, {}, 4);
  cut[0].rows = cut[0].rows.substr(4);
  cache.Returned(v, 3, cut);
  EXPECT_FALSE(cache.Holds(v));
  cache.Returned(v, 4, Reply({1, 2, 3, 4, 5, 6}, {}, 5));
  cache.Drop(v);
  EXPECT_FALSE(cache.Holds(v));
}

}  // namespace
}  // namespace pstrain
