#include "ps/local_ps_client.h"

#include <memory>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/ps_server.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// A ps's own in-process client serves every call in the calling thread, as the server would over
// the wire: shards created through it are the server's, errors name the ps, and it keeps working
// after the server stopped listening (it holds the handlers).
TEST(LocalPsClientTest, CallsServedByTheServersHandlers_ErrorsNameThePs) {
  PsServerOptions options;
  options.task_index = 3;
  absl::StatusOr<std::unique_ptr<PsServer>> server = PsServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<PsClient> client = (*server)->NewLocalClient();
  EXPECT_TRUE(client->ordered());
  EXPECT_THAT(client->name(), HasSubstr("ps:3"));
  CreateShardsRequest create;
  VariableShardDef* def = create.add_shards();
  def->set_name("w");
  def->set_variable("w");
  def->add_full_shape(2);
  def->set_dtype(DT_FLOAT32);
  def->set_num_rows(2);
  def->set_num_shards(1);
  def->mutable_initializer()->set_kind(InitializerDef::CONSTANT);
  def->mutable_initializer()->set_value(1.5f);
  def->mutable_optimizer()->set_kind(OptimizerDef::SGD);
  def->mutable_optimizer()->set_learning_rate(1.0);
  CreateShardsResponse created;
  ASSERT_TRUE(client->CreateShards(create, &created).ok());
  UpdateRequest update;
  update.set_return_rows(true);
  UpdateOp* op = update.add_ops();
  op->set_shard("w");
  op->set_kind(UpdateOp::APPLY_GRADIENT);
  op->mutable_range();
  const std::vector<float> grads = {0.5f, 1.0f};
  op->set_values(std::string(reinterpret_cast<const char*>(grads.data()), 8));
  op->set_dtype(DT_FLOAT32);
  UpdateResponse rows;
  ASSERT_TRUE(client->Update(update, &rows).ok());
  ASSERT_EQ(rows.values_size(), 1);
  EXPECT_THAT(Floats(rows.values(0)), ::testing::ElementsAre(1.0f, 0.5f));
  (*server)->Shutdown();
  LookupRequest lookup;
  LookupOp* l = lookup.add_ops();
  l->set_shard("nope");
  l->set_ids(std::string(8, '\0'));
  LookupResponse found;
  EXPECT_THAT(client->Lookup(lookup, &found),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("ps:3")));
}

}  // namespace
}  // namespace pstrain
