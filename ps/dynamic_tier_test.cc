// A dynamic table shard with a disk tier (ps/dynamic_shard.h, ps/disk_tier.h): the same table as
// one held all in RAM, whatever moves to disk; the memory budget; the disk's budget, a write the
// disk refuses, a corrupt tier file; checkpoints read both tiers.
#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "partitioners/key_routing.h"
#include "ps/dynamic_shard.h"
#include "ps/dynamic_test_util.h"
#include "ps/shard_checkpoint.h"

namespace pstrain {
namespace {

using namespace dynamic_test;  // NOLINT: the tests' helpers
using ::testing::AllOf;
using ::testing::HasSubstr;

// A ps's disk store in `dir` (its buffers sized to `budget`, and reserved there).
std::shared_ptr<DiskStore> Store(const std::string& dir, MemoryBudget* budget = nullptr) {
  DiskStoreOptions options;
  options.dir = dir;
  absl::StatusOr<std::shared_ptr<DiskStore>> store =
      DiskStore::Open(options.ForBudget(budget == nullptr ? 0 : budget->limit()), budget);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *store : nullptr;
}

// A table whose RAM holds `ram_rows` keys, the rest on disk.
VariableShardDef TieredDef(int64_t ram_rows, int num_shards = 1, int shard_index = 0) {
  VariableShardDef def = Def(OptimizerDef::ADAGRAD, num_shards, shard_index);
  def.mutable_dynamic()->set_max_rows(ram_rows * num_shards);
  def.mutable_dynamic()->set_disk_tier(true);
  return def;
}

struct Saved {
  int64_t step;
  uint32_t count;
  std::vector<float> data;
  bool operator==(const Saved& o) const {
    return step == o.step && count == o.count && data == o.data;
  }
};

std::map<int64_t, Saved> Records(const DynamicShard& shard) {
  std::map<int64_t, Saved> out;
  absl::Status s = shard.ForEachRecord(/*since=*/0, [&](const DynamicRecordView& v) {
    std::vector<float> floats(static_cast<size_t>(shard.record_floats()));
    shard.DecodeRecord(v.data, floats.data());
    out[v.key] = {v.step, v.count, floats};
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> keys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) keys[i] = i * 7919 + 3;
  return keys;
}

// The differential test: one stream of training and evaluation lookups (with repeats), gradients,
// assigns, assign-adds and erasures, run on an all-in-RAM shard and on one whose RAM holds 48
// keys of ~300; every lookup reads the same rows, and the tables end equal (records with their
// steps, counts, rows and slots; exports).
// With stored formats (rows and slots in fewer bits), both tables store the same bytes: the tier
// moves a record as it is stored, and stochastic rounding depends on the op and the key alone.
void RunDifferential(int64_t ttl_steps, int32_t admit_min_count, uint32_t seed,
                     RowFormat row_format = ROW_FLOAT32, RowFormat slot_format = ROW_FLOAT32) {
  SCOPED_TRACE(testing::Message() << "ttl " << ttl_steps << ", admission " << admit_min_count
                                  << ", seed " << seed << ", rows " << RowFormatName(row_format)
                                  << ", slots " << RowFormatName(slot_format));
  VariableShardDef plain_def = Def();
  plain_def.mutable_dynamic()->set_ttl_steps(ttl_steps);
  plain_def.mutable_dynamic()->set_admit_min_count(admit_min_count);
  plain_def.mutable_dynamic()->set_row_format(row_format);
  plain_def.mutable_dynamic()->set_slot_format(slot_format);
  VariableShardDef tiered_def = plain_def;
  tiered_def.mutable_dynamic()->set_max_rows(48);
  tiered_def.mutable_dynamic()->set_disk_tier(true);
  const std::string dir = FreshTempDir("differential");
  std::unique_ptr<DynamicShard> plain = Make(plain_def);
  std::unique_ptr<DynamicShard> tiered = Make(tiered_def, nullptr, Store(dir));
  ASSERT_NE(tiered, nullptr);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> key_of(0, 299);
  std::normal_distribution<float> normal(0, 1);
  for (int64_t step = 1; step <= 400; ++step) {
    std::vector<int64_t> keys(1 + rng() % 40);
    for (int64_t& k : keys) k = key_of(rng) * 1000003;
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 4 || kind == 9) {  // training (or evaluation) lookup
      const bool insert = kind != 9;
      EXPECT_EQ(Lookup(*tiered, keys, insert, step), Lookup(*plain, keys, insert, step))
          << "step " << step;
    } else if (kind < 7) {  // gradients
      std::vector<float> grads(keys.size() * kDim);
      for (float& g : grads) g = normal(rng);
      ASSERT_TRUE(Apply(*plain, UpdateOp::APPLY_GRADIENT, keys, grads, step).ok());
      ASSERT_TRUE(Apply(*tiered, UpdateOp::APPLY_GRADIENT, keys, grads, step).ok());
    } else if (kind == 7) {  // assign or assign-add
      std::vector<float> values(keys.size() * kDim);
      for (float& v : values) v = normal(rng);
      const UpdateOp::Kind op = rng() % 2 == 0 ? UpdateOp::ASSIGN : UpdateOp::ASSIGN_ADD;
      ASSERT_TRUE(Apply(*plain, op, keys, values, step).ok());
      ASSERT_TRUE(Apply(*tiered, op, keys, values, step).ok());
    } else {  // erase a few
      keys.resize(std::min<size_t>(keys.size(), 3));
      ASSERT_TRUE(Apply(*plain, UpdateOp::ERASE, keys, {}, step).ok());
      ASSERT_TRUE(Apply(*tiered, UpdateOp::ERASE, keys, {}, step).ok());
    }
  }
  EXPECT_EQ(Records(*tiered), Records(*plain));
  EXPECT_EQ(ExportAll(*tiered, /*chunk=*/7, /*with_slots=*/true),
            ExportAll(*plain, /*chunk=*/1000, /*with_slots=*/true));
  if (ttl_steps == 0) {
    EXPECT_EQ(tiered->Size(), plain->Size());
  }
  const DynamicShardStats stats = tiered->Stats();
  // The stream did go through the disk: otherwise this test would prove nothing.
  EXPECT_GT(stats.disk_keys(), 100);
  EXPECT_LE(stats.ram_keys(), 48 + 40);
  EXPECT_GT(stats.moved_to_ram(), 100);
  EXPECT_GT(stats.moved_to_disk(), 100);
  EXPECT_GT(stats.disk_hits(), 100);
  EXPECT_GT(stats.disk_bytes_written(), 0);
  EXPECT_EQ(stats.disk_bytes(),
            stats.disk_keys() * (DynamicShard::kHeaderBytes + tiered->record_data_bytes()));
  if (row_format != ROW_FLOAT32) {
    EXPECT_LT(tiered->record_data_bytes(), tiered->record_floats() * 4);
    // The stored rows, exported as they are: the same bytes.
    EXPECT_EQ(ExportStored(*tiered, /*chunk=*/7), ExportStored(*plain, /*chunk=*/1000));
  }
}

TEST(DynamicTierTest, Differential_SameTableAsAllInRam) { RunDifferential(0, 0, 1); }
TEST(DynamicTierTest, Differential_WithAdmission_SameTableAsAllInRam) { RunDifferential(0, 2, 2); }
TEST(DynamicTierTest, Differential_WithTtl_SameTableAsAllInRam) { RunDifferential(25, 0, 3); }
TEST(DynamicTierTest, Differential_WithTtlAndAdmission_SameTableAsAllInRam) {
  RunDifferential(40, 3, 4);
}
TEST(DynamicTierTest, Differential_Float16RowsBfloat16Slots_SameTableAsAllInRam) {
  RunDifferential(0, 0, 5, ROW_FLOAT16, ROW_BFLOAT16);
}
TEST(DynamicTierTest, Differential_Int8RowsWithTtlAndAdmission_SameTableAsAllInRam) {
  RunDifferential(30, 2, 6, ROW_INT8, ROW_FLOAT16);
}

TEST(DynamicTierTest, Create_WithoutAStore_InvalidArgument) {
  EXPECT_THAT(DynamicShard::Create(TieredDef(10), nullptr, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no disk store")));
}

TEST(DynamicTierTest, MemoryBudget_RowsPastItMoveToDiskAndTheBudgetHolds) {
  VariableShardDef def = Def();
  def.mutable_dynamic()->set_disk_tier(true);
  // 4 MiB (the store's buffers take a quarter) against 400,000 keys of 56-byte records (22 MB, and
  // the index): about an eighth in RAM.
  MemoryBudget budget((int64_t{4} << 20));
  std::unique_ptr<DynamicShard> tiered = Make(def, &budget, Store(FreshTempDir("budget"), &budget));
  ASSERT_NE(tiered, nullptr);
  const std::vector<int64_t> keys = Range(400000);
  std::vector<std::vector<float>> rows;
  const int64_t resident_before = ProcStatusBytes("VmRSS");
  int64_t most_used = 0;
  for (size_t at = 0; at < keys.size(); at += 4000) {
    const std::vector<int64_t> batch(keys.begin() + at, keys.begin() + at + 4000);
    rows.push_back(Lookup(*tiered, batch, /*insert=*/true, static_cast<int64_t>(at / 4000) + 1));
    most_used = std::max(most_used, budget.used());
  }
  // Measured, not only counted: the process grew by the budget and RocksDB's own working memory
  // (table readers, compaction), far less than the table (plus the rows this test keeps).
  const int64_t grown = ProcStatusBytes("VmRSS") - resident_before - 400000 * kDim * 4;
  std::printf("resident memory grew %.1f MiB beside the rows kept (budget 4 MiB, table %.1f MiB)\n",
              grown / 1048576.0, 400000 * 56 / 1048576.0);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // (A sanitizer's quarantine and shadow memory make the process's size say nothing of ours.)
  EXPECT_LE(grown, budget.limit() + (int64_t{8} << 20));
#endif
  EXPECT_LE(most_used, budget.limit());
  const DynamicShardStats stats = tiered->Stats();
  EXPECT_EQ(stats.keys(), 400000);
  EXPECT_GT(stats.disk_keys(), 300000);
  // The same rows as a table all in RAM, and the same reads afterwards.
  std::unique_ptr<DynamicShard> plain = Make(Def());
  for (size_t at = 0, i = 0; at < keys.size(); at += 4000, ++i) {
    const std::vector<int64_t> batch(keys.begin() + at, keys.begin() + at + 4000);
    EXPECT_EQ(rows[i], Lookup(*plain, batch, /*insert=*/true, static_cast<int64_t>(i) + 1));
  }
  EXPECT_EQ(Lookup(*tiered, keys, /*insert=*/false, 200), Lookup(*plain, keys, false, 200));
}

TEST(DynamicTierTest, DiskBudget_PastIt_ResourceExhaustedNamingTheTableNothingLost) {
  VariableShardDef def = TieredDef(/*ram_rows=*/100);
  const int64_t record = DynamicShard::kHeaderBytes + kDim * 2 * 4;
  def.mutable_dynamic()->set_disk_max_bytes(300 * record);
  std::unique_ptr<DynamicShard> tiered = Make(def, nullptr, Store(FreshTempDir("disk_budget")));
  std::unique_ptr<DynamicShard> plain = Make(Def());
  const std::vector<int64_t> keys = Range(1000);
  std::vector<int64_t> held;
  absl::Status failed;
  for (size_t at = 0; at < keys.size() && failed.ok(); at += 50) {
    const std::vector<int64_t> batch(keys.begin() + at, keys.begin() + at + 50);
    std::vector<float> out(batch.size() * kDim);
    failed = tiered->Lookup(Keys(batch), /*insert=*/true, At(1),
                            reinterpret_cast<char*>(out.data()), nullptr);
    if (failed.ok()) {
      held.insert(held.end(), batch.begin(), batch.end());
      Lookup(*plain, batch, /*insert=*/true, 1);
    }
  }
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kResourceExhausted,
                               AllOf(HasSubstr("\"t\""), HasSubstr("disk budget of"),
                                     HasSubstr(std::to_string(300 * record)))));
  EXPECT_LE(tiered->Stats().disk_bytes(), 300 * record);
  // Every key stored before the refusal reads as it was.
  EXPECT_EQ(Lookup(*tiered, held, /*insert=*/false, 2), Lookup(*plain, held, false, 2));
  EXPECT_EQ(tiered->Size(), static_cast<int64_t>(held.size()));
}

// Fills a tiered shard whose RAM holds 64 keys with 20,000, and the same in RAM alone.
void Fill(DynamicShard& tiered, DynamicShard& plain, const std::vector<int64_t>& keys) {
  for (size_t at = 0; at < keys.size(); at += 1000) {
    const std::vector<int64_t> batch(keys.begin() + at,
                                     keys.begin() + std::min(keys.size(), at + 1000));
    Lookup(tiered, batch, /*insert=*/true, 1);
    Lookup(plain, batch, /*insert=*/true, 1);
  }
}

TEST(DynamicTierTest, DiskRefusesAWrite_ResourceExhaustedNothingLost) {
  std::unique_ptr<DynamicShard> tiered = Make(TieredDef(64), nullptr, Store(FreshTempDir("full")));
  std::unique_ptr<DynamicShard> plain = Make(Def());
  const std::vector<int64_t> keys = Range(20000);
  Fill(*tiered, *plain, keys);
  // A disk that refuses to grow any file past 64 KiB (as a full disk refuses every write): the
  // next flush of the tier's memtable (~1 MiB of rows) fails.
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::Status flushed = tiered->disk_tier()->Flush();
  // Moving more rows to disk is refused too, and changes nothing.
  const std::vector<int64_t> more = Range(21000);
  std::vector<float> out(1000 * kDim);
  absl::Status moved =
      tiered->Lookup(Keys(std::vector<int64_t>(more.begin() + 20000, more.end())), /*insert=*/true,
                     At(2), reinterpret_cast<char*>(out.data()), nullptr);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
  EXPECT_THAT(flushed, StatusIs(absl::StatusCode::kResourceExhausted,
                                HasSubstr(tiered->disk_tier()->dir())));
  EXPECT_THAT(moved, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("\"t\"")));
  EXPECT_EQ(Lookup(*tiered, keys, /*insert=*/false, 3), Lookup(*plain, keys, false, 3));
  EXPECT_EQ(tiered->Size(), 20000);
}

TEST(DynamicTierTest, CorruptTierFile_DataLossNamingIt) {
  std::unique_ptr<DynamicShard> tiered = Make(TieredDef(64), nullptr, Store(FreshTempDir("corrupt")));
  std::unique_ptr<DynamicShard> plain = Make(Def());
  const std::vector<int64_t> keys = Range(20000);
  Fill(*tiered, *plain, keys);
  ASSERT_TRUE(tiered->disk_tier()->Flush().ok());
  std::string sst;
  for (const auto& entry : std::filesystem::directory_iterator(tiered->disk_tier()->dir())) {
    if (entry.path().extension() == ".sst") sst = entry.path().string();
  }
  ASSERT_FALSE(sst.empty());
  {
    // Every data block from 4 KiB to a third of the file: flipped bits.
    std::fstream f(sst, std::ios::in | std::ios::out | std::ios::binary);
    const int64_t size = static_cast<int64_t>(std::filesystem::file_size(sst));
    for (int64_t at = 4096; at < size / 3; at += 512) {
      f.seekp(at);
      f.put('\x5a');
    }
  }
  std::vector<float> out(keys.size() * kDim);
  EXPECT_THAT(tiered->Lookup(Keys(keys), /*insert=*/false, At(2),
                             reinterpret_cast<char*>(out.data()), nullptr),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("\"t\""), HasSubstr(".sst"))));
}

