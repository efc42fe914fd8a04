#include "ps/dynamic_shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "common/status_macros.h"
#include "common/test_util.h"
#include "common/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "partitioners/key_routing.h"
#include "ps/dynamic_test_util.h"
#include "ps/initializers.h"
#include "ps/row_format.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using namespace dynamic_test;  // NOLINT: the tests' helpers

TEST(DynamicShardTest, Create_BadDefinitions_InvalidArgumentNamingTheField) {
  VariableShardDef def = Def();
  def.mutable_dynamic()->set_dim(0);
  EXPECT_THAT(DynamicShard::Create(def, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("\"t\""), HasSubstr("dim"))));
  def = Def();
  def.mutable_dynamic()->set_admit_min_count(300);
  EXPECT_THAT(DynamicShard::Create(def, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("admit_min_count")));
  def = Def();
  def.mutable_dynamic()->set_max_bytes(10);
  EXPECT_THAT(DynamicShard::Create(def, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_bytes")));
  def = Def();
  def.set_dtype(DT_INT64);
  EXPECT_THAT(DynamicShard::Create(def, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("DT_INT64")));
  def = Def();
  def.set_num_rows(5);
  EXPECT_THAT(DynamicShard::Create(def, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_rows")));
}

TEST(DynamicShardTest, TrainingLookup_StoresKeysWithInitialRowsSeededByKey) {
  auto shard = Make(Def());
  const std::vector<int64_t> keys = {5, -7, int64_t{1} << 60, 5};
  std::vector<float> got = Lookup(*shard, keys, /*insert=*/true, /*step=*/1);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(Row(got, i), InitialRow(keys[i])) << i;
  EXPECT_EQ(shard->Size(), 3);
  // The same key in a table split another way starts the same: the row depends on the key alone.
  const int64_t key = 5;
  const int owner = ShardOfKey(key, 3);
  auto other = Make(Def(OptimizerDef::ADAGRAD, /*num_shards=*/3, owner));
  EXPECT_EQ(Lookup(*other, {key}, true, 1), InitialRow(key));
}

// Every occurrence of a key in a training lookup is a sighting, whether the key is stored by that
// lookup (repeats of a new key), held already, or both in one request.
TEST(DynamicShardTest, TrainingLookup_RepeatedKeys_EachOccurrenceCounted) {
  auto shard = Make(Def());
  Lookup(*shard, {9}, /*insert=*/true, /*step=*/1);
  const std::vector<int64_t> keys = {5, 9, 5, 7, 5, 9};
  std::vector<float> got = Lookup(*shard, keys, /*insert=*/true, /*step=*/2);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(Row(got, i), InitialRow(keys[i])) << i;
  std::map<int64_t, uint32_t> counts;
  shard->ForEachRecord(/*since=*/0, [&](const DynamicRecordView& r) { counts[r.key] = r.count; });
  EXPECT_EQ(counts, (std::map<int64_t, uint32_t>{{5, 3}, {7, 1}, {9, 3}}));
  EXPECT_EQ(shard->Stats().admitted(), 3);
}

TEST(DynamicShardTest, EvaluationLookup_NeverInserts_ReadsTheDefault) {
  VariableShardDef def = Def();
  def.mutable_dynamic()->set_default_value(0.25f);
  auto shard = Make(def);
  EXPECT_EQ(Lookup(*shard, {1, 2}, /*insert=*/false, 1), std::vector<float>(2 * kDim, 0.25f));
  EXPECT_EQ(shard->Size(), 0);
  Lookup(*shard, {1}, true, 1);
  std::vector<float> got = Lookup(*shard, {1, 2}, false, 1);
  EXPECT_EQ(Row(got, 0), InitialRow(1));
  EXPECT_EQ(Row(got, 1), std::vector<float>(kDim, 0.25f));
  EXPECT_EQ(shard->Size(), 1);
}

TEST(DynamicShardTest, KeyOfAnotherShard_InvalidArgumentNamingKeyAndShards) {
  auto shard = Make(Def(OptimizerDef::ADAGRAD, /*num_shards=*/2, /*shard_index=*/0));
  int64_t foreign = 0;
  while (ShardOfKey(foreign, 2) == 0) ++foreign;
  EXPECT_THAT(shard->ValidateKeys(Keys({foreign}), "lookup"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("key " + std::to_string(foreign)), HasSubstr("shard 1"),
                             HasSubstr("\"t/part_0\""))));
  EXPECT_THAT(shard->ValidateKeys("1234567", "lookup"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not whole int64s")));
}

// Adagrad on a dynamic key gives exactly what the optimizer gives on a row and its accumulator;
// repeated keys are summed first; keys not held drop their rows.
TEST(DynamicShardTest, ApplyGradient_IsTheOptimizerOnTheRecord_RepeatsSummed_AbsentDropped) {
  auto shard = Make(Def());
  Lookup(*shard, {10, 20}, true, 1);
  const std::vector<float> g = {1, 2, 3, 4, 0.5f, 0.5f, 0.5f, 0.5f, -1, -1, -1, -1,
                                9, 9, 9, 9};
  ASSERT_TRUE(Apply(*shard, UpdateOp::APPLY_GRADIENT, {10, 20, 10, 30}, g, 2).ok());
  auto optimizer = *Optimizer::Create(Def().optimizer());
  std::vector<float> want10 = InitialRow(10), acc10(kDim, 0.1f);
  std::vector<float> sum10 = {0, 1, 2, 3};
  float* slots[1] = {acc10.data()};
  optimizer->ApplyRow(want10.data(), slots, reinterpret_cast<const UnalignedFloat*>(sum10.data()),
                      kDim, optimizer->Prepare(1, 0));
  std::vector<float> got = Lookup(*shard, {10}, false, 2);
  for (int k = 0; k < kDim; ++k) EXPECT_FLOAT_EQ(got[k], want10[k]) << k;
  std::map<int64_t, std::vector<float>> all = ExportAll(*shard, 10, /*with_slots=*/true);
  for (int k = 0; k < kDim; ++k) EXPECT_FLOAT_EQ(all[10][kDim + k], acc10[k]);
  EXPECT_EQ(shard->Size(), 2);  // key 30 was not held: dropped, not stored
  EXPECT_EQ(shard->Stats().dropped_gradients(), 1);
}

TEST(DynamicShardTest, AssignStoresAndErasesRemoves) {
  auto shard = Make(Def());
  ASSERT_TRUE(Apply(*shard, UpdateOp::ASSIGN, {1, 2}, {1, 1, 1, 1, 2, 2, 2, 2}, 1).ok());
  ASSERT_TRUE(Apply(*shard, UpdateOp::ASSIGN_ADD, {2, 2}, {1, 1, 1, 1, 1, 1, 1, 1}, 1).ok());
  std::vector<float> got = Lookup(*shard, {1, 2}, false, 1);
  EXPECT_EQ(Row(got, 0), std::vector<float>(kDim, 1));
  EXPECT_EQ(Row(got, 1), std::vector<float>(kDim, 4));
  ASSERT_TRUE(Apply(*shard, UpdateOp::ERASE, {1, 3}, {}, 1).ok());
  EXPECT_EQ(shard->Size(), 1);
  EXPECT_EQ(shard->Stats().erased(), 1);
  EXPECT_EQ(Lookup(*shard, {1}, false, 1), std::vector<float>(kDim, 0));
}

TEST(DynamicShardTest, ValidateUpdate_WrongWidthOrRange_InvalidArgument) {
  auto shard = Make(Def());
  std::string k, v;
  UpdateOpView op = Op(UpdateOp::APPLY_GRADIENT, {1}, {1, 2, 3}, &k, &v);
  EXPECT_THAT(shard->ValidateUpdate(op),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("wrong width")));
  op = Op(UpdateOp::ERASE, {1}, {1, 2, 3, 4}, &k, &v);
  EXPECT_THAT(shard->ValidateUpdate(op),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ERASE takes no values")));
  op = Op(UpdateOp::ASSIGN, {1}, {1, 2, 3, 4}, &k, &v);
  op.sparse = false;
  EXPECT_THAT(shard->ValidateUpdate(op),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("row range")));
}

// admit_min_count: the key is stored at its N-th sighting; until then the default row, and its
// gradients dropped.
TEST(DynamicShardTest, AdmissionByCount_StoredAtTheNthSighting) {
  VariableShardDef def = Def();
  def.mutable_dynamic()->set_admit_min_count(3);
  auto shard = Make(def);
  EXPECT_EQ(Lookup(*shard, {7}, true, 1), std::vector<float>(kDim, 0));
  ASSERT_TRUE(Apply(*shard, UpdateOp::APPLY_GRADIENT, {7}, {1, 1, 1, 1}, 1).ok());
  EXPECT_EQ(Lookup(*shard, {7}, true, 2), std::vector<float>(kDim, 0));
  EXPECT_EQ(shard->Size(), 0);
  EXPECT_EQ(Lookup(*shard, {7}, true, 3), InitialRow(7));  // the third sighting
  EXPECT_EQ(shard->Size(), 1);
  DynamicShardStats stats = shard->Stats();
  EXPECT_EQ(stats.admitted(), 1);
  EXPECT_EQ(stats.rejected(), 2);
  EXPECT_EQ(stats.dropped_gradients(), 1);
  // Two sightings in one request count twice.
  EXPECT_EQ(Row(Lookup(*shard, {8, 8, 9}, true, 4), 0), std::vector<float>(kDim, 0));
  EXPECT_EQ(Row(Lookup(*shard, {8}, true, 5), 0), InitialRow(8));
}

TEST(DynamicShardTest, AdmissionByProbability_AboutThatShareAndDeterministic) {
  VariableShardDef def = Def();
  def.mutable_dynamic()->set_admit_probability(0.25);
  auto a = Make(def);
  auto b = Make(def);
  std::vector<int64_t> keys(4000);
  for (int i = 0; i < 4000; ++i) keys[i] = i * 7919;
  Lookup(*a, keys, true, 1);
  Lookup(*b, keys, true, 1);
  EXPECT_GT(a->Size(), 850);
  EXPECT_LT(a->Size(), 1150);
  EXPECT_EQ(ExportAll(*a, 1000), ExportAll(*b, 1000));
}

// The sketch is fixed-size: keys that are never admitted don't grow the shard's memory.
TEST(DynamicShardTest, RejectedKeys_TakeNoMemory) {
  VariableShardDef def = Def();
  def.mutable_dynamic()->set_admit_min_count(200);
  def.mutable_dynamic()->set_admission_sketch_bytes(64 << 10);
  auto shard = Make(def);
  const int64_t before = shard->BytesHeld();
  std::vector<int64_t> keys(50000);
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 50000; ++i) keys[i] = round * 50000 + i;
    Lookup(*shard, keys, true, round + 1);
  }
  EXPECT_EQ(shard->Size(), 0);
  EXPECT_EQ(shard->BytesHeld(), before);
  EXPECT_EQ(shard->Stats().rejected(), 200000);
}

// A key untouched for more than ttl_steps steps is gone: not read, not exported, stored afresh by
// a training lookup; touched keys stay.
TEST(DynamicShardTest, Ttl_UntouchedKeysExpireExactly) {
  VariableShardDef def = Def();
  def.mutable_dynamic()->set_ttl_steps(10);
  auto shard = Make(def);
  ASSERT_TRUE(Apply(*shard, UpdateOp::ASSIGN, {1, 2}, std::vector<float>(2 * kDim, 5), 1).ok());
  Lookup(*shard, {2}, true, 6);  // key 2 touched at step 6, key 1 last at 1
  Lookup(*shard, {3}, true, 11);  // step 11: key 1 is 10 steps old, not more: still there
  EXPECT_EQ(Lookup(*shard, {1}, false, 11), std::vector<float>(kDim, 5));
  Lookup(*shard, {3}, true, 12);  // step 12: key 1 is 11 steps old: expired
  EXPECT_EQ(Lookup(*shard, {1}, false, 12), std::vector<float>(kDim, 0));
  EXPECT_EQ(Lookup(*shard, {2}, false, 12), std::vector<float>(kDim, 5));
  std::map<int64_t, std::vector<float>> all = ExportAll(*shard, 100);
  EXPECT_EQ(all.count(1), 0u);
  EXPECT_EQ(all.size(), 2u);
  EXPECT_EQ(shard->Size(), 2);
  Lookup(*shard, {3}, true, 20);  // a sweep has run by now
  EXPECT_GE(shard->Stats().evicted_ttl(), 1);
  EXPECT_EQ(Lookup(*shard, {1}, true, 21), InitialRow(1));  // stored afresh
}

// max_rows: a full shard evicts the least recently used keys (smallest last step, then fewest
// sightings, then smallest key) down to capacity - capacity/16 - new keys.
TEST(DynamicShardTest, Capacity_EvictsLeastRecentlyUsedExactlyAsDocumented) {
  VariableShardDef def = Def();
  def.mutable_dynamic()->set_max_rows(32);
  auto shard = Make(def);
  // Keys 0-7 last seen at step 1, 8-15 at step 2, 16-23 at 3, 24-31 at 4; keys 0 and 1 seen twice;
  // key 9 seen again by a late request of step 1, which must not move its last step back.
  for (int64_t k = 0; k < 32; ++k) Lookup(*shard, {k}, true, k / 8 + 1);
  Lookup(*shard, {0, 1}, true, 1);
  Lookup(*shard, {9}, true, 1);
  EXPECT_EQ(shard->Size(), 32);
  auto expect = [&](std::vector<int64_t> gone, std::vector<int64_t> kept) {
    std::map<int64_t, std::vector<float>> all = ExportAll(*shard, 100);
    for (int64_t k : gone) EXPECT_EQ(all.count(k), 0u) << "key " << k << " should be gone";
    for (int64_t k : kept) EXPECT_EQ(all.count(k), 1u) << "key " << k << " should be kept";
  };
  // One new key: the shard goes to 32 - 2 - 1 = 29 keys, so 3 go, all of step 1: of those, the
  // ones seen once (2-7) before those seen twice (0, 1), and of those the smallest keys.
  Lookup(*shard, {100}, true, 50);
  EXPECT_EQ(shard->Size(), 30);
  expect({2, 3, 4}, {0, 1, 5, 6, 7, 8, 100});
  // Three new keys: to 27 from 30, 3 more go: 5, 6, 7 (step 1, seen once).
  Lookup(*shard, {101, 102, 103}, true, 51);
  expect({5, 6, 7}, {0, 1, 8, 9, 101, 102, 103});
  // Three more: 0 and 1 (step 1, twice), then of step 2 the smallest key seen once: 8. Key 9
  // (step 2, twice) stays: the late request left its step at 2.
  Lookup(*shard, {104, 105, 106}, true, 52);
  expect({0, 1, 8}, {9, 10, 15, 16, 104});
  EXPECT_EQ(shard->Stats().evicted_capacity(), 9);
}

TEST(DynamicShardTest, Capacity_IsSplitOverTheTablesShards) {
  VariableShardDef def = Def(OptimizerDef::SGD, /*num_shards=*/4, /*shard_index=*/0);
  def.mutable_dynamic()->set_max_rows(100);
  EXPECT_EQ(Make(def)->capacity(), 25);
  def.mutable_dynamic()->set_max_rows(0);
  def.mutable_dynamic()->set_max_bytes(4 * 1000 * (24 + 4 * kDim + 16));
  EXPECT_EQ(Make(def)->capacity(), 1000);
}

TEST(DynamicShardTest, MemoryBudget_InsertPastIt_ResourceExhaustedNothingStored) {
  MemoryBudget budget(/*limit_bytes=*/200 << 10);
  auto shard = Make(Def(), &budget);
  std::vector<int64_t> keys(100);
  for (int i = 0; i < 100; ++i) keys[i] = i;
  Lookup(*shard, keys, true, 1);
  EXPECT_EQ(shard->Size(), 100);
  std::vector<int64_t> many(50000);
  for (int i = 0; i < 50000; ++i) many[i] = 1000 + i;
  std::vector<float> out(many.size() * kDim);
  EXPECT_THAT(shard->Lookup(Keys(many), true, At(2), reinterpret_cast<char*>(out.data()), nullptr),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("\"t\""), HasSubstr("memory budget"))));
  EXPECT_EQ(shard->Size(), 100);
  EXPECT_LE(budget.used(), budget.limit());
  // The failed request gave back the room it had promised itself in the stripes it got to: keys
  // that fit in the memory held still go in.
  std::vector<int64_t> few(100);
  for (int i = 0; i < 100; ++i) few[i] = 200 + i;
  Lookup(*shard, few, true, 3);
  EXPECT_EQ(shard->Size(), 200);
  shard.reset();
  EXPECT_EQ(budget.used(), 0);
}

