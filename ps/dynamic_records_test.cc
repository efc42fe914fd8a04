#include "ps/dynamic_records.h"

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "partitioners/key_routing.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

uint64_t HashOf(int64_t key) { return MixKey(key); }

// Stores `key` (room made first) with its row's first float set to `value`.
char* Put(RecordTable* table, int64_t key, float value) {
  EXPECT_TRUE(table->MakeRoom(1, "t").ok());
  uint64_t pos = 0;
  EXPECT_FALSE(table->Probe(key, HashOf(key), &pos));
  char* record = table->InsertAt(key, HashOf(key), pos, /*step=*/7, /*count=*/1, /*generation=*/3);
  Floats(record)[0] = value;
  return record;
}

TEST(RecordLayoutTest, PadsOnlyWhereALookupReadsFewerLines) {
  // 16 floats with one Adagrad slot: 24 + 128 = 152 bytes; at 160 the header and row (88 bytes)
  // span two lines at every offset.
  EXPECT_EQ(RecordLayout::For(/*data_bytes=*/128, /*prefix_bytes=*/64).record_bytes, 160);
  // No padding helps a 64-byte-aligned 64-byte record.
  EXPECT_EQ(RecordLayout::For(/*data_bytes=*/40, /*prefix_bytes=*/40).record_bytes, 64);
  // Always a multiple of 8.
  for (int64_t floats = 1; floats < 100; ++floats) {
    EXPECT_EQ(RecordLayout::For(4 * floats, 4 * floats).record_bytes % 8, 0) << floats;
  }
}

TEST(RecordLayoutTest, LocateCoversEveryRecordOnce_SmallBlocksDoubleThenBig) {
  const RecordLayout layout = RecordLayout::For(/*data_bytes=*/64, /*prefix_bytes=*/64);
  EXPECT_EQ(layout.BlockRecords(0), 64);
  EXPECT_EQ(layout.BlockRecords(1), 64);
  EXPECT_EQ(layout.BlockRecords(2), 128);
  // Record r's (block, offset) walks every block in order, each from 0 to its size.
  size_t expect_block = 0;
  uint32_t expect_offset = 0;
  for (uint32_t r = 0; r < 200000; ++r) {
    size_t block;
    uint32_t offset;
    layout.Locate(r, &block, &offset);
    ASSERT_EQ(block, expect_block) << r;
    ASSERT_EQ(offset, expect_offset) << r;
    if (++expect_offset == layout.BlockRecords(expect_block)) {
      ++expect_block;
      expect_offset = 0;
    }
  }
  EXPECT_GT(expect_block, layout.small_blocks);  // into the big blocks
}

TEST(RecordTableTest, InsertFindErase_ManyKeys_MatchesAMap) {
  RecordTable table(RecordLayout::For(16, 16), nullptr);
  std::mt19937_64 rng(5);
  std::map<int64_t, float> model;
  for (int round = 0; round < 20000; ++round) {
    const int64_t key = static_cast<int64_t>(rng() % 3000) - 1500;
    const bool erase = rng() % 3 == 0;
    uint64_t pos = 0;
    const bool held = table.Probe(key, HashOf(key), &pos);
    ASSERT_EQ(held, model.count(key) > 0) << key;
    if (erase && held) {
      EXPECT_EQ(table.EraseAt(pos), key);
      model.erase(key);
    } else if (!held) {
      Put(&table, key, static_cast<float>(round));
      model[key] = static_cast<float>(round);
    }
  }
  EXPECT_EQ(table.live(), static_cast<int64_t>(model.size()));
  for (const auto& [key, value] : model) {
    const char* record = table.Find(key, HashOf(key));
    ASSERT_NE(record, nullptr) << key;
    EXPECT_EQ(Header(record)->key, key);
    EXPECT_EQ(Floats(record)[0], value);
  }
  std::set<int64_t> live;
  table.ForEachLive([&](const char* record) { live.insert(Header(record)->key); });
  EXPECT_EQ(live.size(), model.size());
  // Erased records are reused: never more records handed out than keys ever held at once.
  EXPECT_LE(table.next_record(), 3000u);
}

TEST(RecordTableTest, InsertAt_SetsTheHeader) {
  RecordTable table(RecordLayout::For(8, 8), nullptr);
  const char* record = Put(&table, 42, 1.5f);
  const RecordHeader* h = Header(record);
  EXPECT_EQ(h->key, 42);
  EXPECT_EQ(h->step, 7u);
  EXPECT_EQ(h->count, 1u);
  EXPECT_EQ(h->generation, 3u);
  EXPECT_EQ(h->live, 1u);
}

