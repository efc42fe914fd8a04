// Every PsService method, driven through the handlers the ps server runs for each call
// (ps/ps_service_handlers.h): an input is a sequence of calls, each a method number and request
// bytes cut into two pieces (as gRPC's slices), served one after another by a fresh ps with a
// memory budget and a checkpoint root of its own. Saves and restores really write and read
// RocksDB databases under that root. Nothing may crash, and no file may appear outside the root.
#include <cstdio>

#include <sys/stat.h>

#include <filesystem>

#include "ps/ps_service_handlers.h"
#include "proto/ps_service.pb.h"
#include "tests/fuzz/fuzz_target.h"

namespace pstrain {
namespace {

int MethodNumber(absl::string_view name) {
  const google::protobuf::MethodDescriptor* m = PsServiceHandlers::Service()->FindMethodByName(
      std::string(name));
  return m == nullptr ? 0 : m->index();
}

// One call in the input's format: method byte, cut byte, 16-bit length, request bytes.
void AddCall(FuzzInputBuilder* b, absl::string_view method, const google::protobuf::Message& m,
             uint8_t cut = 0) {
  const std::string bytes = m.SerializeAsString();
  b->Byte(static_cast<uint8_t>(MethodNumber(method))).Byte(cut).U16(bytes.size()).Bytes(bytes);
}

std::string Ids(std::vector<int64_t> ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int64_t));
}

VariableShardDef Dense(const std::string& name, const std::string& variable, int shard,
                       OptimizerDef::Kind optimizer) {
  VariableShardDef def;
  def.set_name(name);
  def.set_variable(variable);
  def.add_full_shape(8);
  def.add_full_shape(4);
  def.set_dtype(DT_FLOAT32);
  def.set_row_offset(4 * shard);
  def.set_num_rows(4);
  def.set_shard_index(shard);
  def.set_num_shards(2);
  def.mutable_initializer()->set_kind(InitializerDef::UNIFORM);
  def.mutable_initializer()->set_maxval(1);
  def.mutable_optimizer()->set_kind(optimizer);
  return def;
}

