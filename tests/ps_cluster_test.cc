// Sharded variables on an in-process cluster of 2 ps tasks, over real gRPC.
#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/test_util.h"
#include "coordinator/variable_creator.h"
#include "ps/dense_cache.h"
#include "ps/grpc_ps_client.h"
#include "ps/sharded_variable.h"
#include "coordinator/in_process_cluster.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;


class PsClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InProcessClusterOptions options;
    options.num_ps = 2;
    options.num_workers = 1;
    options.metrics_port = 0;  // the ps tasks' metrics (RenderMetrics)
    absl::StatusOr<std::unique_ptr<InProcessCluster>> cluster = InProcessCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    for (int i = 0; i < 2; ++i) {
      clients_.push_back(NewGrpcPsClient(i, *cluster_->spec().address({"ps", i})));
      ps_.push_back(clients_.back().get());
    }
  }

  // Creates `name` ([rows, width] float32, constant init) as the given shards; returns its handle.
  ShardedVariable Create(const std::string& name, int64_t rows, int64_t width,
                         std::vector<ShardLocation> shards, const OptimizerDef* optimizer = nullptr,
                         float init = 0) {
    std::map<int, CreateShardsRequest> requests;
    for (size_t i = 0; i < shards.size(); ++i) {
      VariableShardDef* def = requests[shards[i].ps_task].add_shards();
      def->set_name(shards[i].name);
      def->set_variable(name);
      def->add_full_shape(rows);
      def->add_full_shape(width);
      def->set_dtype(DT_FLOAT32);
      def->set_row_offset(shards[i].row_offset);
      def->set_num_rows(shards[i].num_rows);
      def->set_shard_index(static_cast<int>(i));
      def->set_num_shards(static_cast<int>(shards.size()));
      def->mutable_initializer()->set_kind(InitializerDef::CONSTANT);
      def->mutable_initializer()->set_value(init);
      if (optimizer) *def->mutable_optimizer() = *optimizer;
    }
    for (auto& [ps, request] : requests) {
      CreateShardsResponse response;
      absl::Status s = ps_[ps]->CreateShards(request, &response);
      EXPECT_TRUE(s.ok()) << s;
    }
    absl::StatusOr<ShardedVariable> v =
        ShardedVariable::Create(name, {rows, width}, DT_FLOAT32, std::move(shards), ps_);
    EXPECT_TRUE(v.ok()) << v.status();
    return *v;
  }

  std::unique_ptr<InProcessCluster> cluster_;
  std::vector<std::unique_ptr<PsClient>> clients_;
  std::vector<PsClient*> ps_;
};

// GrpcPsClient encodes an update for the data plane field by field (UpdateFrame: the caller's ids
// and values are sent from where they are): a field added to UpdateOp or UpdateRequest must be
// added there too, or the data plane would drop it. This names the fields it writes.
TEST(UpdateFrameFieldsTest, UpdateOpAndRequest_HaveTheFieldsTheDataPlaneEncodes) {
  auto numbers = [](const google::protobuf::Descriptor* d) {
    std::vector<int> out;
    for (int i = 0; i < d->field_count(); ++i) out.push_back(d->field(i)->number());
    return out;
  };
  EXPECT_THAT(numbers(UpdateOp::descriptor()),
              ::testing::UnorderedElementsAre(1, 2, 3, 4, 5, 6, 7))
      << "update UpdateFrame in ps/grpc_ps_client.cc";
  EXPECT_THAT(numbers(UpdateRequest::descriptor()), ::testing::UnorderedElementsAre(1, 2, 3, 4))
      << "update UpdateFrame in ps/grpc_ps_client.cc";
}