// The export walks chunk by chunk: every key exactly once, whatever the chunk size.
// A training lookup reserves room in each stripe its new keys go to, in stripe order, before it
// stores any; when a later stripe can't have its room, the room promised in the earlier ones is
// given back (else it would be held for keys that never come, and refuse others).
TEST(DynamicShardTest, MemoryBudget_LaterStripeFails_EarlierStripesPromisesGivenBack) {
  MemoryBudget budget(/*limit_bytes=*/1 << 20);
  auto shard = Make(Def(), &budget);  // 4 floats with Adagrad: 56-byte records
  auto keys_of_stripe = [](int stripe, int64_t from, int count) {
    std::vector<int64_t> keys;
    for (int64_t k = from; static_cast<int>(keys.size()) < count; ++k) {
      if (DynamicShard::StripeOfKey(k) == stripe) keys.push_back(k);
    }
    return keys;
  };
  std::vector<int64_t> request = keys_of_stripe(/*stripe=*/0, 0, 6000);      // ~340 KB: fits
  const std::vector<int64_t> too_many = keys_of_stripe(/*stripe=*/7, 0, 40000);  // ~2.2 MB
  request.insert(request.end(), too_many.begin(), too_many.end());
  std::vector<float> out(request.size() * kDim);
  EXPECT_THAT(
      shard->Lookup(Keys(request), true, At(1), reinterpret_cast<char*>(out.data()), nullptr),
      StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("memory budget")));
  EXPECT_EQ(shard->Size(), 0);
  // Stripe 0's room (kept, as memory a stripe reserved is) now takes as many other keys.
  const std::vector<int64_t> others = keys_of_stripe(/*stripe=*/0, 1 << 30, 6000);
  Lookup(*shard, others, true, 2);
  EXPECT_EQ(shard->Size(), 6000);
}

