#include "ps/shard_checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/test_util.h"
#include "ps/variable_store.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

VariableShardDef Def(const std::string& variable, int64_t rows, int64_t width, int64_t offset,
                     int64_t num_rows, int shard, int num_shards, bool adagrad) {
  VariableShardDef def;
  def.set_name(num_shards == 1 ? variable : variable + "/part_" + std::to_string(shard));
  def.set_variable(variable);
  def.add_full_shape(rows);
  def.add_full_shape(width);
  def.set_dtype(DT_FLOAT32);
  def.set_row_offset(offset);
  def.set_num_rows(num_rows);
  def.set_shard_index(shard);
  def.set_num_shards(num_shards);
  def.mutable_initializer()->set_kind(InitializerDef::NORMAL);
  def.mutable_initializer()->set_stddev(1.0);
  def.mutable_initializer()->set_seed(7);
  if (adagrad) def.mutable_optimizer()->set_kind(OptimizerDef::ADAGRAD);
  return def;
}

// Applies one gradient to every row so that values and slots both move off their initial values.
void Train(VariableStore* store, const std::string& shard, int64_t offset, int64_t rows,
           int64_t width) {
  UpdateRequest request;
  UpdateOp* op = request.add_ops();
  op->set_shard(shard);
  op->set_kind(UpdateOp::APPLY_GRADIENT);
  op->set_dtype(DT_FLOAT32);
  std::string ids(rows * 8, '\0');
  std::vector<float> grads(rows * width);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t id = offset + r;
    std::memcpy(&ids[r * 8], &id, 8);
    for (int64_t c = 0; c < width; ++c) grads[r * width + c] = 0.01f * (id + c + 1);
  }
  op->set_ids(ids);
  op->set_values(std::string(reinterpret_cast<const char*>(grads.data()), grads.size() * 4));
  ASSERT_TRUE(store->Update(request).ok());
}

std::string Bytes(const char* p, size_t n) { return std::string(p, n); }

class ShardCheckpointTest : public ::testing::Test {
 protected:
  // One 10x3 Adagrad variable in 3 shards (4,3,3 rows), trained once, saved with tiny chunks.
  void SetUp() override {
    dir_ = FreshTempDir("ckpt");
    std::filesystem::create_directories(dir_);
    const int64_t sizes[] = {4, 3, 3};
    int64_t offset = 0;
    for (int s = 0; s < 3; ++s) {
      defs_.push_back(Def("emb", 10, 3, offset, sizes[s], s, 3, /*adagrad=*/true));
      offset += sizes[s];
    }
    ASSERT_TRUE(store_.CreateShards(defs_).ok());
    for (const auto& d : defs_) Train(&store_, d.name(), d.row_offset(), d.num_rows(), 3);
    SaveShardsRequest save;
    save.set_db_path(dir_ + "/ps-0");
    save.set_chunk_bytes(24);  // two rows of values per chunk: exercise chunk boundaries
    absl::StatusOr<SaveShardsResponse> saved = store_.SaveShards(save);
    ASSERT_TRUE(saved.ok()) << saved.status();
    ASSERT_EQ(saved->shards_size(), 3);
    saved_ = *saved;
  }

  // A restore op for `def` from the saved database (one source per saved shard).
  RestoreShardOp OpFor(const VariableShardDef& def) {
    RestoreShardOp op;
    op.set_shard(def.name());
    for (const SavedShard& s : saved_.shards()) {
      CheckpointSource* src = op.add_sources();
      src->set_db_path(dir_ + "/ps-0");
      src->set_row_offset(s.def().row_offset());
      src->set_num_rows(s.def().num_rows());
      src->set_apply_count(s.apply_count());
    }
    return op;
  }

  // The whole variable's values and accumulator, concatenated over `store`'s shards `defs`.
  static std::pair<std::string, std::string> Whole(VariableStore& store,
                                                   const std::vector<VariableShardDef>& defs) {
    std::string values, slots;
    for (const auto& d : defs) {
      auto shard = store.Find(d.name());
      values += Bytes(shard->values_data(), shard->num_rows() * shard->row_bytes());
      slots += Bytes(reinterpret_cast<const char*>(shard->slot_data(0)),
                     shard->num_rows() * shard->width() * 4);
    }
    return {values, slots};
  }

  std::string dir_;
  VariableStore store_;
  std::vector<VariableShardDef> defs_;
  SaveShardsResponse saved_;
};

