#include "ps/shard_directory.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "ps/memory_budget.h"

namespace pstrain {
namespace {

VariableShardDef FixedDef(const std::string& name) {
  VariableShardDef def;
  def.set_name(name);
  def.set_variable(name);
  def.set_dtype(DT_FLOAT32);
  def.add_full_shape(4);
  def.add_full_shape(2);
  def.set_num_rows(4);
  def.set_num_shards(1);
  return def;
}

TEST(ShardDirectoryTest, WriterAdds_ReaderFindsByKind) {
  ShardDirectory directory;
  MemoryBudget budget(0);
  {
    ShardDirectory::Writer maps(&directory);
    auto shard = VariableShard::Create(FixedDef("w"), /*initialize=*/true, &budget);
    ASSERT_TRUE(shard.ok()) << shard.status();
    maps.fixed().emplace("w", std::shared_ptr<VariableShard>(std::move(*shard)));
  }
  ShardDirectory::Reader maps(&directory);
  EXPECT_NE(maps.FindFixed("w"), nullptr);
  EXPECT_EQ(maps.FindDynamic("w"), nullptr);
  EXPECT_EQ(maps.FindFixed("v"), nullptr);
  EXPECT_EQ(maps.fixed().size(), 1u);
  EXPECT_TRUE(maps.dynamic().empty());
}

// A Reader made while an update answered early is applying waits until it is done; one made
// after a cancelled (not answered) update doesn't.
TEST(ShardDirectoryTest, ReaderWaitsForAnAnsweredUpdate_NotForACancelledOne) {
  ShardDirectory directory;
  {
    ShardDirectory::Answered cancelled(&directory);
    cancelled.Cancel();
    cancelled.Cancel();  // idempotent
    ShardDirectory::Reader maps(&directory);  // would wait forever if still counted
  }
  auto answered = std::make_unique<ShardDirectory::Answered>(&directory);
  std::atomic<bool> applied{false};
  std::atomic<bool> saw_applied{false};
  absl::Notification reading;
  std::thread reader([&] {
    reading.Notify();
    ShardDirectory::Reader maps(&directory);
    saw_applied = applied.load();
  });
  reading.WaitForNotification();
  // The reader is (or soon will be) waiting: give it time to get past the Reader if it didn't wait.
  absl::SleepFor(absl::Milliseconds(50));
  applied = true;
  answered.reset();
  reader.join();
  EXPECT_TRUE(saw_applied.load());
}

// A Writer doesn't wait for answered updates (adding or replacing a shard reads none).
TEST(ShardDirectoryTest, WriterDoesNotWaitForAnsweredUpdates) {
  ShardDirectory directory;
  ShardDirectory::Answered answered(&directory);
  ShardDirectory::Writer maps(&directory);
  EXPECT_TRUE(maps.fixed().empty());
}

}  // namespace
}  // namespace pstrain
