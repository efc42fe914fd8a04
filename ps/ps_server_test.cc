// The ps server's own policies, over real gRPC: checkpoint paths confined to its root, malformed
// requests answered INVALID_ARGUMENT naming the method, limits on what one request may ask.
#include "ps/ps_server.h"

#include <sys/stat.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"

#include "common/grpc_util.h"
#include "common/test_util.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
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

// Sends `bytes` as a call of /pstrain.PsService/<method> and returns the status.
grpc::Status CallRaw(const std::string& address, const std::string& method,
                     const std::string& bytes) {
  grpc::GenericStub stub(CreateChannel(address));
  grpc::ClientContext context;
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer reply;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/pstrain.PsService/" + method, grpc::StubOptions(), &request, &reply,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  return status;
}

TEST(PsServerTest, MalformedRequests_InvalidArgumentNamingTheMethod) {
  absl::StatusOr<std::unique_ptr<PsServer>> server = PsServer::Start(PsServerOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  // A field 1 of wire type 2 whose length runs past the end: no message parses it.
  const std::string cut("\x0a\x10" "ab", 4);
  for (const std::string method :
       {"Health", "CreateShards", "ListShards", "Lookup", "Read", "Update", "Export",
        "SaveShards", "RestoreShards", "CommitRestore"}) {
    grpc::Status status = CallRaw((*server)->address(), method, cut);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_THAT(status.error_message(), HasSubstr(method)) << method;
    EXPECT_THAT(status.error_message(), HasSubstr("malformed")) << method;
  }
  // The server is unharmed: a valid call still works.
  std::unique_ptr<PsClient> client = NewGrpcPsClient(0, (*server)->address());
  CreateShardsRequest create;
  *create.add_shards() = Shard();
  CreateShardsResponse created;
  EXPECT_TRUE(client->CreateShards(create, &created).ok());
}

TEST(PsServerTest, TooManyIdsInOneRequest_ResourceExhausted) {
  PsServerOptions options;
  options.max_ids_per_request = 3;
  absl::StatusOr<std::unique_ptr<PsServer>> server = PsServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<PsClient> client = NewGrpcPsClient(0, (*server)->address());
  CreateShardsRequest create;
  *create.add_shards() = Shard();
  CreateShardsResponse created;
  ASSERT_TRUE(client->CreateShards(create, &created).ok());
  auto ids = [](std::vector<int64_t> rows) {
    return std::string(reinterpret_cast<const char*>(rows.data()), rows.size() * 8);
  };
  LookupRequest lookup;
  LookupOp* op = lookup.add_ops();
  op->set_shard("v");
  op->set_ids(ids({0, 1, 2}));
  LookupResponse values;
  EXPECT_TRUE(client->Lookup(lookup, &values).ok());
  op->set_ids(ids({0, 1, 2, 3}));
  absl::Status refused = client->Lookup(lookup, &values);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("4 ids"));

  UpdateRequest update;
  UpdateOp* u = update.add_ops();
  u->set_shard("v");
  u->set_kind(UpdateOp::ASSIGN_ADD);
  u->set_dtype(DT_FLOAT32);
  u->set_ids(ids({0, 1, 2, 3}));
  u->set_values(std::string(4 * 2 * sizeof(float), '\0'));
  UpdateResponse updated;
  refused = client->Update(update, &updated);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
}

TEST(PsServerTest, ReplyOverTheMessageLimit_ResourceExhaustedBeforeAllocating) {
  absl::StatusOr<std::unique_ptr<PsServer>> server = PsServer::Start(PsServerOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<PsClient> client = NewGrpcPsClient(0, (*server)->address());
  // 2^20 rows of 256 floats: 1 GiB, over the 512 MiB message limit when read whole.
  VariableShardDef def = Shard();
  def.set_name("big");
  def.set_variable("big");
  def.clear_full_shape();
  def.add_full_shape(1 << 20);
  def.add_full_shape(256);
  def.set_num_rows(1 << 20);
  CreateShardsRequest create;
  *create.add_shards() = def;
  CreateShardsResponse created;
  ASSERT_TRUE(client->CreateShards(create, &created).ok());
  ReadRequest read;
  read.add_ops()->set_shard("big");
  ReadResponse values;
  absl::Status refused = client->Read(read, &values);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("message limit"));
}

}  // namespace
}  // namespace pstrain
