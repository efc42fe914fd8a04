// A ps's checkpoint database reader (ps/shard_checkpoint.h, through VariableStore::RestoreShards):
// the input is the database's content, a list of keys and values, written into a real RocksDB
// database, which a ps holding a dense shard and a dynamic table's shard then restores from (a
// damaged or hostile checkpoint). A restore that fails must change nothing.
#include <filesystem>
#include <memory>
#include <utility>

#include "proto/ps_service.pb.h"
#include "ps/shard_checkpoint.h"
#include "ps/variable_store.h"
#include "rocksdb/db.h"
#include "tests/fuzz/fuzz_target.h"

namespace pstrain {
namespace {

std::vector<VariableShardDef> Shards() {
  VariableShardDef dense;
  dense.set_name("w/part_0");
  dense.set_variable("w");
  dense.add_full_shape(6);
  dense.add_full_shape(3);
  dense.set_dtype(DT_FLOAT32);
  dense.set_num_rows(6);
  dense.set_num_shards(1);
  dense.mutable_optimizer()->set_kind(OptimizerDef::ADAM);
  VariableShardDef table;
  table.set_name("keys/part_0");
  table.set_variable("keys");
  table.add_full_shape(2);
  table.set_dtype(DT_FLOAT32);
  table.set_num_shards(1);
  table.mutable_optimizer()->set_kind(OptimizerDef::ADAGRAD);
  table.mutable_dynamic()->set_dim(2);
  return {dense, table};
}

RestoreShardsRequest Restore(const std::string& db) {
  RestoreShardsRequest restore;
  restore.set_restore_id(1);
  RestoreShardOp* op = restore.add_ops();
  op->set_shard("w/part_0");
  CheckpointSource* source = op->add_sources();
  source->set_db_path(db);
  source->set_num_rows(6);
  source->set_apply_count(3);
  RestoreShardOp* table = restore.add_ops();
  table->set_shard("keys/part_0");
  table->add_sources()->set_db_path(db);
  return restore;
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  EmptyFuzzDir();
  std::vector<std::string> seeds;
  VariableStore store(/*data_threads=*/0);
  if (!store.CreateShards(Shards()).ok()) return seeds;
  UpdateRequest update;
  UpdateOp* op = update.add_ops();
  op->set_shard("keys/part_0");
  op->set_kind(UpdateOp::ASSIGN);
  op->set_dtype(DT_FLOAT32);
  const int64_t keys[] = {5, -9, 1LL << 50};
  op->set_ids(std::string(reinterpret_cast<const char*>(keys), sizeof(keys)));
  op->set_values(std::string(3 * 2 * sizeof(float), '\x3f'));
  if (!store.Update(update).ok()) return seeds;
  SaveShardsRequest save;
  save.set_db_path(FuzzDir() + "/seed");
  save.set_chunk_bytes(40);  // several chunks
  if (!store.SaveShards(save).ok()) return seeds;
  rocksdb::DB* raw = nullptr;
  if (!rocksdb::DB::OpenForReadOnly(rocksdb::Options(), save.db_path(), &raw).ok()) return seeds;
  std::unique_ptr<rocksdb::DB> db(raw);
  FuzzInputBuilder b;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    b.U16(it->key().size()).Bytes(it->key().ToString());
    b.U16(it->value().size()).Bytes(it->value().ToString());
  }
  seeds.push_back(b.str());
  EmptyFuzzDir();
  return seeds;
}

}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  EmptyFuzzDir();
  const std::string path = FuzzDir() + "/db";
  {
    rocksdb::Options options;
    options.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    if (!rocksdb::DB::Open(options, path, &raw).ok()) __builtin_trap();
    std::unique_ptr<rocksdb::DB> db(raw);
    FuzzInput in(data, size);
    while (!in.empty()) {
      const std::string key = in.TakeBytes(in.TakeU16());
      const std::string value = in.TakeBytes(in.TakeU16());
      (void)db->Put(rocksdb::WriteOptions(), key, value);
    }
  }
  // The reader outside a ps (a prediction server following training): every entry it hands out is
  // whole, or the database is DATA_LOSS.
  {
    int64_t floats_seen = 0;
    CheckpointEntries entries;
    entries.on_rows = [&](int64_t, absl::string_view bytes) {
      floats_seen += static_cast<int64_t>(bytes.size() / 4);
      return absl::OkStatus();
    };
    entries.on_erased = [](int64_t) { return absl::OkStatus(); };
    volatile float sum = 0;
    entries.on_record = [&](int64_t, const float* f) {
      sum = sum + f[0] + f[1] + f[2] + f[3];  // every float of the record is readable
      floats_seen += 4;
      return absl::OkStatus();
    };
    for (auto [variable, floats] : {std::pair<const char*, int64_t>{"w", 0}, {"keys", 4}}) {
      absl::Status s = ReadCheckpointEntries(path, variable, floats, entries);
      if (!s.ok() && s.code() != absl::StatusCode::kDataLoss) __builtin_trap();
    }
  }
  VariableStore store(/*data_threads=*/0, /*memory_budget_bytes=*/64 << 20);
  if (!store.CreateShards(Shards()).ok()) __builtin_trap();
  ReadRequest read;
  read.add_ops()->set_shard("w/part_0");
  ReadResponse before, after;
  if (!store.Read(read, &before).ok()) __builtin_trap();
  absl::StatusOr<RestoreShardsResponse> restored = store.RestoreShards(Restore(path));
  if (!restored.ok()) {
    // Nothing changed.
    if (!store.Read(read, &after).ok() || after.values(0) != before.values(0)) __builtin_trap();
    return 0;
  }
  if (!store.CommitRestore(1, /*abort=*/false).ok()) __builtin_trap();
  (void)store.Read(read, &after);
  ExportRequest export_request;
  export_request.set_shard("keys/part_0");
  export_request.set_with_slots(true);
  ExportResponse exported;
  (void)store.Export(export_request, &exported);
  return 0;
}