TEST_F(PsClusterTest, Lookup_AcrossShardsAndPs_CallerOrder) {
  // TF's case: shards [[1,2],[3,4]], [[5,6],[7,8]], [[9,10]]; ids [0,3,4] -> [[1,2],[7,8],[9,10]].
  ShardedVariable v = Create("t", 5, 2,
                             {{"t/part_0", 0, 2, 0}, {"t/part_1", 2, 2, 1}, {"t/part_2", 4, 1, 0}});
  ASSERT_TRUE(v.AssignAll(Bytes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10})).ok());
  std::vector<int64_t> ids = {0, 3, 4};
  std::vector<float> out(6);
  ASSERT_TRUE(v.Lookup(ids, out.data()).ok());
  EXPECT_THAT(out, ElementsAre(1, 2, 7, 8, 9, 10));

  // Repeated ids, any order.
  ids = {4, 0, 4, 2, 0};
  out.assign(10, 0);
  ASSERT_TRUE(v.Lookup(ids, out.data()).ok());
  EXPECT_THAT(out, ElementsAre(9, 10, 1, 2, 9, 10, 5, 6, 1, 2));

  absl::StatusOr<std::string> all = v.ReadAll();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(Floats(*all), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 9, 10));
}

TEST_F(PsClusterTest, ShardsLiveOnTheirPs_ReadPerPs) {
  // 2 ps, Fixed(2) on a (5,2) table of 0..9: rows [[0,1],[2,3],[4,5]] on ps 0, [[6,7],[8,9]] on ps 1.
  ShardedVariable v = Create("x", 5, 2, {{"x/part_0", 0, 3, 0}, {"x/part_1", 3, 2, 1}});
  ASSERT_TRUE(v.AssignAll(Bytes({0, 1, 2, 3, 4, 5, 6, 7, 8, 9})).ok());
  for (int ps = 0; ps < 2; ++ps) {
    ReadRequest request;
    request.add_ops()->set_shard(absl::StrCat("x/part_", ps));
    ReadResponse response;
    ASSERT_TRUE(ps_[ps]->Read(request, &response).ok());
    if (ps == 0) EXPECT_THAT(Floats(response.values(0)), ElementsAre(0, 1, 2, 3, 4, 5));
    if (ps == 1) EXPECT_THAT(Floats(response.values(0)), ElementsAre(6, 7, 8, 9));
    // And the shard is not on the other ps.
    ReadRequest other;
    other.add_ops()->set_shard(absl::StrCat("x/part_", 1 - ps));
    absl::Status s = ps_[ps]->Read(other, &response);
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat("ps:", ps, " at localhost:")));
  }
}

// ReadAll reads a shard of more than 2 MiB as row ranges of about 1 MiB side by side, each copied
// into its place; small shards go whole in their ps's one request. Every row must come back where
// it belongs: two large shards (one ending in a short piece) beside two small ones on both ps.
TEST_F(PsClusterTest, ReadAll_LargeShardsInPieces_EveryRowInPlace) {
  const int64_t width = 4;  // 16-byte rows: a 1 MiB piece is 65,536 rows
  const int64_t big = 150001, small = 7;
  const int64_t rows = 2 * big + 2 * small;
  ShardedVariable v = Create("w", rows, width,
                             {{"w/part_0", 0, small, 0},
                              {"w/part_1", small, big, 0},
                              {"w/part_2", small + big, big, 1},
                              {"w/part_3", small + 2 * big, small, 1}});
  std::vector<float> values(rows * width);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000003);
  ASSERT_TRUE(v.AssignAll(absl::string_view(reinterpret_cast<const char*>(values.data()),
                                            values.size() * sizeof(float)))
                  .ok());
  for (int round = 0; round < 3; ++round) {
    absl::StatusOr<std::string> all = v.ReadAll();
    ASSERT_TRUE(all.ok()) << all.status();
    ASSERT_EQ(all->size(), values.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(all->data(), values.data(), all->size()), 0);
  }
  // Over gRPC alone (no data plane) a read goes whole: the same bytes.
  GrpcPsClientOptions grpc_only;
  grpc_only.data_plane = false;
  std::vector<std::unique_ptr<PsClient>> grpc_clients;
  std::vector<PsClient*> grpc_ps;
  for (int i = 0; i < 2; ++i) {
    grpc_clients.push_back(NewGrpcPsClient(i, *cluster_->spec().address({"ps", i}), grpc_only));
    grpc_ps.push_back(grpc_clients.back().get());
    EXPECT_EQ(grpc_ps.back()->read_piece_bytes(), 0);
    EXPECT_GT(ps_[i]->read_piece_bytes(), 0);
  }
  absl::StatusOr<ShardedVariable> over_grpc =
      ShardedVariable::Create("w", {rows, width}, DT_FLOAT32, v.shards(), grpc_ps);
  ASSERT_TRUE(over_grpc.ok()) << over_grpc.status();
  absl::StatusOr<std::string> whole = over_grpc->ReadAll();
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->size(), values.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(whole->data(), values.data(), whole->size()), 0);
  // One large shard alone (no small request beside its pieces).
  ShardedVariable one = Create("u", big, width, {{"u/part_0", 0, big, 1}}, nullptr, 2.5f);
  absl::StatusOr<std::string> all = one.ReadAll();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(Floats(*all), std::vector<float>(big * width, 2.5f));
}