TEST(RecordTableTest, Walk_FindsHeldAndMissingInOrder_AndSeesItsOwnInserts) {
  RecordTable table(RecordLayout::For(8, 8), nullptr);
  std::vector<int64_t> keys;
  for (int64_t k = 0; k < 500; ++k) keys.push_back(k * 7919);
  for (size_t i = 0; i < keys.size(); i += 2) Put(&table, keys[i], 1);
  // Every key twice: the walk inserts the missing ones at their first sight, and must find them at
  // their second (a position found ahead is checked again).
  std::vector<int64_t> all = keys;
  all.insert(all.end(), keys.begin(), keys.end());
  std::vector<uint64_t> hashes;
  for (int64_t k : all) hashes.push_back(HashOf(k));
  std::vector<int32_t> positions(all.size());
  for (size_t i = 0; i < all.size(); ++i) positions[i] = static_cast<int32_t>(i);
  ASSERT_TRUE(table.MakeRoom(static_cast<int64_t>(keys.size()), "t").ok());
  std::vector<int32_t> order;
  int64_t found = 0, inserted = 0;
  table.Walk(all.data(), hashes.data(), positions.data(), static_cast<int64_t>(all.size()),
             /*record_prefix=*/24, [&](int32_t p, uint64_t pos, char* record) {
               order.push_back(p);
               if (record != nullptr) {
                 EXPECT_EQ(Header(record)->key, all[p]);
                 ++found;
                 return;
               }
               table.InsertAt(all[p], hashes[p], pos, 0, 0, 0);
               ++inserted;
             });
  EXPECT_EQ(order, positions);
  EXPECT_EQ(inserted, 250);
  EXPECT_EQ(found, 750);
}

TEST(RecordTableTest, Walk_AfterEraseInTheCallback_StillFindsEveryKey) {
  RecordTable table(RecordLayout::For(8, 8), nullptr);
  std::vector<int64_t> keys;
  for (int64_t k = 1; k <= 300; ++k) keys.push_back(k);
  for (int64_t k : keys) Put(&table, k, 1);
  std::vector<uint64_t> hashes;
  for (int64_t k : keys) hashes.push_back(HashOf(k));
  std::vector<int32_t> positions(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) positions[i] = static_cast<int32_t>(i);
  // Erase every other key as it is reached: backward shifts move later keys' entries, which the
  // walk found ahead of time.
  int64_t found = 0;
  table.Walk(keys.data(), hashes.data(), positions.data(), static_cast<int64_t>(keys.size()), 24,
             [&](int32_t p, uint64_t pos, char* record) {
               ASSERT_NE(record, nullptr) << keys[p];
               EXPECT_EQ(Header(record)->key, keys[p]);
               ++found;
               if (p % 2 == 0) table.EraseAt(pos);
             });
  EXPECT_EQ(found, 300);
  EXPECT_EQ(table.live(), 150);
}

TEST(RecordTableTest, MakeRoom_PastTheBudget_ResourceExhaustedAndNothingChanges) {
  MemoryBudget budget(/*limit_bytes=*/64 * 1024);
  RecordTable table(RecordLayout::For(64, 64), &budget);
  ASSERT_TRUE(table.MakeRoom(10, "t").ok());
  const int64_t reserved = table.reserved_bytes();
  EXPECT_GT(reserved, 0);
  const absl::Status s = table.MakeRoom(100000, "shard \"x\"");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("shard \"x\""));
  EXPECT_EQ(table.reserved_bytes(), reserved);
  EXPECT_EQ(budget.used(), reserved);
}

TEST(RecordTableTest, Promise_KeepsRoomForItsCaller) {
  RecordTable table(RecordLayout::For(8, 8), nullptr);
  ASSERT_TRUE(table.MakeRoom(10, "t").ok());
  table.Promise(10);
  // Another caller's room comes on top of the promised 10: 20 inserts fit without more room.
  ASSERT_TRUE(table.MakeRoom(10, "t").ok());
  for (int64_t k = 0; k < 20; ++k) {
    uint64_t pos = 0;
    ASSERT_FALSE(table.Probe(k, HashOf(k), &pos));
    table.InsertAt(k, HashOf(k), pos, 0, 0, 0);
  }
  table.Unpromise(10);
  EXPECT_EQ(table.live(), 20);
}

}  // namespace
}  // namespace pstrain