TEST(DynamicShardTest, Export_EveryKeyOnceInChunks) {
  auto shard = Make(Def());
  std::vector<int64_t> keys(5000);
  for (int i = 0; i < 5000; ++i) keys[i] = i * 31 - 7000;
  Lookup(*shard, keys, true, 1);
  ASSERT_TRUE(Apply(*shard, UpdateOp::ERASE, {keys[0], keys[1]}, {}, 1).ok());
  for (int64_t chunk : {1, 7, 1000, 100000}) {
    std::map<int64_t, std::vector<float>> all = ExportAll(*shard, chunk);
    ASSERT_EQ(all.size(), 4998u) << chunk;
    EXPECT_EQ(all.at(keys[2]), InitialRow(keys[2]));
  }
  ExportResponse r;
  EXPECT_THAT(shard->Export("bad", 10, false, &r),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cursor")));
}

// Incremental saves see the keys changed after a generation, and the keys erased after it.
TEST(DynamicShardTest, ChangesSinceAGeneration_RecordsAndErasures) {
  auto shard = Make(Def());
  DynamicOpContext ctx = At(1);
  ctx.generation = 1;
  ctx.track_erasures = true;
  std::vector<float> out(3 * kDim);
  ASSERT_TRUE(shard->Lookup(Keys({1, 2, 3}), true, ctx, reinterpret_cast<char*>(out.data()), nullptr).ok());
  ctx.generation = 2;
  ASSERT_TRUE(shard->Lookup(Keys({2}), true, ctx, reinterpret_cast<char*>(out.data()), nullptr).ok());
  std::string k, v;
  UpdateOpView erase = Op(UpdateOp::ERASE, {3}, {}, &k, &v);
  ASSERT_TRUE(shard->Update(erase, ctx, nullptr).ok());
  std::set<int64_t> changed;
  shard->ForEachRecord(1, [&](const DynamicRecordView& r) { changed.insert(r.key); });
  EXPECT_EQ(changed, std::set<int64_t>({2}));
  EXPECT_EQ(shard->ErasedSince(1), std::vector<int64_t>({3}));
  EXPECT_TRUE(shard->ErasedSince(2).empty());
  shard->ForgetErasuresThrough(2);
  EXPECT_TRUE(shard->ErasedSince(0).empty());
}

// Many threads looking up (inserting), pushing and erasing at once: no key is ever seen with a
// row that is not its own (each assign writes the key into every float), and the counts add up.
TEST(DynamicShardTest, ConcurrentInsertsUpdatesAndErases_StayConsistent) {
  VariableShardDef def = Def(OptimizerDef::SGD);
  def.mutable_dynamic()->set_max_rows(3000);
  def.mutable_initializer()->set_kind(InitializerDef::ZEROS);
  auto shard = Make(def);
  ThreadPool pool(2);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int round = 0; round < 300; ++round) {
        std::vector<int64_t> keys(64);
        for (int64_t& k : keys) k = static_cast<int64_t>(rng() % 5000) + 1;
        std::vector<float> values(keys.size() * kDim);
        for (size_t i = 0; i < keys.size(); ++i) {
          std::fill(values.begin() + i * kDim, values.begin() + (i + 1) * kDim,
                    static_cast<float>(keys[i]));
        }
        const int64_t step = round + 1;
        if (round % 3 == 0) {
          if (!Apply(*shard, UpdateOp::ASSIGN, keys, values, step).ok()) bad++;
        } else if (round % 3 == 1) {
          std::vector<float> out(keys.size() * kDim);
          if (!shard->Lookup(Keys(keys), true, At(step), reinterpret_cast<char*>(out.data()), &pool).ok()) bad++;
          for (size_t i = 0; i < keys.size(); ++i) {
            const float f = out[i * kDim];
            if (f != 0 && f != static_cast<float>(keys[i])) bad++;
          }
        } else {
          std::vector<int64_t> some(keys.begin(), keys.begin() + 8);
          if (!Apply(*shard, UpdateOp::ERASE, some, {}, step).ok()) bad++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(shard->Size(), 3000);
  std::map<int64_t, std::vector<float>> all = ExportAll(*shard, 500);
  EXPECT_EQ(static_cast<int64_t>(all.size()), shard->Size());
  for (const auto& [key, row] : all) {
    for (float f : row) ASSERT_TRUE(f == 0 || f == static_cast<float>(key)) << key;
  }
}

// A lookup big enough to be split over the pool: every present key reads its own row, never the
// default (the pieces, on different threads, record which keys they found side by side).
// Training lookups side by side with no admission and no capacity store their new keys under
// each stripe's lock alone: every key ends up stored once, with its initial row, and every
// occurrence in every request counted.
TEST(DynamicShardTest, ConcurrentTrainingLookups_EachKeyStoredOnceEverySightingCounted) {
  auto shard = Make(Def());
  ThreadPool pool(2);
  std::vector<std::thread> threads;
  std::vector<std::map<int64_t, uint32_t>> seen(4);
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      for (int round = 0; round < 40; ++round) {
        std::vector<int64_t> keys(round % 2 == 0 ? 6000 : 100);  // the pool's pieces, and not
        for (int64_t& k : keys) k = static_cast<int64_t>(rng() % 20000) * 31 + 7;
        std::vector<float> out(keys.size() * kDim);
        if (!shard->Lookup(Keys(keys), true, At(round + 1), reinterpret_cast<char*>(out.data()),
                           &pool).ok()) {
          bad++;
        }
        for (size_t i = 0; i < keys.size(); ++i) {
          ++seen[t][keys[i]];
          if (Row(out, i) != InitialRow(keys[i])) bad++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  std::map<int64_t, uint32_t> expected;
  for (const auto& m : seen) {
    for (const auto& [key, n] : m) expected[key] += n;
  }
  std::map<int64_t, uint32_t> counts;
  shard->ForEachRecord(/*since=*/0, [&](const DynamicRecordView& r) {
    EXPECT_TRUE(counts.emplace(r.key, r.count).second) << "key " << r.key << " stored twice";
  });
  EXPECT_EQ(counts, expected);
  EXPECT_EQ(shard->Size(), static_cast<int64_t>(expected.size()));
  EXPECT_EQ(shard->Stats().admitted(), static_cast<int64_t>(expected.size()));
}

TEST(DynamicShardTest, LookupSplitOverThePool_EveryPresentKeyReadsItsRow) {
  auto shard = Make(Def());
  ThreadPool pool(3);
  std::vector<int64_t> keys(40000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i) * 17 + 3;
  std::vector<float> rows(keys.size() * kDim);
  ASSERT_TRUE(shard->Lookup(Keys(keys), true, At(1), reinterpret_cast<char*>(rows.data()), &pool).ok());
  for (int round = 0; round < 20; ++round) {
    std::vector<float> again(keys.size() * kDim, -1);
    ASSERT_TRUE(shard->Lookup(Keys(keys), /*insert=*/false, At(2),
                              reinterpret_cast<char*>(again.data()), &pool).ok());
    ASSERT_EQ(again, rows) << "round " << round;
  }
}

// A request's keys are probed ahead of their turn (DynamicShard::Walk); erasing expired keys
// shifts index entries back and inserting fills empty ones while the request runs. Every key must
// still be found where it is: the live ones read their rows, the expired ones are stored afresh.
TEST(DynamicShardTest, ExpiredKeysErasedAndStoredMidRequest_EveryOtherKeyStillFound) {
  VariableShardDef def = Def();
  def.mutable_dynamic()->set_ttl_steps(80);  // sweeps at most every 10 steps
  auto shard = Make(def);
  std::vector<int64_t> keys(6000);
  std::vector<float> values(keys.size() * kDim);
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i] = static_cast<int64_t>(i) * 7919 + 1;
    for (int64_t d = 0; d < kDim; ++d) values[i * kDim + d] = static_cast<float>(i) + 0.25f * d;
  }
  ASSERT_TRUE(Apply(*shard, UpdateOp::ASSIGN, keys, values, /*step=*/1).ok());
  std::vector<int64_t> kept;
  for (size_t i = 0; i < keys.size(); i += 2) kept.push_back(keys[i]);
  Lookup(*shard, kept, /*insert=*/true, /*step=*/50);
  // A sweep (nothing has expired yet); the next is due at step 90.
  Lookup(*shard, {-5}, /*insert=*/true, /*step=*/80);
  // Step 85: the odd positions' keys (last step 1) have expired and no sweep has taken them: the
  // request itself finds them expired, erases them and stores them afresh.
  const std::vector<float> rows = Lookup(*shard, keys, /*insert=*/true, /*step=*/85);
  EXPECT_EQ(shard->Stats().evicted_ttl(), static_cast<int64_t>(keys.size() / 2));
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::vector<float> expected = i % 2 == 0 ? Row(values, i) : InitialRow(keys[i]);
    ASSERT_EQ(Row(rows, i), expected) << "key " << keys[i] << " at position " << i;
  }
  EXPECT_EQ(shard->Size(), static_cast<int64_t>(keys.size()) + 1);
  EXPECT_EQ(Lookup(*shard, keys, /*insert=*/false, /*step=*/85), rows);
}

// An assign stores every key it names, erasing and storing afresh the expired ones it meets in the
// same walk as the new ones: an erase shifts index entries back, so a new key's empty position
// found ahead of its turn may no longer be where its probe ends. Every key must be found after.
TEST(DynamicShardTest, AssignOverExpiredAndNewKeys_EveryKeyFoundAfter) {
  VariableShardDef def = Def();
  def.mutable_dynamic()->set_ttl_steps(80);  // sweeps at most every 10 steps
  auto shard = Make(def);
  std::vector<int64_t> old_keys(6000), keys;
  for (size_t i = 0; i < old_keys.size(); ++i) old_keys[i] = static_cast<int64_t>(i) * 7919 + 1;
  ASSERT_TRUE(Apply(*shard, UpdateOp::ASSIGN, old_keys,
                    std::vector<float>(old_keys.size() * kDim, 1), /*step=*/1).ok());
  std::vector<int64_t> kept;
  for (size_t i = 0; i < old_keys.size(); i += 2) kept.push_back(old_keys[i]);
  Lookup(*shard, kept, /*insert=*/true, /*step=*/50);
  // A sweep (nothing has expired yet); the next is due at step 90.
  Lookup(*shard, {-5}, /*insert=*/true, /*step=*/80);
  // Step 85: the odd positions' keys have expired, unswept; new keys interleaved with them.
  for (size_t i = 0; i < old_keys.size(); ++i) {
    keys.push_back(old_keys[i]);
    keys.push_back(-static_cast<int64_t>(i) * 104729 - 3);
  }
  std::vector<float> values(keys.size() * kDim);
  for (size_t i = 0; i < keys.size(); ++i) {
    for (int64_t d = 0; d < kDim; ++d) values[i * kDim + d] = static_cast<float>(i) + 0.5f;
  }
  ASSERT_TRUE(Apply(*shard, UpdateOp::ASSIGN, keys, values, /*step=*/85).ok());
  EXPECT_EQ(Lookup(*shard, keys, /*insert=*/false, /*step=*/85), values);
  EXPECT_EQ(shard->Size(), static_cast<int64_t>(keys.size()) + 1);
}

// At steady state a key costs at most 1.5x its row and slots (16 floats + Adagrad's accumulator:
// 128 bytes): a 160-byte record (152 padded to keep header and row on two lines) plus 8-16 bytes
// of index and the last block's unused part.
TEST(DynamicShardTest, BytesPerKey_AtMostOneAndAHalfRowAndSlots) {
  VariableShardDef def = Def();
  def.clear_full_shape();
  def.add_full_shape(16);
  def.mutable_dynamic()->set_dim(16);
  auto shard = Make(def);
  std::vector<int64_t> keys(16384);
  int64_t next = 0;
  std::vector<float> out(keys.size() * 16);
  for (int round = 0; round < 64; ++round) {  // 1M keys: the blocks' unused tail is small
    for (int64_t& k : keys) k = next++;
    ASSERT_TRUE(shard->Lookup(Keys(keys), true, At(round + 1), reinterpret_cast<char*>(out.data()), nullptr).ok());
  }
  const double per_key = static_cast<double>(shard->BytesHeld()) / shard->Size();
  EXPECT_LE(per_key, 1.5 * 128) << per_key;
}

// ---- Stored formats (ps/row_format.h).

VariableShardDef Stored(RowFormat rows, RowFormat slots = ROW_FLOAT32) {
  VariableShardDef def = Def();
  def.mutable_dynamic()->set_row_format(rows);
  def.mutable_dynamic()->set_slot_format(slots);
  return def;
}

TEST(DynamicShardTest, Create_Int8Slots_InvalidArgument) {
  EXPECT_THAT(DynamicShard::Create(Stored(ROW_FLOAT16, ROW_INT8), nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("slot_format")));
}

// Bytes per key of a width-16 Adagrad table in each format, as the records lay them out.
TEST(DynamicShardTest, StoredFormats_RecordsShrinkByTheirRows) {
  auto bytes = [](RowFormat rows, RowFormat slots) {
    VariableShardDef def = Stored(rows, slots);
    def.clear_full_shape();
    def.add_full_shape(16);
    def.mutable_dynamic()->set_dim(16);
    return Make(def)->record_bytes();
  };
  // Header, row and slot (padded where it keeps a lookup's header and row on fewer cache lines).
  EXPECT_EQ(bytes(ROW_FLOAT32, ROW_FLOAT32), 160);   // 24 + 64 + 64 (+ 8)
  EXPECT_EQ(bytes(ROW_FLOAT16, ROW_FLOAT32), 128);   // 24 + 32 + 64 (+ 8)
  EXPECT_EQ(bytes(ROW_BFLOAT16, ROW_BFLOAT16), 96);  // 24 + 32 + 32 (+ 8)
  EXPECT_EQ(bytes(ROW_INT8, ROW_BFLOAT16), 80);      // 24 + 24 + 32
}

// The same stream of lookups and gradients on a table in each format and one in float32: every
// lookup reads the stored row exactly as float32 (the stored export, decoded), and the rows stay
// within a few of the format's steps of float32's (stochastic rounding is unbiased: the errors
// don't pile up over 300 updates).
TEST(DynamicShardTest, StoredFormats_TrackTheFloat32Table) {
  struct Case {
    RowFormat rows, slots;
    float tolerance;  // largest |difference| from the float32 table's rows, which are in [-1, 1]
  };
  for (const Case& c : {Case{ROW_FLOAT16, ROW_FLOAT32, 0.01f}, Case{ROW_BFLOAT16, ROW_BFLOAT16, 0.08f},
                        Case{ROW_INT8, ROW_FLOAT16, 0.1f}}) {
    SCOPED_TRACE(RowFormatName(c.rows));
    std::unique_ptr<DynamicShard> reference = Make(Def());
    std::unique_ptr<DynamicShard> stored = Make(Stored(c.rows, c.slots));
    std::mt19937 rng(9);
    std::normal_distribution<float> normal(0, 0.3f);
    std::vector<int64_t> keys(40);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i) * 101;
    for (int64_t step = 1; step <= 300; ++step) {
      Lookup(*reference, keys, /*insert=*/true, step);
      Lookup(*stored, keys, /*insert=*/true, step);
      std::vector<float> grads(keys.size() * kDim);
      for (float& g : grads) g = normal(rng);
      ASSERT_TRUE(Apply(*reference, UpdateOp::APPLY_GRADIENT, keys, grads, step).ok());
      ASSERT_TRUE(Apply(*stored, UpdateOp::APPLY_GRADIENT, keys, grads, step).ok());
    }
    const std::vector<float> want = Lookup(*reference, keys, /*insert=*/false, 301);
    const std::vector<float> got = Lookup(*stored, keys, /*insert=*/false, 301);
    float worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    EXPECT_LE(worst, c.tolerance);
    EXPECT_GT(worst, 0.0f);  // it is stored in fewer bits
    // A lookup reads exactly the stored row.
    const std::map<int64_t, std::string> rows = ExportStored(*stored, /*chunk=*/1000);
    for (size_t i = 0; i < keys.size(); ++i) {
      std::vector<float> decoded(kDim);
      DecodeRow(c.rows, rows.at(keys[i]).data(), kDim, decoded.data());
      EXPECT_EQ(decoded, Row(got, i)) << "key " << keys[i];
    }
  }
}