TEST_F(PsClusterTest, ApplyGradients_SgdAcrossShards_RepeatedIdsSummed) {
  OptimizerDef sgd;
  sgd.set_kind(OptimizerDef::SGD);
  sgd.set_learning_rate(0.5);
  ShardedVariable v = Create("e", 4, 1, {{"e/part_0", 0, 2, 0}, {"e/part_1", 2, 2, 1}}, &sgd,
                             /*init=*/1.0f);
  std::vector<int64_t> ids = {3, 0, 3};
  std::vector<float> grads = {1, 2, 1};
  ASSERT_TRUE(v.ApplyGradients(ids, grads.data()).ok());
  absl::StatusOr<std::string> all = v.ReadAll();
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(Floats(*all), ElementsAre(0, 1, 1, 0));
}

// Pushes large enough that their values travel as slices over the request (ZeroCopyMessage), with
// repeats: every row lands where it should.
TEST_F(PsClusterTest, ApplyGradients_LargePushes_EveryRowApplied) {
  OptimizerDef sgd;
  sgd.set_kind(OptimizerDef::SGD);
  sgd.set_learning_rate(1.0);
  constexpr int64_t kRows = 50000, kWidth = 16;
  ShardedVariable v = Create("big", kRows, kWidth,
                             {{"big/part_0", 0, 30000, 0}, {"big/part_1", 30000, 20000, 1}}, &sgd);
  std::vector<float> want(kRows * kWidth, 0.0f);
  std::mt19937_64 rng(7);
  for (int push = 0; push < 3; ++push) {
    std::vector<int64_t> ids(40000);
    std::vector<float> grads(ids.size() * kWidth);
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<int64_t>(rng() % kRows);
      for (int64_t k = 0; k < kWidth; ++k) {
        grads[i * kWidth + k] = static_cast<float>(static_cast<int>(rng() % 9) - 4);
        want[ids[i] * kWidth + k] -= grads[i * kWidth + k];
      }
    }
    ASSERT_TRUE(v.ApplyGradients(ids, grads.data()).ok());
  }
  absl::StatusOr<std::string> all = v.ReadAll();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(Floats(*all), want);
}

// A push is answered as soon as it is certain to apply (over the data plane, before it is
// applied): a lookup or read sent right after it, on the client's other connection, still sees
// every row of it, the last ones included.
TEST_F(PsClusterTest, DensePushes_EachSeenByTheNextLookupAndRead) {
  OptimizerDef sgd;
  sgd.set_kind(OptimizerDef::SGD);
  sgd.set_learning_rate(1.0);
  constexpr int64_t kRows = 1 << 18, kWidth = 4;  // 4 MiB on one ps
  ShardedVariable v = Create("dense", kRows, kWidth, {{"dense/part_0", 0, kRows, 0}}, &sgd);
  const std::vector<float> minus_one(kRows * kWidth, -1.0f);  // SGD at rate 1: +1 everywhere
  const absl::string_view push(reinterpret_cast<const char*>(minus_one.data()),
                               minus_one.size() * sizeof(float));
  std::vector<float> last(2 * kWidth);
  for (int step = 1; step <= 10; ++step) {
    ASSERT_TRUE(v.ApplyDenseGradients(push).ok());
    ASSERT_TRUE(v.Lookup({kRows - 1, kRows - 2}, last.data()).ok());
    EXPECT_THAT(last, ::testing::Each(static_cast<float>(step))) << "step " << step;
  }
  for (int step = 11; step <= 15; ++step) {
    ASSERT_TRUE(v.ApplyDenseGradients(push).ok());
    absl::StatusOr<std::string> all = v.ReadAll();
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_THAT(Floats(*all), ::testing::Each(static_cast<float>(step))) << "step " << step;
  }
  // An assignment, the same.
  ASSERT_TRUE(v.AssignAll(std::string(push.size(), '\0')).ok());
  ASSERT_TRUE(v.Lookup({kRows - 1, kRows - 2}, last.data()).ok());
  EXPECT_THAT(last, ::testing::Each(0.0f));
}

