// The ps server's own policies, over real gRPC: checkpoint paths confined to its root.
#include "ps/ps_server.h"

#include <sys/stat.h>

#include <cstdio>
#include <memory>
#include <string>

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/grpc_ps_client.h"
#include "ps/ps_client.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

VariableShardDef Shard() {
  VariableShardDef def;
  def.set_name("v");
  def.set_variable("v");
  def.add_full_shape(4);
  def.add_full_shape(2);
  def.set_dtype(DT_FLOAT32);
  def.set_num_rows(4);
  def.set_num_shards(1);
  return def;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

TEST(PsServerTest, CheckpointPathsOutsideTheRoot_PermissionDenied_NothingCreated) {
  const std::string base = FreshTempDir("ps_server_root");
  PsServerOptions options;
  options.checkpoint_root = base + "/root";
  absl::StatusOr<std::unique_ptr<PsServer>> server = PsServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<PsClient> client = NewGrpcPsClient(0, (*server)->address());
  CreateShardsRequest create;
  *create.add_shards() = Shard();
  CreateShardsResponse created;
  ASSERT_TRUE(client->CreateShards(create, &created).ok());

  // Inside the root, absolute or relative: saved.
  SaveShardsRequest save;
  SaveShardsResponse saved;
  save.set_db_path(base + "/root/ckpt-1");
  ASSERT_TRUE(client->SaveShards(save, &saved).ok());
  EXPECT_TRUE(Exists(base + "/root/ckpt-1"));
  save.set_db_path("ckpt-2");
  ASSERT_TRUE(client->SaveShards(save, &saved).ok());
  EXPECT_TRUE(Exists(base + "/root/ckpt-2"));

  // Outside: refused, naming the path, and nothing made.
  for (const std::string& outside : {base + "/root/../elsewhere", std::string("../x")}) {
    save.set_db_path(outside);
    absl::Status s = client->SaveShards(save, &saved);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(outside));
  }
  EXPECT_FALSE(Exists(base + "/elsewhere"));
  EXPECT_FALSE(Exists(base + "/x"));

  // Restoring from outside is refused too; from inside it works.
  RestoreShardsRequest restore;
  restore.set_restore_id(1);
  RestoreShardOp* op = restore.add_ops();
  op->set_shard("v");
  CheckpointSource* source = op->add_sources();
  source->set_db_path(base + "/root/../root/../elsewhere");
  source->set_num_rows(4);
  RestoreShardsResponse restored;
  absl::Status s = client->RestoreShards(restore, &restored);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  source->set_db_path("ckpt-1");
  s = client->RestoreShards(restore, &restored);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(PsServerTest, RootThatIsAFile_StartFails) {
  const std::string base = FreshTempDir("ps_server_root_file");
  FILE* f = std::fopen((base + "/file").c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  PsServerOptions options;
  options.checkpoint_root = base + "/file";
  absl::StatusOr<std::unique_ptr<PsServer>> server = PsServer::Start(options);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition) << server.status();
}

}  // namespace
}  // namespace pstrain