TEST_F(ShardCheckpointTest, RestoreIntoTwoShards_ValuesAndSlotsBitExact) {
  // A new store with the same variable in 2 shards (5, 5 rows).
  VariableStore fresh;
  std::vector<VariableShardDef> two = {Def("emb", 10, 3, 0, 5, 0, 2, true),
                                       Def("emb", 10, 3, 5, 5, 1, 2, true)};
  ASSERT_TRUE(fresh.CreateShards(two).ok());
  RestoreShardsRequest request;
  request.set_restore_id(42);
  for (const auto& d : two) *request.add_ops() = OpFor(d);
  absl::StatusOr<RestoreShardsResponse> restored = fresh.RestoreShards(request);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->bytes(), 10 * 3 * 4 * 2);
  // Staged only: nothing live changed yet.
  EXPECT_NE(Whole(fresh, two), Whole(store_, defs_));
  ASSERT_TRUE(fresh.CommitRestore(42, /*abort=*/false).ok());
  EXPECT_EQ(Whole(fresh, two), Whole(store_, defs_));
  EXPECT_EQ(fresh.Find("emb/part_0")->apply_count(), 1);
}

TEST_F(ShardCheckpointTest, CommitRestore_Abort_LeavesLiveShards) {
  VariableStore fresh;
  std::vector<VariableShardDef> one = {Def("emb", 10, 3, 0, 10, 0, 1, true)};
  ASSERT_TRUE(fresh.CreateShards(one).ok());
  const auto before = Whole(fresh, one);
  RestoreShardsRequest request;
  request.set_restore_id(1);
  *request.add_ops() = OpFor(one[0]);
  ASSERT_TRUE(fresh.RestoreShards(request).ok());
  ASSERT_TRUE(fresh.CommitRestore(1, /*abort=*/true).ok());
  EXPECT_EQ(Whole(fresh, one), before);
  EXPECT_EQ(fresh.CommitRestore(1, /*abort=*/false).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ShardCheckpointTest, SaveShards_ExistingPath_AlreadyExists) {
  SaveShardsRequest save;
  save.set_db_path(dir_ + "/ps-0");
  absl::StatusOr<SaveShardsResponse> saved = store_.SaveShards(save);
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(saved.status().message(), HasSubstr("ps-0"));
}

TEST_F(ShardCheckpointTest, RestoreShards_SourcesWithGap_InvalidArgument) {
  RestoreShardOp op = OpFor(defs_[0]);
  op.mutable_sources()->DeleteSubrange(0, 1);  // rows [0, 4) no longer covered
  RestoreShardsRequest request;
  *request.add_ops() = op;
  absl::StatusOr<RestoreShardsResponse> r = store_.RestoreShards(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("emb/part_0"));
}

TEST_F(ShardCheckpointTest, RestoreShards_MissingDatabase_DataLoss) {
  RestoreShardOp op = OpFor(defs_[0]);
  for (auto& src : *op.mutable_sources()) src.set_db_path(dir_ + "/nowhere");
  RestoreShardsRequest request;
  *request.add_ops() = op;
  absl::StatusOr<RestoreShardsResponse> r = store_.RestoreShards(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("nowhere"));
}

// The database's table files (.sst), largest first.
std::vector<std::string> DbFiles(const std::string& db) {
  std::vector<std::pair<uintmax_t, std::string>> files;
  for (const auto& e : std::filesystem::directory_iterator(db)) {
    if (e.path().extension() != ".sst") continue;
    files.emplace_back(std::filesystem::file_size(e.path()), e.path().string());
  }
  std::sort(files.rbegin(), files.rend());
  std::vector<std::string> out;
  for (auto& f : files) out.push_back(f.second);
  return out;
}

TEST_F(ShardCheckpointTest, RestoreShards_FlippedByte_DataLossAndLiveUntouched) {
  ASSERT_EQ(DbFiles(dir_ + "/ps-0").size(), 1u);
  const std::string sst = DbFiles(dir_ + "/ps-0")[0];
  {
    std::fstream f(sst, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);  // inside the first data block
    char c;
    f.seekg(40);
    f.get(c);
    f.seekp(40);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  const auto before = Whole(store_, defs_);
  RestoreShardsRequest request;
  for (const auto& d : defs_) *request.add_ops() = OpFor(d);
  absl::StatusOr<RestoreShardsResponse> r = store_.RestoreShards(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_EQ(Whole(store_, defs_), before);
}

TEST_F(ShardCheckpointTest, RestoreShards_TruncatedFile_DataLoss) {
  const std::string sst = DbFiles(dir_ + "/ps-0")[0];
  ASSERT_EQ(::truncate(sst.c_str(), std::filesystem::file_size(sst) / 2), 0);
  RestoreShardsRequest request;
  *request.add_ops() = OpFor(defs_[0]);
  absl::StatusOr<RestoreShardsResponse> r = store_.RestoreShards(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("ps-0"));
}

TEST(ShardCheckpointEmptyTest, SaveShards_NoShards_RestorableEmptyDatabase) {
  VariableStore store;
  SaveShardsRequest save;
  save.set_db_path(FreshTempDir("empty") + "/ps-0");
  absl::StatusOr<SaveShardsResponse> saved = store.SaveShards(save);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->shards_size(), 0);
  EXPECT_TRUE(std::filesystem::exists(save.db_path() + "/CURRENT"));
}

}  // namespace
}  // namespace pstrain