VariableShardDef Dynamic() {
  VariableShardDef def;
  def.set_name("keys/part_0");
  def.set_variable("keys");
  def.add_full_shape(4);
  def.set_dtype(DT_FLOAT32);
  def.set_num_shards(1);
  def.mutable_optimizer()->set_kind(OptimizerDef::ADAGRAD);
  def.mutable_dynamic()->set_dim(4);
  def.mutable_dynamic()->set_admit_min_count(2);
  def.mutable_dynamic()->set_max_rows(100);
  return def;
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  std::vector<std::string> seeds;
  FuzzInputBuilder all;
  CreateShardsRequest create;
  *create.add_shards() = Dense("w/part_0", "w", 0, OptimizerDef::ADAM);
  *create.add_shards() = Dense("w/part_1", "w", 1, OptimizerDef::ADAM);
  *create.add_shards() = Dynamic();
  AddCall(&all, "CreateShards", create, 7);
  LookupRequest lookup;
  lookup.set_step(1);
  lookup.add_ops()->set_shard("w/part_0");
  lookup.mutable_ops(0)->set_ids(Ids({0, 3, 3}));
  LookupOp* keys = lookup.add_ops();
  keys->set_shard("keys/part_0");
  keys->set_ids(Ids({17, -5, 1LL << 40}));
  keys->set_insert(true);
  AddCall(&all, "Lookup", lookup, 11);
  AddCall(&all, "Lookup", lookup, 30);
  UpdateRequest update;
  update.set_step(2);
  UpdateOp* grad = update.add_ops();
  grad->set_shard("w/part_1");
  grad->set_kind(UpdateOp::APPLY_GRADIENT);
  grad->set_dtype(DT_FLOAT32);
  grad->set_ids(Ids({4, 7}));
  grad->set_values(std::string(2 * 4 * sizeof(float), '\x3c'));
  UpdateOp* assign = update.add_ops();
  assign->set_shard("keys/part_0");
  assign->set_kind(UpdateOp::ASSIGN);
  assign->set_dtype(DT_FLOAT32);
  assign->set_ids(Ids({17, 99}));
  assign->set_values(std::string(2 * 4 * sizeof(float), '\x3d'));
  UpdateOp* dense = update.add_ops();
  dense->set_shard("w/part_0");
  dense->set_kind(UpdateOp::ASSIGN_ADD);
  dense->set_dtype(DT_FLOAT32);
  dense->set_values(std::string(4 * 4 * sizeof(float), '\x01'));
  AddCall(&all, "Update", update, 50);
  ReadRequest read;
  read.add_ops()->set_shard("w/part_1");
  read.mutable_ops(0)->mutable_range()->set_row_begin(4);
  read.mutable_ops(0)->mutable_range()->set_row_end(6);
  AddCall(&all, "Read", read);
  ExportRequest export_request;
  export_request.set_shard("keys/part_0");
  export_request.set_max_keys(1);
  export_request.set_with_slots(true);
  AddCall(&all, "Export", export_request);
  AddCall(&all, "ListShards", ListShardsRequest());
  AddCall(&all, "Health", HealthRequest());
  SaveShardsRequest save;
  save.set_db_path("ckpt-2");
  save.set_track_erasures(true);
  AddCall(&all, "SaveShards", save);
  RestoreShardsRequest restore;
  restore.set_restore_id(9);
  RestoreShardOp* op = restore.add_ops();
  op->set_shard("w/part_0");
  CheckpointSource* source = op->add_sources();
  source->set_db_path("ckpt-2");
  source->set_row_offset(0);
  source->set_num_rows(4);
  RestoreShardOp* table = restore.add_ops();
  table->set_shard("keys/part_0");
  table->add_sources()->set_db_path("ckpt-2");
  AddCall(&all, "RestoreShards", restore);
  CommitRestoreRequest commit;
  commit.set_restore_id(9);
  AddCall(&all, "CommitRestore", commit);
  SaveShardsRequest delta;
  delta.set_db_path("ckpt-3");
  delta.set_delta_since_generation(1);
  AddCall(&all, "SaveShards", delta);
  seeds.push_back(all.str());

  // Issue 19's crash: two shards of one variable that disagree (Adam and SGD), then a save.
  FuzzInputBuilder disagree;
  CreateShardsRequest a0, a1;
  *a0.add_shards() = Dense("a/part_0", "a", 0, OptimizerDef::ADAM);
  *a1.add_shards() = Dense("a/part_1", "a", 1, OptimizerDef::SGD);
  AddCall(&disagree, "CreateShards", a0);
  AddCall(&disagree, "CreateShards", a1);
  save.set_db_path("ckpt-1");
  AddCall(&disagree, "SaveShards", save);
  seeds.push_back(disagree.str());

  // Paths out of the root.
  FuzzInputBuilder escape;
  AddCall(&escape, "CreateShards", a0);
  save.set_db_path("../../escaped");
  AddCall(&escape, "SaveShards", save);
  source->set_db_path("/tmp");
  AddCall(&escape, "RestoreShards", restore);
  seeds.push_back(escape.str());
  return seeds;
}

}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  EmptyFuzzDir();
  const std::string root = FuzzDir() + "/root";
  ::mkdir(root.c_str(), 0755);
  absl::StatusOr<CheckpointRoot> checkpoint_root = CheckpointRoot::Open(root);
  if (!checkpoint_root.ok()) __builtin_trap();
  PsServiceLimits limits;
  limits.memory_budget_bytes = 64 << 20;  // the fuzzer's own memory stays well under its limit
  limits.data_threads = 0;
  limits.max_ids_per_request = 1 << 16;
  limits.max_concurrent_large_requests = 2;
  PsServiceHandlers ps(limits, *std::move(checkpoint_root));
  ps.SetIdentity(TaskIdentity::New("ps", 0, "localhost:1"));

  FuzzInput in(data, size);
  ServeFuzzCalls(&in, PsServiceHandlers::Service()->method_count(), /*max_calls=*/16,
                 [&](int method, const std::vector<absl::string_view>& request,
                     const std::function<char*(size_t)>& reply) {
                   return ps.Serve(method, request, reply);
                 });
  // Nothing outside the root: the fuzz directory holds only it.
  for (const auto& entry : std::filesystem::directory_iterator(FuzzDir())) {
    if (entry.path().filename() != "root") __builtin_trap();
  }
  return 0;
}