// The request may be freed in `done`: done runs once, only after gRPC has let go of the request
// (whose large fields it sends without copying), whether the call succeeds or fails.
void UpdateFreeingInDone(PsClient* ps, const std::string& shard, int64_t rows,
                         absl::StatusCode want) {
  std::atomic<int> calls{0};
  for (int i = 0; i < 20; ++i) {
    auto* request = new UpdateRequest;
    UpdateOp* op = request->add_ops();
    op->set_shard(shard);
    op->set_kind(UpdateOp::APPLY_GRADIENT);
    op->set_dtype(DT_FLOAT32);
    std::vector<int64_t> ids(rows);
    for (size_t k = 0; k < ids.size(); ++k) ids[k] = static_cast<int64_t>(k);
    op->set_ids(std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 8));
    op->set_values(std::string(ids.size() * 16 * sizeof(float), '\0'));
    auto* response = new UpdateResponse;
    absl::Notification done;
    absl::Status status;
    ps->UpdateAsync(request, response, [&, request, response](absl::Status s) {
      delete request;
      delete response;
      status = s;
      calls.fetch_add(1);
      done.Notify();
    });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    EXPECT_EQ(status.code(), want) << status;
  }
  absl::SleepFor(absl::Milliseconds(200));  // a late second call would show here
  EXPECT_EQ(calls.load(), 20);
}

TEST_F(PsClusterTest, UpdateAsync_LargeRequestFreedInDone) {
  OptimizerDef sgd;
  sgd.set_kind(OptimizerDef::SGD);
  Create("live", 65536, 16, {{"live/part_0", 0, 65536, 0}}, &sgd);
  UpdateFreeingInDone(ps_[0], "live/part_0", 65536, absl::StatusCode::kOk);
}

TEST_F(PsClusterTest, UpdateAsync_LargeRequestFreedInDone_PsDown) {
  Create("gone", 65536, 16, {{"gone/part_0", 0, 65536, 1}});
  ASSERT_TRUE(cluster_->StopTask({"ps", 1}).ok());
  UpdateFreeingInDone(ps_[1], "gone/part_0", 65536, absl::StatusCode::kUnavailable);
}

TEST_F(PsClusterTest, AssignAdd_EightClientsConcurrently_Exact) {
  ShardedVariable v = Create("c", 8, 2, {{"c/part_0", 0, 4, 0}, {"c/part_1", 4, 4, 1}});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      const std::vector<int64_t> ids = {1, 6};
      const std::vector<float> ones(4, 1.0f);
      for (int i = 0; i < 1000; ++i) ASSERT_TRUE(v.AssignAdd(ids, ones.data()).ok());
    });
  }
  for (auto& t : threads) t.join();
  std::vector<float> out(4);
  ASSERT_TRUE(v.Lookup({1, 6}, out.data()).ok());
  EXPECT_THAT(out, ElementsAreArray(std::vector<float>(4, 8000.0f)));
}