// A checkpoint holds float32 records: restored into a table of the same format they are the same
// stored bytes; into a float32 table, the same values.
TEST(DynamicShardTest, StoredFormats_RecordsRestoreExactly) {
  for (RowFormat format : {ROW_FLOAT16, ROW_BFLOAT16, ROW_INT8}) {
    SCOPED_TRACE(RowFormatName(format));
    std::unique_ptr<DynamicShard> stored = Make(Stored(format, ROW_BFLOAT16));
    std::vector<int64_t> keys(100);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i) * 7 + 1;
    std::mt19937 rng(4);
    std::normal_distribution<float> normal(0, 1);
    for (int64_t step = 1; step <= 20; ++step) {
      Lookup(*stored, keys, /*insert=*/true, step);
      std::vector<float> grads(keys.size() * kDim);
      for (float& g : grads) g = normal(rng);
      ASSERT_TRUE(Apply(*stored, UpdateOp::APPLY_GRADIENT, keys, grads, step).ok());
    }
    std::vector<DynamicRecord> saved;
    ASSERT_TRUE(stored
                    ->ForEachRecord(0,
                                    [&](const DynamicRecordView& v) {
                                      DynamicRecord r{v.key, v.step, v.count, {}};
                                      r.data.resize(stored->record_floats());
                                      stored->DecodeRecord(v.data, r.data.data());
                                      saved.push_back(r);
                                    })
                    .ok());
    std::unique_ptr<DynamicShard> same = Make(Stored(format, ROW_BFLOAT16));
    std::unique_ptr<DynamicShard> wide = Make(Def());
    for (const DynamicRecord& r : saved) {
      ASSERT_TRUE(same->PutRecord(r).ok());
      ASSERT_TRUE(wide->PutRecord(r).ok());
    }
    EXPECT_EQ(ExportStored(*same, 1000), ExportStored(*stored, 1000));
    EXPECT_EQ(ExportAll(*same, 1000, /*with_slots=*/true),
              ExportAll(*stored, 1000, /*with_slots=*/true));
    EXPECT_EQ(ExportAll(*wide, 1000, /*with_slots=*/true),
              ExportAll(*stored, 1000, /*with_slots=*/true));
  }
}

}  // namespace
}  // namespace pstrain