TEST(DynamicTierTest, Checkpoint_ReadsBothTiers_RestoresIntoOtherShardCounts) {
  // A table of two shards whose RAM holds 64 keys each, saved; restored into three shards all in
  // RAM, and into one tiered shard: the same records.
  const std::string dir = FreshTempDir("checkpoint");
  std::vector<std::shared_ptr<DynamicShard>> tiered;
  // Both shards in one ps's store, as a ps holds them.
  std::shared_ptr<DiskStore> store = Store(dir + "/ps");
  for (int i = 0; i < 2; ++i) tiered.push_back(Make(TieredDef(64, 2, i), nullptr, store));
  std::unique_ptr<DynamicShard> plain = Make(Def());
  const std::vector<int64_t> keys = Range(5000);
  std::map<int64_t, Saved> expected;
  for (size_t at = 0; at < keys.size(); at += 500) {
    std::vector<int64_t> batch[2];
    for (size_t k = at; k < at + 500; ++k) batch[ShardOfKey(keys[k], 2)].push_back(keys[k]);
    for (int i = 0; i < 2; ++i) {
      Lookup(*tiered[i], batch[i], /*insert=*/true, static_cast<int64_t>(at / 500) + 1);
      std::vector<float> grads(batch[i].size() * kDim, 0.5f);
      ASSERT_TRUE(Apply(*tiered[i], UpdateOp::APPLY_GRADIENT, batch[i], grads, 20).ok());
    }
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_GT(tiered[i]->Stats().disk_keys(), 2000);
    for (const auto& [key, saved] : Records(*tiered[i])) expected[key] = saved;
  }
  ASSERT_EQ(expected.size(), keys.size());
  absl::StatusOr<SaveShardsResponse> written =
      WriteShardCheckpoint(dir + "/db", {}, tiered, kDefaultCheckpointChunkBytes);
  ASSERT_TRUE(written.ok()) << written.status();
  auto restore = [&](const VariableShardDef& def, std::shared_ptr<DiskStore> disk) {
    std::unique_ptr<DynamicShard> shard = Make(def, nullptr, disk);
    RestoreShardOp op;
    op.set_shard(def.name());
    op.add_sources()->set_db_path(dir + "/db");
    ShardCheckpointReader reader;
    absl::StatusOr<int64_t> read = reader.ReadDynamicInto(op, shard.get());
    EXPECT_TRUE(read.ok()) << read.status();
    return shard;
  };
  std::map<int64_t, Saved> three;
  for (int i = 0; i < 3; ++i) {
    std::unique_ptr<DynamicShard> shard = restore(Def(OptimizerDef::ADAGRAD, 3, i), nullptr);
    for (const auto& [key, saved] : Records(*shard)) three[key] = saved;
  }
  EXPECT_EQ(three, expected);
  std::unique_ptr<DynamicShard> one = restore(TieredDef(100), Store(dir + "/one"));
  EXPECT_EQ(Records(*one), expected);
  EXPECT_GT(one->Stats().disk_keys(), 4000);
  EXPECT_LE(one->Stats().ram_keys(), 100);
}

}  // namespace
}  // namespace pstrain