TEST_F(PsClusterTest, BadInput_ClearErrors_NothingChanged) {
  ShardedVariable v = Create("b", 4, 2, {{"b/part_0", 0, 2, 0}, {"b/part_1", 2, 2, 1}});
  std::vector<float> out(2);
  absl::Status s = v.Lookup({7}, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("variable \"b\": id 7 (position 0) is out of range [0, 4)"));
  // A raw request that bypasses the handle: the ps itself rejects it, naming the shard.
  UpdateRequest request;
  UpdateOp* op = request.add_ops();
  op->set_shard("b/part_1");
  op->set_kind(UpdateOp::ASSIGN);
  op->set_ids(std::string(8, '\0'));  // id 0 is not on part_1
  op->set_values(Bytes({5, 5}));
  op->set_dtype(DT_FLOAT32);
  UpdateResponse response;
  s = ps_[1]->Update(request, &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("shard \"b/part_1\": assign id 0"));
  absl::StatusOr<std::string> all = v.ReadAll();
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(Floats(*all), ElementsAreArray(std::vector<float>(8, 0.0f)));

  EXPECT_EQ(ShardedVariable::Create("g", {4, 2}, DT_FLOAT32, {{"g/part_0", 0, 3, 0}}, ps_)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PsClusterTest, Batches_ManyVariables_OneRequestPerPs) {
  ShardedVariable a = Create("a", 4, 1, {{"a/part_0", 0, 2, 0}, {"a/part_1", 2, 2, 1}});
  ShardedVariable b = Create("bb", 2, 3, {{"bb", 0, 2, 1}});
  UpdateBatch update;
  std::vector<int64_t> a_ids = {0, 3};
  std::vector<float> a_vals = {10, 30};
  std::vector<int64_t> b_ids = {1};
  std::vector<float> b_vals = {1, 2, 3};
  ASSERT_TRUE(update.AddSparse(a, UpdateOp::ASSIGN, a_ids, reinterpret_cast<char*>(a_vals.data())).ok());
  ASSERT_TRUE(update.AddSparse(b, UpdateOp::ASSIGN, b_ids, reinterpret_cast<char*>(b_vals.data())).ok());
  ASSERT_TRUE(update.Run().ok());
  LookupBatch lookup;
  std::vector<float> a_out(2), b_out(3);
  ASSERT_TRUE(lookup.Add(a, {3, 0}, reinterpret_cast<char*>(a_out.data())).ok());
  ASSERT_TRUE(lookup.Add(b, {1}, reinterpret_cast<char*>(b_out.data())).ok());
  ASSERT_TRUE(lookup.Run().ok());
  EXPECT_THAT(a_out, ElementsAre(30, 10));
  EXPECT_THAT(b_out, ElementsAre(1, 2, 3));
}

// A dense push with a cache (ps/dense_cache.h) brings the variable's rows back from every shard
// on every ps as the update left them; the next push (over the data plane, which takes pushes
// in order: applied to the cache ahead) says which version its rows were, so the ps counts its
// staleness; a push that fails drops the copy.
TEST_F(PsClusterTest, DensePushWithCache_RowsComeBackFromEveryShard) {
  OptimizerDef sgd;
  sgd.set_kind(OptimizerDef::SGD);
  sgd.set_learning_rate(1.0);
  ShardedVariable v =
      Create("dw", 3, 2, {{"dw/part_0", 0, 2, 0}, {"dw/part_1", 2, 1, 1}}, &sgd, /*init=*/1.0f);
  DenseCache cache;
  std::vector<float> out(6, -7.0f);
  EXPECT_FALSE(cache.Read(v, reinterpret_cast<char*>(out.data())));
  EXPECT_THAT(out, ElementsAreArray(std::vector<float>(6, -7.0f)));  // nothing copied
  const std::vector<float> grads = {1, 2, 3, 4, 5, 6};
  const absl::string_view bytes(reinterpret_cast<const char*>(grads.data()), 24);
  for (int push = 1; push <= 2; ++push) {
    UpdateBatch update;
    update.set_step(push);
    ASSERT_TRUE(update.AddDense(v, UpdateOp::APPLY_GRADIENT, bytes, &cache).ok());
    ASSERT_TRUE(update.Run().ok());
    ASSERT_TRUE(cache.Read(v, reinterpret_cast<char*>(out.data())));
    const float n = static_cast<float>(push);
    EXPECT_THAT(out, ElementsAre(1 - n, 1 - 2 * n, 1 - 3 * n, 1 - 4 * n, 1 - 5 * n, 1 - 6 * n));
  }
  absl::StatusOr<std::string> all = v.ReadAll();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(Floats(*all), ElementsAre(-1, -3, -5, -7, -9, -11));  // the ps agrees
  // The second push said it was computed on version 1 and was applied after 1: staleness 0.
  const std::string metrics = cluster_->RenderMetrics();
  for (const char* shard :
       {"shard=\"dw/part_0\",task=\"ps:0\"", "shard=\"dw/part_1\",task=\"ps:1\""}) {
    EXPECT_THAT(metrics,
                HasSubstr(absl::StrCat("pstrain_ps_gradient_staleness_count{", shard, "} 1")));
  }
  ASSERT_TRUE(cluster_->StopTask({"ps", 1}).ok());
  UpdateBatch failing;
  ASSERT_TRUE(failing.AddDense(v, UpdateOp::APPLY_GRADIENT, bytes, &cache).ok());
  EXPECT_FALSE(failing.Run().ok());
  EXPECT_FALSE(cache.Holds(v));
}

// Rows coming back and other ops in one batch: the rows travel in a request of their own, and
// rows_back runs once they are in the cache, before Run returns; the other ops land too.
TEST_F(PsClusterTest, DensePushWithCache_RowsBackBeforeRunReturns_OtherOpsLand) {
  OptimizerDef sgd;
  sgd.set_kind(OptimizerDef::SGD);
  sgd.set_learning_rate(1.0);
  ShardedVariable w = Create("rw", 2, 1, {{"rw/part_0", 0, 1, 0}, {"rw/part_1", 1, 1, 1}}, &sgd);
  ShardedVariable e = Create("re", 4, 2, {{"re/part_0", 0, 2, 0}, {"re/part_1", 2, 2, 1}}, &sgd);
  DenseCache cache;
  const std::vector<float> grads = {1, 2};
  const std::vector<int64_t> ids = {3, 0};
  const std::vector<float> rows = {1, 1, 2, 2};
  UpdateBatch update;
  ASSERT_TRUE(update
                  .AddDense(w, UpdateOp::APPLY_GRADIENT,
                            absl::string_view(reinterpret_cast<const char*>(grads.data()), 8),
                            &cache)
                  .ok());
  ASSERT_TRUE(update
                  .AddSparse(e, UpdateOp::APPLY_GRADIENT, ids,
                             reinterpret_cast<const char*>(rows.data()))
                  .ok());
  int calls = 0;
  std::vector<float> seen(2, 0.0f);
  ASSERT_TRUE(update
                  .Run([&] {
                    ++calls;
                    EXPECT_TRUE(cache.Read(w, reinterpret_cast<char*>(seen.data())));
                  })
                  .ok());
  EXPECT_EQ(calls, 1);
  EXPECT_THAT(seen, ElementsAre(-1, -2));
  absl::StatusOr<std::string> all = e.ReadAll();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(Floats(*all), ElementsAre(-2, -2, 0, 0, 0, 0, -1, -1));
}

TEST_F(PsClusterTest, PsDown_Unavailable_NamesTask) {
  ShardedVariable v = Create("d", 2, 1, {{"d/part_0", 0, 1, 0}, {"d/part_1", 1, 1, 1}});
  ASSERT_TRUE(cluster_->StopTask({"ps", 1}).ok());
  std::vector<float> out(2);
  absl::Status s = v.Lookup({0, 1}, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("ps:1 at localhost:"));
}

std::vector<int> PsOf(const ShardedVariable& v) {
  std::vector<int> ps;
  for (const ShardLocation& s : v.shards()) ps.push_back(s.ps_task);
  return ps;
}

TEST_F(PsClusterTest, VariableCreator_FixedTwoOnTwoPs_RowsOnEachPs) {
  VariableCreator creator(ps_);
  VariableSpec spec;
  spec.name = "table";
  spec.shape = {5, 2};
  spec.partitioner.kind = PartitionerKind::kFixed;
  spec.partitioner.num_shards = 2;
  absl::StatusOr<ShardedVariable> v = creator.Create(spec);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->AssignAll(Bytes({0, 1, 2, 3, 4, 5, 6, 7, 8, 9})).ok());
  ASSERT_EQ(v->shards().size(), 2u);
  EXPECT_EQ(v->shards()[0].name, "table/part_0");
  EXPECT_EQ(v->shards()[1].name, "table/part_1");
  EXPECT_THAT(PsOf(*v), ElementsAre(0, 1));
  ReadRequest r0, r1;
  r0.add_ops()->set_shard("table/part_0");
  r1.add_ops()->set_shard("table/part_1");
  ReadResponse out0, out1;
  ASSERT_TRUE(ps_[0]->Read(r0, &out0).ok());
  ASSERT_TRUE(ps_[1]->Read(r1, &out1).ok());
  EXPECT_THAT(Floats(out0.values(0)), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THAT(Floats(out1.values(0)), ElementsAre(6, 7, 8, 9));
}

TEST_F(PsClusterTest, VariableCreator_RoundRobinOneCounter_AcrossVariables) {
  VariableCreator creator(ps_);
  VariableSpec four;
  four.name = "four";
  four.shape = {8, 1};
  four.partitioner.kind = PartitionerKind::kFixed;
  four.partitioner.num_shards = 4;
  VariableSpec three = four;
  three.name = "three";
  three.partitioner.num_shards = 3;
  VariableSpec single;
  single.name = "single";
  single.shape = {3};
  absl::StatusOr<ShardedVariable> a = creator.Create(four);
  absl::StatusOr<ShardedVariable> b = creator.Create(three);
  absl::StatusOr<ShardedVariable> c = creator.Create(single);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_THAT(PsOf(*a), ElementsAre(0, 1, 0, 1));
  EXPECT_THAT(PsOf(*b), ElementsAre(0, 1, 0));  // the next variable starts on ps 0 again
  EXPECT_THAT(PsOf(*c), ElementsAre(1));        // after 7 shards, the counter points at ps 1
  EXPECT_EQ(c->shards()[0].name, "single");
  // The split: 8 rows over 3 shards -> 3, 3, 2.
  EXPECT_EQ(b->shards()[0].num_rows, 3);
  EXPECT_EQ(b->shards()[2].num_rows, 2);

  // The same spec again is the same variable; a different spec under the name is an error.
  absl::StatusOr<ShardedVariable> again = creator.Create(three);
  ASSERT_TRUE(again.ok());
  EXPECT_THAT(PsOf(*again), ElementsAre(0, 1, 0));
  three.shape = {9, 1};
  EXPECT_EQ(creator.Create(three).status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(PsClusterTest, VariableCreator_MinSizeWithInitializerAndAdagrad_Trains) {
  VariableCreator creator(ps_);
  VariableSpec spec;
  spec.name = "emb";
  spec.shape = {6, 1};
  spec.partitioner.kind = PartitionerKind::kMinSize;
  spec.partitioner.min_shard_bytes = 4;
  spec.partitioner.max_shards = 2;
  spec.initializer.set_kind(InitializerDef::UNIFORM);
  spec.initializer.set_minval(-1);
  spec.initializer.set_maxval(1);
  spec.initializer.set_seed(7);
  spec.optimizer.emplace();
  spec.optimizer->set_kind(OptimizerDef::ADAGRAD);
  absl::StatusOr<ShardedVariable> v = creator.Create(spec);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->shards().size(), 2u);
  absl::StatusOr<std::string> before = v->ReadAll();
  ASSERT_TRUE(before.ok());
  // Same seed, one shard, another cluster layout: the same table.
  VariableSpec unsharded = spec;
  unsharded.name = "emb_copy";
  unsharded.partitioner = PartitionerOptions();
  absl::StatusOr<ShardedVariable> copy = creator.Create(unsharded);
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(*copy->ReadAll(), *before) << "initial values must not depend on the sharding";

  std::vector<float> grads(6, 1.0f);
  ASSERT_TRUE(v->ApplyGradients({0, 1, 2, 3, 4, 5}, grads.data()).ok());
  std::vector<float> b = Floats(*before), a = Floats(*v->ReadAll());
  for (int i = 0; i < 6; ++i) EXPECT_LT(a[i], b[i]) << "a positive gradient lowers every row";
}

TEST_F(PsClusterTest, VariableCreator_BadSpecs_ClearErrors) {
  VariableCreator creator(ps_);
  VariableSpec spec;
  spec.name = "bad";
  spec.shape = {4, 2};
  spec.partitioner.kind = PartitionerKind::kFixed;
  spec.partitioner.num_shards = 0;
  absl::Status s = creator.Create(spec).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("variable \"bad\""));
  EXPECT_THAT(std::string(s.message()), HasSubstr("num_shards"));
  spec.partitioner = PartitionerOptions();
  spec.shape = {-1, 2};
  EXPECT_THAT(std::string(creator.Create(spec).status().message()), HasSubstr("negative"));
  spec.shape = {4, 2};
  spec.dtype = DType::kString;
  EXPECT_THAT(std::string(creator.Create(spec).status().message()), HasSubstr("dtype string"));
}

}  // namespace
}  // namespace pstrain
