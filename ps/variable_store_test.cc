#include "ps/variable_store.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::AllOf;
using ::testing::HasSubstr;

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
template <typename T>
std::vector<T> FromBytes(const std::string& s) {
  std::vector<T> v(s.size() / sizeof(T));
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

// A float32 shard of `rows` x `width` holding rows [offset, offset + rows) of a `total`-row table.
VariableShardDef FloatShard(const std::string& name, int64_t total, int64_t offset, int64_t rows,
                            int64_t width, float init = 0) {
  VariableShardDef def;
  def.set_name(name);
  def.set_variable(name);
  def.add_full_shape(total);
  def.add_full_shape(width);
  def.set_dtype(DT_FLOAT32);
  def.set_row_offset(offset);
  def.set_num_rows(rows);
  def.mutable_initializer()->set_kind(InitializerDef::CONSTANT);
  def.mutable_initializer()->set_value(init);
  return def;
}

// The one shard of a dynamic table `name` of rows of `dim` float32, zeros for new keys.
VariableShardDef DynamicShardDef(const std::string& name, int64_t dim) {
  VariableShardDef def;
  def.set_name(name);
  def.set_variable(name);
  def.add_full_shape(dim);
  def.set_dtype(DT_FLOAT32);
  def.mutable_initializer()->set_kind(InitializerDef::ZEROS);
  def.set_num_shards(1);
  def.mutable_dynamic()->set_dim(dim);
  return def;
}

// An allocator for the serialized replies (LookupSerialized, ReadSerialized): `out`, filled with
// `fill` until the reply is written over it.
std::function<char*(size_t)> Into(std::string* out, char fill = '\0') {
  return [out, fill](size_t bytes) {
    out->assign(bytes, fill);
    return out->data();
  };
}

UpdateOp SparseOp(const std::string& shard, UpdateOp::Kind kind, std::vector<int64_t> ids,
                  std::vector<float> values) {
  UpdateOp op;
  op.set_shard(shard);
  op.set_kind(kind);
  op.set_ids(Bytes(ids));
  op.set_values(Bytes(values));
  op.set_dtype(DT_FLOAT32);
  return op;
}

std::vector<float> ReadAll(const VariableStore& store, const std::string& shard) {
  ReadRequest request;
  request.add_ops()->set_shard(shard);
  ReadResponse response;
  absl::Status s = store.Read(request, &response);
  EXPECT_TRUE(s.ok()) << s;
  return s.ok() ? FromBytes<float>(response.values(0)) : std::vector<float>();
}

std::vector<float> LookupRows(const VariableStore& store, const std::string& shard,
                              std::vector<int64_t> ids) {
  LookupRequest request;
  LookupOp* op = request.add_ops();
  op->set_shard(shard);
  op->set_ids(Bytes(ids));
  LookupResponse response;
  absl::Status s = store.Lookup(request, &response);
  EXPECT_TRUE(s.ok()) << s;
  return s.ok() ? FromBytes<float>(response.values(0)) : std::vector<float>();
}

class VariableStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Rows 5..9 of a 10 x 2 table, values 0..9 written by assign.
    ASSERT_TRUE(store_.CreateShards({FloatShard("t/part_1", 10, 5, 5, 2)}).ok());
    UpdateRequest request;
    UpdateOp* op = request.add_ops();
    op->set_shard("t/part_1");
    op->set_kind(UpdateOp::ASSIGN);
    op->mutable_range();  // whole shard
    op->set_values(Bytes(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
    op->set_dtype(DT_FLOAT32);
    ASSERT_TRUE(store_.Update(request).ok());
  }

  absl::Status UpdateOne(const UpdateOp& op) {
    UpdateRequest request;
    *request.add_ops() = op;
    return store_.Update(request);
  }

  VariableStore store_;
};

TEST_F(VariableStoreTest, Lookup_GlobalIds_RowsInCallerOrder) {
  EXPECT_THAT(LookupRows(store_, "t/part_1", {9, 5, 7, 5}), ElementsAre(8, 9, 0, 1, 4, 5, 0, 1));
}

TEST_F(VariableStoreTest, Read_Range_Rows) {
  ReadRequest request;
  ReadOp* op = request.add_ops();
  op->set_shard("t/part_1");
  op->mutable_range()->set_row_begin(6);
  op->mutable_range()->set_row_end(8);
  ReadResponse response;
  ASSERT_TRUE(store_.Read(request, &response).ok());
  EXPECT_THAT(FromBytes<float>(response.values(0)), ElementsAre(2, 3, 4, 5));
}

TEST_F(VariableStoreTest, AssignAdd_RepeatedIds_AddedEachTime) {
  ASSERT_TRUE(UpdateOne(SparseOp("t/part_1", UpdateOp::ASSIGN_ADD, {6, 6}, {1, 1, 10, 10})).ok());
  EXPECT_THAT(LookupRows(store_, "t/part_1", {6}), ElementsAre(13, 14));
}

TEST_F(VariableStoreTest, CreateShards_SameDefinition_NoOp_DifferentDefinition_Error) {
  absl::StatusOr<std::vector<bool>> again = store_.CreateShards({FloatShard("t/part_1", 10, 5, 5, 2)});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_THAT(*again, ElementsAre(false));
  EXPECT_THAT(ReadAll(store_, "t/part_1"), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9))
      << "re-creating must not reinitialize";
  absl::StatusOr<std::vector<bool>> different =
      store_.CreateShards({FloatShard("t/part_1", 10, 5, 5, 3)});
  EXPECT_EQ(different.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(different.status().message()),
              HasSubstr("\"t/part_1\" already exists with a different definition"));
  EXPECT_THAT(std::string(different.status().message()), HasSubstr("full_shape"));
}

TEST_F(VariableStoreTest, CreateShards_OneBad_NoneCreated) {
  VariableShardDef bad = FloatShard("u", 4, 0, 5, 1);  // 5 rows of a 4-row table
  absl::StatusOr<std::vector<bool>> created =
      store_.CreateShards({FloatShard("ok", 4, 0, 4, 1), bad});
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(created.status().message()), HasSubstr("shard \"u\": rows [0, 5)"));
  EXPECT_EQ(store_.Find("ok"), nullptr);
  EXPECT_EQ(store_.CreateShards({FloatShard("a", 4, 0, 4, 1), FloatShard("a", 4, 0, 4, 1)})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(VariableStoreTest, BadInput_SpecificErrors) {
  LookupRequest lookup;
  lookup.add_ops()->set_shard("nope");
  LookupResponse lookup_response;
  absl::Status s = store_.Lookup(lookup, &lookup_response);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("unknown variable shard \"nope\""));

  struct Case {
    UpdateOp op;
    const char* message;
  };
  UpdateOp wrong_dtype = SparseOp("t/part_1", UpdateOp::ASSIGN, {5}, {1, 2});
  wrong_dtype.set_dtype(DT_INT64);
  UpdateOp not_whole = SparseOp("t/part_1", UpdateOp::ASSIGN, {5}, {1, 2});
  not_whole.set_values(not_whole.values() + "x");
  UpdateOp odd_ids = SparseOp("t/part_1", UpdateOp::ASSIGN, {5}, {1, 2});
  odd_ids.set_ids(odd_ids.ids() + "xyz");
  std::vector<Case> cases = {
      {SparseOp("t/part_1", UpdateOp::ASSIGN, {4}, {1, 2}),
       "assign id 4 (position 0) is out of range; this shard holds rows [5, 10)"},
      {SparseOp("t/part_1", UpdateOp::ASSIGN, {10}, {1, 2}), "id 10 (position 0) is out of range"},
      {SparseOp("t/part_1", UpdateOp::ASSIGN, {5}, {1, 2, 3}),
       "not a whole number of rows of 2 float32"},
      {SparseOp("t/part_1", UpdateOp::ASSIGN, {5, 6}, {1, 2}), "1 rows of values for 2 target rows"},
      {SparseOp("t/part_1", UpdateOp::APPLY_GRADIENT, {5}, {1, 2}), "has no optimizer"},
      {wrong_dtype, "values are DT_INT64 but the variable is DT_FLOAT32"},
      {not_whole, "not a whole number of rows"},
      {odd_ids, "not whole int64s"},
  };
  for (const Case& c : cases) {
    absl::Status status = UpdateOne(c.op);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(status.message()), HasSubstr("t/part_1"));
  }
  EXPECT_THAT(ReadAll(store_, "t/part_1"), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
}

TEST_F(VariableStoreTest, Update_LaterOpInvalid_NothingApplied) {
  UpdateRequest request;
  *request.add_ops() = SparseOp("t/part_1", UpdateOp::ASSIGN_ADD, {5}, {100, 100});
  *request.add_ops() = SparseOp("t/part_1", UpdateOp::ASSIGN_ADD, {99}, {1, 1});
  EXPECT_EQ(store_.Update(request).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ReadAll(store_, "t/part_1"), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
}

TEST(VariableStoreConcurrencyTest, AssignAdd_EightClients_NoLostUpdates) {
  VariableStore store;
  ASSERT_TRUE(store.CreateShards({FloatShard("c", 64, 0, 64, 4)}).ok());
  const std::vector<int64_t> ids = {0, 1, 2, 3, 17, 63};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        UpdateRequest request;
        *request.add_ops() = SparseOp("c", UpdateOp::ASSIGN_ADD, ids,
                                      std::vector<float>(ids.size() * 4, 1.0f));
        ASSERT_TRUE(store.Update(request).ok());
      }
    });
  }
  for (auto& t : clients) t.join();
  std::vector<float> rows = LookupRows(store, "c", ids);
  EXPECT_THAT(rows, ElementsAreArray(std::vector<float>(ids.size() * 4, 8000.0f)));
  EXPECT_THAT(LookupRows(store, "c", {5}), ElementsAre(0, 0, 0, 0));
}

// A shard of float rows under SGD at rate 1 (var -= g: a gradient of -1 adds 1) on a store with a
// pool. Run() applies `big` twice side by side (kRounds each) and sparse assign-adds of 1 to the
// first kSome rows of `all` (every row once, shuffled), while readers read the shard until the
// writers end; it counts the rows a reader saw half updated (every update adds the same to each
// element of a row).
struct ConcurrentUpdates {
  static constexpr int64_t kRows = 20000, kWidth = 16, kSome = 3000;
  static constexpr int kRounds = 15;
  const std::string shard;
  VariableStore store{/*data_threads=*/3};
  std::vector<int64_t> all;

  explicit ConcurrentUpdates(std::string name) : shard(std::move(name)) {
    VariableShardDef def = FloatShard(shard, kRows, 0, kRows, kWidth);
    def.mutable_optimizer()->set_kind(OptimizerDef::SGD);
    def.mutable_optimizer()->set_learning_rate(1.0);
    EXPECT_TRUE(store.CreateShards({def}).ok());
    for (int64_t i = 0; i < kRows; ++i) all.push_back((i * 7919) % kRows);
  }

  int64_t Run(const UpdateRequest& big,
              const std::vector<std::function<std::vector<float>()>>& reads) {
    std::atomic<bool> stop{false};
    std::atomic<int64_t> torn{0};
    std::vector<std::thread> writers, readers;
    for (int w = 0; w < 2; ++w) {
      writers.emplace_back([&] {
        for (int i = 0; i < kRounds; ++i) ASSERT_TRUE(store.Update(big).ok());
      });
    }
    writers.emplace_back([&] {
      const std::vector<int64_t> some(all.begin(), all.begin() + kSome);
      UpdateRequest request;
      *request.add_ops() = SparseOp(shard, UpdateOp::ASSIGN_ADD, some,
                                    std::vector<float>(some.size() * kWidth, 1.0f));
      for (int i = 0; i < kRounds; ++i) ASSERT_TRUE(store.Update(request).ok());
    });
    for (const auto& read : reads) {
      readers.emplace_back([&] {
        while (!stop.load()) {
          const std::vector<float> got = read();
          for (size_t i = 0; i + kWidth <= got.size(); i += kWidth) {
            for (int64_t k = 1; k < kWidth; ++k) torn += got[i + k] != got[i];
          }
        }
      });
    }
    for (std::thread& t : writers) t.join();
    stop = true;
    for (std::thread& t : readers) t.join();
    return torn.load();
  }

  // The shard after Run(): every row got both writers' applies, all[0..kSome) the assign-adds too.
  std::vector<float> Want() const {
    std::vector<float> want(kRows * kWidth, 2.0f * kRounds);
    for (int64_t j = 0; j < kSome; ++j) {
      for (int64_t k = 0; k < kWidth; ++k) want[all[j] * kWidth + k] += kRounds;
    }
    return want;
  }
};

// Large sparse applies split over the pool, sparse assign-adds and lookups, all at once: whichever
// of them bypasses the row locks (RowLockBypass) at a given moment, no update is lost and no
// lookup sees a row half updated.
TEST(VariableStoreConcurrencyTest, BigAppliesAssignAddsAndLookupsAtOnce_ExactAndNeverTorn) {
  ConcurrentUpdates c("m");
  UpdateRequest apply;
  *apply.add_ops() =
      SparseOp("m", UpdateOp::APPLY_GRADIENT, c.all,
               std::vector<float>(ConcurrentUpdates::kRows * ConcurrentUpdates::kWidth, -1.0f));
  auto lookup = [&] { return LookupRows(c.store, "m", c.all); };
  EXPECT_EQ(c.Run(apply, {lookup, lookup}), 0);
  EXPECT_EQ(ReadAll(c.store, "m"), c.Want());
}

// The same for dense applies over the whole range (split over the pool, applied in spans without
// row locks while nothing else runs on the shard, by locked blocks otherwise), beside sparse
// assign-adds, lookups and dense reads.
TEST(VariableStoreConcurrencyTest, DenseAppliesAssignAddsLookupsAndReadsAtOnce_ExactAndNeverTorn) {
  ConcurrentUpdates c("d");
  UpdateRequest apply;
  UpdateOp* op = apply.add_ops();
  op->set_shard("d");
  op->set_kind(UpdateOp::APPLY_GRADIENT);
  op->mutable_range();
  op->set_values(Bytes(
      std::vector<float>(ConcurrentUpdates::kRows * ConcurrentUpdates::kWidth, -1.0f)));
  op->set_dtype(DT_FLOAT32);
  EXPECT_EQ(c.Run(apply, {[&] { return LookupRows(c.store, "d", c.all); },
                          [&] { return ReadAll(c.store, "d"); }}),
            0);
  EXPECT_EQ(ReadAll(c.store, "d"), c.Want());
}

TEST(VariableStoreGradientTest, ApplySparse_RepeatedIds_SummedFirst) {
  // Adagrad is not linear in g: applying g1 then g2 differs from applying g1 + g2 once.
  VariableShardDef def = FloatShard("e", 4, 0, 4, 1, /*init=*/1.0f);
  def.mutable_optimizer()->set_kind(OptimizerDef::ADAGRAD);
  def.mutable_optimizer()->set_learning_rate(0.1);
  VariableStore repeated, summed;
  ASSERT_TRUE(repeated.CreateShards({def}).ok());
  ASSERT_TRUE(summed.CreateShards({def}).ok());
  UpdateRequest a, b;
  *a.add_ops() = SparseOp("e", UpdateOp::APPLY_GRADIENT, {2, 0, 2}, {0.5f, 1.0f, 0.25f});
  *b.add_ops() = SparseOp("e", UpdateOp::APPLY_GRADIENT, {0, 2}, {1.0f, 0.75f});
  ASSERT_TRUE(repeated.Update(a).ok());
  ASSERT_TRUE(summed.Update(b).ok());
  EXPECT_EQ(ReadAll(repeated, "e"), ReadAll(summed, "e"));
  EXPECT_EQ(ReadAll(repeated, "e")[1], 1.0f) << "rows without gradients are untouched";
  std::shared_ptr<VariableShard> shard = repeated.Find("e");
  EXPECT_FLOAT_EQ(shard->slot_data(0)[2], 0.1f + 0.75f * 0.75f);
  EXPECT_EQ(shard->apply_count(), 1);
}

TEST(VariableStoreGradientTest, ApplySparse_SeveralIdsRepeatedSeveralTimes_SummedFirst) {
  // Width 19: the vectorized row update's tail runs too. Adam: two slots.
  const int64_t width = 19;
  VariableShardDef def = FloatShard("e", 5, 0, 5, width, /*init=*/0.5f);
  def.mutable_optimizer()->set_kind(OptimizerDef::ADAM);
  def.mutable_optimizer()->set_learning_rate(0.01);
  VariableStore repeated, summed;
  ASSERT_TRUE(repeated.CreateShards({def}).ok());
  ASSERT_TRUE(summed.CreateShards({def}).ok());
  const std::vector<int64_t> ids = {3, 1, 3, 3, 0, 1};
  std::vector<float> grads(ids.size() * width);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * static_cast<float>(i % 37) - 0.1f;
  std::map<int64_t, std::vector<float>> sums;
  std::vector<int64_t> order;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto [it, fresh] = sums.try_emplace(ids[i], std::vector<float>(width, 0.0f));
    if (fresh) order.push_back(ids[i]);
    for (int64_t k = 0; k < width; ++k) it->second[k] += grads[i * width + k];
  }
  std::vector<float> summed_grads;
  for (int64_t id : order) {
    summed_grads.insert(summed_grads.end(), sums[id].begin(), sums[id].end());
  }
  UpdateRequest a, b;
  *a.add_ops() = SparseOp("e", UpdateOp::APPLY_GRADIENT, ids, grads);
  *b.add_ops() = SparseOp("e", UpdateOp::APPLY_GRADIENT, order, summed_grads);
  ASSERT_TRUE(repeated.Update(a).ok());
  ASSERT_TRUE(summed.Update(b).ok());
  const std::vector<float> got = ReadAll(repeated, "e"), want = ReadAll(summed, "e");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << i;
  for (int64_t k = 0; k < width; ++k) EXPECT_EQ(got[2 * width + k], 0.5f) << "row 2 untouched";
}

TEST(VariableStoreGradientTest, ApplyDense_WholeShard_EveryRow) {
  VariableShardDef def = FloatShard("w", 3, 0, 3, 2, /*init=*/1.0f);
  def.mutable_optimizer()->set_kind(OptimizerDef::SGD);
  def.mutable_optimizer()->set_learning_rate(0.5);
  VariableStore store;
  ASSERT_TRUE(store.CreateShards({def}).ok());
  UpdateRequest request;
  UpdateOp* op = request.add_ops();
  op->set_shard("w");
  op->set_kind(UpdateOp::APPLY_GRADIENT);
  op->mutable_range();
  op->set_values(Bytes(std::vector<float>{1, 2, 0, 0, -2, 4}));
  op->set_dtype(DT_FLOAT32);
  ASSERT_TRUE(store.Update(request).ok());
  EXPECT_THAT(ReadAll(store, "w"), ElementsAre(0.5, 0, 1, 1, 2, -1));
}

// A training lookup notes the shard's version; the same step's dense gradient is applied at its
// rate divided by its staleness (INVERSE), and the staleness is counted. Sparse gradients and
// steps without a noted read take the full rate.
TEST(VariableStoreGradientTest, ApplyDense_StaleGradient_RateScaledAndStalenessCounted) {
  VariableShardDef def = FloatShard("w", 1, 0, 1, 1, /*init=*/0.0f);
  def.mutable_optimizer()->set_kind(OptimizerDef::SGD);
  def.mutable_optimizer()->set_learning_rate(1.0);
  def.mutable_optimizer()->set_staleness_scaling(OptimizerDef::STALENESS_INVERSE);
  VariableStore store;
  ASSERT_TRUE(store.CreateShards({def}).ok());
  auto lookup = [&](int64_t step) {
    LookupRequest request;
    request.set_step(step);
    LookupOp* op = request.add_ops();
    op->set_shard("w");
    op->set_ids(Bytes(std::vector<int64_t>{0}));
    LookupResponse response;
    ASSERT_TRUE(store.Lookup(request, &response).ok());
  };
  auto apply = [&](int64_t step, float g) {
    UpdateRequest request;
    request.set_step(step);
    UpdateOp* op = request.add_ops();
    op->set_shard("w");
    op->set_kind(UpdateOp::APPLY_GRADIENT);
    op->mutable_range();
    op->set_values(Bytes(std::vector<float>{g}));
    op->set_dtype(DT_FLOAT32);
    ASSERT_TRUE(store.Update(request).ok());
  };
  // Steps 1..4 read the shard before any of their gradients lands.
  for (int64_t step = 1; step <= 4; ++step) lookup(step);
  apply(1, 1.0f);  // staleness 0: -1
  apply(2, 1.0f);  // 1: -1
  apply(3, 1.0f);  // 2: -0.5
  apply(4, 1.0f);  // 3: -1/3
  apply(9, 1.0f);  // no read noted: -1
  EXPECT_THAT(ReadAll(store, "w"), ElementsAre(testing::FloatNear(-(3 + 0.5 + 1.0 / 3), 1e-6)));
  const auto staleness = store.Staleness();
  ASSERT_EQ(staleness.size(), 1u);
  EXPECT_EQ(staleness[0].first, "w");
  EXPECT_EQ(staleness[0].second.count, 4);
  EXPECT_DOUBLE_EQ(staleness[0].second.mean, 1.5);
  EXPECT_EQ(staleness[0].second.max, 3);
  EXPECT_EQ(staleness[0].second.unknown, 1);
}

// An update with return_rows answers with each dense op's rows as the update left them and its
// shard's version; a sparse op (or a dynamic table's) gets an empty value and version 0.
TEST(VariableStoreGradientTest, ReturnRows_DenseOpsRowsAfterTheUpdateAndVersions) {
  VariableShardDef w = FloatShard("w", 2, 0, 2, 2, /*init=*/1.0f);
  w.mutable_optimizer()->set_kind(OptimizerDef::SGD);
  w.mutable_optimizer()->set_learning_rate(0.5);
  VariableShardDef e = FloatShard("e", 3, 0, 3, 1, /*init=*/0.0f);
  e.mutable_optimizer()->set_kind(OptimizerDef::SGD);
  e.mutable_optimizer()->set_learning_rate(1.0);
  VariableStore store;
  ASSERT_TRUE(store.CreateShards({w, e}).ok());
  UpdateRequest request;
  request.set_return_rows(true);
  UpdateOp* op = request.add_ops();
  op->set_shard("w");
  op->set_kind(UpdateOp::APPLY_GRADIENT);
  op->mutable_range();
  op->set_values(Bytes(std::vector<float>{1, 2, 3, 4}));
  op->set_dtype(DT_FLOAT32);
  *request.add_ops() =
      SparseOp("e", UpdateOp::APPLY_GRADIENT, {1}, std::vector<float>{2.0f});
  UpdateResponse response;
  ASSERT_TRUE(store.Update(request, &response).ok());
  ASSERT_EQ(response.values_size(), 2);
  ASSERT_EQ(response.versions_size(), 2);
  EXPECT_EQ(response.values(0), Bytes(std::vector<float>{0.5f, 0.0f, -0.5f, -1.0f}));
  EXPECT_EQ(response.versions(0), 1);
  EXPECT_TRUE(response.values(1).empty());
  EXPECT_EQ(response.versions(1), 0);
  // Again: version 2. Without return_rows the reply stays empty.
  ASSERT_TRUE(store.Update(request, &response).ok());
  EXPECT_EQ(response.versions(0), 2);
  request.set_return_rows(false);
  UpdateResponse empty;
  ASSERT_TRUE(store.Update(request, &empty).ok());
  EXPECT_EQ(empty.values_size(), 0);
}

// The same over the wire format a server gets (UpdateWire): the reply is UpdateResponse's wire
// format, the update is not answered early, and a request that doesn't ask is.
TEST(VariableStoreGradientTest, ReturnRows_Wire_ReplyParsesAndIsNotAnsweredEarly) {
  VariableShardDef w = FloatShard("w", 1, 0, 1, 3, /*init=*/0.0f);
  w.mutable_optimizer()->set_kind(OptimizerDef::SGD);
  w.mutable_optimizer()->set_learning_rate(1.0);
  VariableStore store;
  ASSERT_TRUE(store.CreateShards({w}).ok());
  UpdateRequest request;
  request.set_step(7);
  request.set_return_rows(true);
  UpdateOp* op = request.add_ops();
  op->set_shard("w");
  op->set_kind(UpdateOp::APPLY_GRADIENT);
  op->mutable_range();
  op->set_values(Bytes(std::vector<float>{1, 2, 3}));
  op->set_dtype(DT_FLOAT32);
  const std::string bytes = request.SerializeAsString();
  std::string reply;
  bool answered = false;
  ASSERT_TRUE(store
                  .UpdateWire({bytes}, [&] { return answered = true; },
                              [&](size_t n) {
                                reply.resize(n);
                                return reply.data();
                              })
                  .ok());
  EXPECT_FALSE(answered);
  UpdateResponse response;
  ASSERT_TRUE(response.ParseFromString(reply));
  ASSERT_EQ(response.values_size(), 1);
  EXPECT_EQ(response.values(0), Bytes(std::vector<float>{-1, -2, -3}));
  EXPECT_EQ(response.versions(0), 1);
  request.set_return_rows(false);
  reply.clear();
  ASSERT_TRUE(store
                  .UpdateWire({request.SerializeAsString()}, [&] { return answered = true; },
                              [&](size_t n) {
                                reply.resize(n);
                                return reply.data();
                              })
                  .ok());
  EXPECT_TRUE(answered);
  EXPECT_TRUE(reply.empty());
}

// A gradient computed on rows that came back from a push carries their version: its staleness is
// the gradients applied since, with or without a training read noted for its step.
TEST(VariableStoreGradientTest, ReadVersion_StalenessFromTheVersionTheGradientSays) {
  VariableShardDef def = FloatShard("w", 1, 0, 1, 1, /*init=*/0.0f);
  def.mutable_optimizer()->set_kind(OptimizerDef::SGD);
  def.mutable_optimizer()->set_learning_rate(1.0);
  VariableStore store;
  ASSERT_TRUE(store.CreateShards({def}).ok());
  auto apply = [&](int64_t step, int64_t read_version) {
    UpdateRequest request;
    request.set_step(step);
    UpdateOp* op = request.add_ops();
    op->set_shard("w");
    op->set_kind(UpdateOp::APPLY_GRADIENT);
    op->mutable_range();
    op->set_values(Bytes(std::vector<float>{1.0f}));
    op->set_dtype(DT_FLOAT32);
    op->set_read_version(read_version);
    ASSERT_TRUE(store.Update(request).ok());
  };
  apply(1, 0);  // no read noted, no version: unknown
  apply(2, 0);  // unknown
  apply(3, 2);  // computed on version 2, applied after 2: staleness 0
  apply(4, 1);  // version 1, applied after 3: 2
  LookupRequest read;
  read.set_step(5);
  LookupOp* op = read.add_ops();
  op->set_shard("w");
  op->set_ids(Bytes(std::vector<int64_t>{0}));
  LookupResponse values;
  ASSERT_TRUE(store.Lookup(read, &values).ok());  // step 5 read at version 4
  apply(5, 3);  // the version given wins over the read noted: 4 - 3 = 1
  const auto staleness = store.Staleness();
  ASSERT_EQ(staleness.size(), 1u);
  EXPECT_EQ(staleness[0].second.count, 3);
  EXPECT_EQ(staleness[0].second.unknown, 2);
  EXPECT_EQ(staleness[0].second.max, 2);
  EXPECT_DOUBLE_EQ(staleness[0].second.mean, 1.0);
}

// A dense apply updates a lock block of rows as one long row; every optimizer is elementwise, so
// it must equal the sparse path's row-by-row apply exactly, for every optimizer and partial blocks.
TEST(VariableStoreGradientTest, ApplyDense_BlocksOfNarrowRows_EqualRowByRow) {
  for (const OptimizerDef::Kind kind : {OptimizerDef::SGD, OptimizerDef::MOMENTUM,
                                        OptimizerDef::ADAGRAD, OptimizerDef::ADAM,
                                        OptimizerDef::FTRL}) {
    SCOPED_TRACE(OptimizerDef::Kind_Name(kind));
    const int64_t rows = 300;  // width 1: 64 rows per lock block, the last one partial
    VariableShardDef def = FloatShard("w", rows, 0, rows, 1, /*init=*/0.25f);
    def.mutable_optimizer()->set_kind(kind);
    def.mutable_optimizer()->set_learning_rate(0.1);
    VariableStore dense, sparse;
    ASSERT_TRUE(dense.CreateShards({def}).ok());
    ASSERT_TRUE(sparse.CreateShards({def}).ok());
    std::vector<float> grads(rows);
    std::vector<int64_t> ids(rows);
    for (int64_t i = 0; i < rows; ++i) {
      grads[i] = 0.01f * static_cast<float>(i % 17) - 0.07f;
      ids[i] = i;
    }
    for (int step = 0; step < 3; ++step) {
      UpdateRequest a, b;
      UpdateOp* op = a.add_ops();
      op->set_shard("w");
      op->set_kind(UpdateOp::APPLY_GRADIENT);
      op->mutable_range();
      op->set_values(Bytes(grads));
      op->set_dtype(DT_FLOAT32);
      *b.add_ops() = SparseOp("w", UpdateOp::APPLY_GRADIENT, ids, grads);
      ASSERT_TRUE(dense.Update(a).ok());
      ASSERT_TRUE(sparse.Update(b).ok());
    }
    EXPECT_EQ(ReadAll(dense, "w"), ReadAll(sparse, "w"));
  }
}

// Requests large enough to be split across the store's pool give exactly what one thread gives:
// sparse applies with repeated ids, lookups, and dense applies.
TEST(VariableStoreThreadsTest, LargeRequestsSplitAcrossThreads_SameAsOneThread) {
  const int64_t rows = 50000, width = 4;
  VariableShardDef def = FloatShard("t", rows, 0, rows, width, /*init=*/0.5f);
  def.mutable_optimizer()->set_kind(OptimizerDef::ADAGRAD);
  def.mutable_optimizer()->set_learning_rate(0.1);
  VariableStore pooled(/*data_threads=*/3), single(/*data_threads=*/0);
  ASSERT_TRUE(pooled.CreateShards({def}).ok());
  ASSERT_TRUE(single.CreateShards({def}).ok());
  std::mt19937_64 rng(5);
  for (int step = 0; step < 3; ++step) {
    std::vector<int64_t> ids(30000);
    for (int64_t& id : ids) id = static_cast<int64_t>(rng() % 20000);  // many repeats
    std::vector<float> grads(ids.size() * width);
    for (float& g : grads) g = static_cast<float>(rng() % 1000) / 1000.0f - 0.5f;
    UpdateRequest sparse;
    *sparse.add_ops() = SparseOp("t", UpdateOp::APPLY_GRADIENT, ids, grads);
    UpdateRequest dense;
    UpdateOp* op = dense.add_ops();
    op->set_shard("t");
    op->set_kind(UpdateOp::APPLY_GRADIENT);
    op->mutable_range();
    std::vector<float> all(rows * width);
    for (float& g : all) g = static_cast<float>(rng() % 1000) / 1000.0f - 0.5f;
    op->set_values(Bytes(all));
    op->set_dtype(DT_FLOAT32);
    for (VariableStore* store : {&pooled, &single}) {
      ASSERT_TRUE(store->Update(sparse).ok());
      ASSERT_TRUE(store->Update(dense).ok());
    }
  }
  EXPECT_EQ(ReadAll(pooled, "t"), ReadAll(single, "t"));
  std::vector<int64_t> ids(rows);
  for (int64_t i = 0; i < rows; ++i) ids[i] = rows - 1 - i;
  EXPECT_EQ(LookupRows(pooled, "t", ids), LookupRows(single, "t", ids));
  EXPECT_EQ(pooled.Find("t")->apply_count(), 6);
}

// The wire-format lookup parses into exactly what Lookup returns, for several ops (one empty, one
// whose length needs a 3-byte varint); and a bad request allocates nothing.
TEST(VariableStoreLookupSerializedTest, ParsesToTheSameResponse) {
  VariableStore store;
  ASSERT_TRUE(store.CreateShards({FloatShard("a", 5000, 0, 5000, 8, /*init=*/0.0f),
                                  FloatShard("b", 10, 0, 10, 1, /*init=*/2.0f)})
                  .ok());
  UpdateRequest assign;
  std::vector<int64_t> all(5000);
  std::vector<float> rows(5000 * 8);
  for (int64_t i = 0; i < 5000; ++i) all[i] = i;
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
  *assign.add_ops() = SparseOp("a", UpdateOp::ASSIGN, all, rows);
  ASSERT_TRUE(store.Update(assign).ok());
  LookupRequest request;
  auto add = [&](const std::string& shard, const std::vector<int64_t>& ids) {
    LookupOp* op = request.add_ops();
    op->set_shard(shard);
    op->set_ids(Bytes(ids));
  };
  std::vector<int64_t> many(3000);
  for (int64_t i = 0; i < 3000; ++i) many[i] = (i * 7) % 5000;
  add("a", many);  // 3000 * 32 bytes: a 3-byte varint length
  add("b", {});
  add("b", {3, 3, 9});
  LookupResponse expected;
  ASSERT_TRUE(store.Lookup(request, &expected).ok());
  std::string wire;
  ASSERT_TRUE(store.LookupSerialized(request, Into(&wire, '\xff')).ok());
  LookupResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  ASSERT_EQ(parsed.values_size(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(parsed.values(i), expected.values(i)) << i;
  EXPECT_EQ(wire, expected.SerializeAsString());

  add("a", {5000});  // out of range
  bool allocated = false;
  EXPECT_THAT(store.LookupSerialized(request,
                                     [&](size_t bytes) {
                                       allocated = true;
                                       wire.assign(bytes, 0);
                                       return wire.data();
                                     }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("5000")));
  EXPECT_FALSE(allocated);
}

// Streamed replies (a `ready` callback, as the data plane gives): every prefix reported is already
// final (it equals the unstreamed reply's bytes at the moment it is reported), the reports grow,
// and the whole reply is byte for byte the unstreamed one; with the pool and without. A request
// with a dynamic table's op (which may still fail) is never streamed.
TEST(VariableStoreLookupSerializedTest, Streamed_EveryReportedPrefixFinal_SameBytes) {
  const int64_t rows = 100000, width = 16;  // 64-byte rows: a 128 KiB piece is 2048 of them
  for (int threads : {0, 2}) {
    SCOPED_TRACE(threads);
    VariableStore store(threads);
    VariableShardDef table = FloatShard("a", rows, 0, rows, width, /*init=*/0.0f);
    table.mutable_initializer()->set_kind(InitializerDef::UNIFORM);
    table.mutable_initializer()->set_minval(-1);
    table.mutable_initializer()->set_maxval(1);
    table.mutable_initializer()->set_seed(3);
    VariableShardDef dynamic = DynamicShardDef("d", width);
    const auto created =
        store.CreateShards({table, FloatShard("b", 10, 0, 10, 1, /*init=*/2.0f), dynamic});
    ASSERT_TRUE(created.ok()) << created.status();
    std::mt19937_64 rng(9);
    std::vector<int64_t> ids(30000);
    for (int64_t& id : ids) id = static_cast<int64_t>(rng() % rows);
    LookupRequest request;
    auto add = [&](LookupRequest* r, const std::string& shard, const std::vector<int64_t>& ids) {
      LookupOp* op = r->add_ops();
      op->set_shard(shard);
      op->set_ids(Bytes(ids));
    };
    add(&request, "a", ids);
    add(&request, "b", {1, 2});
    add(&request, "a", std::vector<int64_t>(ids.begin(), ids.begin() + 5000));
    std::string expected;
    ASSERT_TRUE(store.LookupSerialized(request, Into(&expected)).ok());
    std::string wire;
    std::vector<size_t> reports;
    bool prefixes_final = true;
    const auto allocate = Into(&wire, '\xff');
    auto ready = [&](size_t n) {
      reports.push_back(n);
      prefixes_final = prefixes_final && n <= wire.size() &&
                       std::memcmp(wire.data(), expected.data(), n) == 0;
    };
    ASSERT_TRUE(store.LookupSerialized(request, allocate, ready).ok());
    EXPECT_EQ(wire, expected);
    EXPECT_TRUE(prefixes_final);
    // 30,000 + 5,000 rows of 64 bytes in 128 KiB pieces, and "b": 15 + 3 + 1 on one thread;
    // with the pool, the calling thread reports after the pieces it gathered itself, which may be
    // none of a large op's (the pool's thread can claim them all first), but "b" is its own.
    if (threads == 0) {
      EXPECT_EQ(reports.size(), 19u);
    } else {
      EXPECT_GE(reports.size(), 1u);
    }
    EXPECT_TRUE(std::is_sorted(reports.begin(), reports.end()));
    EXPECT_LE(reports.back(), wire.size());

    // Read: one op of the whole table.
    ReadRequest read;
    read.add_ops()->set_shard("a");
    std::string read_expected;
    ASSERT_TRUE(store.ReadSerialized(read, Into(&read_expected)).ok());
    expected = read_expected;
    reports.clear();
    ASSERT_TRUE(store.ReadSerialized(read, allocate, ready).ok());
    EXPECT_EQ(wire, read_expected);
    EXPECT_TRUE(prefixes_final);
    EXPECT_GE(reports.size(), 40u);  // 6.4 MB, read on the calling thread
    EXPECT_TRUE(std::is_sorted(reports.begin(), reports.end()));

    // With a dynamic table's op: whole, never streamed.
    add(&request, "d", {7, 8});
    reports.clear();
    ASSERT_TRUE(store.LookupSerialized(request, allocate, ready).ok());
    EXPECT_TRUE(reports.empty());
  }
}

TEST(VariableStoreDenseTest, NarrowRows_RangesAcrossLockBlocks_Exact) {
  // Width-1 rows are locked in blocks of 64; ranges that start and end inside blocks must still
  // touch exactly their rows.
  VariableStore store;
  ASSERT_TRUE(store.CreateShards({FloatShard("n", 300, 100, 200, 1)}).ok());
  std::vector<float> values(200);
  for (int i = 0; i < 200; ++i) values[i] = static_cast<float>(i);
  UpdateRequest assign;
  UpdateOp* op = assign.add_ops();
  op->set_shard("n");
  op->set_kind(UpdateOp::ASSIGN);
  op->mutable_range();
  op->set_values(Bytes(values));
  op->set_dtype(DT_FLOAT32);
  ASSERT_TRUE(store.Update(assign).ok());
  UpdateRequest add;
  op = add.add_ops();
  op->set_shard("n");
  op->set_kind(UpdateOp::ASSIGN_ADD);
  op->mutable_range()->set_row_begin(150);
  op->mutable_range()->set_row_end(230);
  op->set_values(Bytes(std::vector<float>(80, 1000.0f)));
  op->set_dtype(DT_FLOAT32);
  ASSERT_TRUE(store.Update(add).ok());
  ReadRequest read;
  ReadOp* r = read.add_ops();
  r->set_shard("n");
  r->mutable_range()->set_row_begin(110);
  r->mutable_range()->set_row_end(290);
  ReadResponse response;
  ASSERT_TRUE(store.Read(read, &response).ok());
  std::vector<float> got = FromBytes<float>(response.values(0));
  ASSERT_EQ(got.size(), 180u);
  for (int row = 110; row < 290; ++row) {
    const float want = (row - 100) + ((row >= 150 && row < 230) ? 1000.0f : 0.0f);
    EXPECT_EQ(got[row - 110], want) << "row " << row;
  }
}

TEST(VariableStoreInt64Test, Int64Counters_AssignAddAndLookup) {
  VariableShardDef def;
  def.set_name("steps");
  def.set_variable("steps");
  def.add_full_shape(2);
  def.set_dtype(DT_INT64);
  def.set_num_rows(2);
  VariableStore store;
  ASSERT_TRUE(store.CreateShards({def}).ok());
  UpdateRequest request;
  UpdateOp* op = request.add_ops();
  op->set_shard("steps");
  op->set_kind(UpdateOp::ASSIGN_ADD);
  op->set_ids(Bytes(std::vector<int64_t>{1}));
  op->set_values(Bytes(std::vector<int64_t>{int64_t{1} << 40}));
  op->set_dtype(DT_INT64);
  ASSERT_TRUE(store.Update(request).ok());
  LookupRequest lookup;
  lookup.add_ops()->set_shard("steps");
  lookup.mutable_ops(0)->set_ids(Bytes(std::vector<int64_t>{0, 1}));
  LookupResponse response;
  ASSERT_TRUE(store.Lookup(lookup, &response).ok());
  EXPECT_THAT(FromBytes<int64_t>(response.values(0)), ElementsAre(0, int64_t{1} << 40));

  def.mutable_optimizer()->set_kind(OptimizerDef::SGD);
  def.set_name("steps2");
  def.set_variable("steps2");
  EXPECT_THAT(std::string(store.CreateShards({def}).status().message()),
              HasSubstr("only float32 variables can have an optimizer"));
}

// Shards of one variable that disagree (here: Adam on part_0, SGD on part_1) are refused, naming
// the variable and the field, whether they come in one request or one after the other; a save
// would otherwise write shards of one variable with different slots.
TEST(VariableStoreCreateTest, ShardsOfOneVariableThatDisagree_InvalidArgumentNamingTheField) {
  VariableStore store(/*data_threads=*/0);
  VariableShardDef a;
  a.set_name("a/part_0");
  a.set_variable("a");
  a.add_full_shape(4);
  a.set_dtype(DT_FLOAT32);
  a.set_num_rows(2);
  a.set_num_shards(2);
  a.mutable_optimizer()->set_kind(OptimizerDef::ADAM);
  VariableShardDef b = a;
  b.set_name("a/part_1");
  b.set_row_offset(2);
  b.set_shard_index(1);
  b.mutable_optimizer()->set_kind(OptimizerDef::SGD);
  EXPECT_THAT(store.CreateShards({a, b}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("\"a/part_1\""), HasSubstr("variable \"a\""),
                             HasSubstr("optimizer"))));
  ASSERT_TRUE(store.CreateShards({a}).ok());
  EXPECT_THAT(store.CreateShards({b}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("optimizer")));
  b.mutable_optimizer()->set_kind(OptimizerDef::ADAM);
  EXPECT_TRUE(store.CreateShards({b}).ok());  // agreeing: fine
  EXPECT_EQ(store.ListShards().size(), 2u);
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

TEST(VariableStoreWireTest, UpdateFromPiecesMatchesUpdateFromTheParsedRequest) {
  // Two stores with the same Adagrad shard (sparse pushes with repeated ids), a dense SGD shard
  // and an int64 shard; one gets parsed requests, the other the same bytes cut into pieces.
  auto create = [](VariableStore* store) {
    VariableShardDef emb = FloatShard("emb", 50, 0, 50, 5, 0.5f);
    emb.mutable_optimizer()->set_kind(OptimizerDef::ADAGRAD);
    emb.mutable_optimizer()->set_learning_rate(0.1f);
    VariableShardDef dense = FloatShard("dense", 7, 0, 7, 3, 1.0f);
    dense.mutable_optimizer()->set_kind(OptimizerDef::SGD);
    dense.mutable_optimizer()->set_learning_rate(0.5f);
    VariableShardDef counts = FloatShard("counts", 9, 0, 9, 2);
    counts.set_dtype(DT_INT64);
    ASSERT_TRUE(store->CreateShards({emb, dense, counts}).ok());
  };
  VariableStore parsed, pieces;
  create(&parsed);
  create(&pieces);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> g(-1, 1);
  for (int round = 0; round < 12; ++round) {
    UpdateRequest request;
    std::vector<int64_t> ids;
    std::vector<float> grads;
    for (int i = 0; i < 40; ++i) {
      ids.push_back(rng() % 50);  // repeats: summed before the apply
      for (int k = 0; k < 5; ++k) grads.push_back(g(rng));
    }
    *request.add_ops() = SparseOp("emb", UpdateOp::APPLY_GRADIENT, ids, grads);
    UpdateOp* dense = request.add_ops();
    dense->set_shard("dense");
    dense->set_kind(round % 3 == 0 ? UpdateOp::ASSIGN : UpdateOp::APPLY_GRADIENT);
    dense->mutable_range()->set_row_begin(1);
    dense->mutable_range()->set_row_end(6);
    std::vector<float> d(15);
    for (float& x : d) x = g(rng);
    dense->set_values(Bytes(d));
    dense->set_dtype(DT_FLOAT32);
    UpdateOp* counts = request.add_ops();
    counts->set_shard("counts");
    counts->set_kind(UpdateOp::ASSIGN_ADD);
    counts->set_ids(Bytes(std::vector<int64_t>{2, 8, 2}));
    counts->set_values(Bytes(std::vector<int64_t>{1, 10, 100, 1000, 5, 50}));
    counts->set_dtype(DT_INT64);

    ASSERT_TRUE(parsed.Update(request).ok());
    const std::string wire = request.SerializeAsString();
    ASSERT_TRUE(pieces.UpdateWire(CutIntoPieces(wire, 7 + round)).ok());
  }
  for (const char* shard : {"emb", "dense", "counts"}) {
    EXPECT_EQ(ReadAll(parsed, shard), ReadAll(pieces, shard)) << shard;
  }
  EXPECT_EQ(parsed.Find("emb")->apply_count(), 12);
  EXPECT_EQ(pieces.Find("emb")->apply_count(), 12);
  // The int64 counts are exact: 12 rounds of (1, 10) + (5, 50) on row 2 and (100, 1000) on row 8.
  ReadRequest read;
  read.add_ops()->set_shard("counts");
  ReadResponse response;
  ASSERT_TRUE(pieces.Read(read, &response).ok());
  const std::vector<int64_t> counts = FromBytes<int64_t>(response.values(0));
  EXPECT_EQ(counts[4], 12 * 6);
  EXPECT_EQ(counts[5], 12 * 60);
  EXPECT_EQ(counts[16], 12 * 100);
  EXPECT_EQ(counts[17], 12 * 1000);
}

TEST(VariableStoreWireTest, AMalformedOrInvalidMessageChangesNothing) {
  VariableStore store;
  ASSERT_TRUE(store.CreateShards({FloatShard("t", 4, 0, 4, 2, 1.0f)}).ok());
  UpdateRequest request;
  *request.add_ops() = SparseOp("t", UpdateOp::ASSIGN_ADD, {0, 1}, {1, 1, 1, 1});
  *request.add_ops() = SparseOp("t", UpdateOp::ASSIGN_ADD, {3, 4}, {1, 1, 1, 1});  // 4: no row
  const std::string wire = request.SerializeAsString();
  absl::Status s = store.UpdateWire(CutIntoPieces(wire, 5));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("out of range"));
  // Cut short: the first op is whole, the message is not.
  s = store.UpdateWire({absl::string_view(wire).substr(0, wire.size() - 3)});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("malformed UpdateRequest"));
  EXPECT_THAT(ReadAll(store, "t"), ElementsAre(1, 1, 1, 1, 1, 1, 1, 1));
}

// An update answered before it is applied (`answer`, as the data plane's Complete): called once
// the update is valid and will apply in full, and whatever enters the store after it (lookups,
// reads, updates, from other threads) sees the whole update. Never called for an invalid update,
// nor for one with a dynamic table's assignment (which stores keys: it may still fail); called
// with a dynamic table's gradients; one it declines (false) is applied as usual.
TEST(VariableStoreWireTest, AnsweredEarly_LaterCallsSeeTheWholeUpdate_OnlyWhenCertain) {
  const int64_t rows = 1 << 20, width = 4;  // 16 MiB: the apply takes a while
  for (int threads : {0, 2}) {
    SCOPED_TRACE(threads);
    VariableStore store(threads);
    VariableShardDef dynamic = DynamicShardDef("d", width);
    dynamic.mutable_optimizer()->set_kind(OptimizerDef::SGD);
    dynamic.mutable_optimizer()->set_learning_rate(0.1f);
    const auto created = store.CreateShards({FloatShard("t", rows, 0, rows, width), dynamic});
    ASSERT_TRUE(created.ok()) << created.status();
    auto add_one = [&]() {
      UpdateRequest request;
      UpdateOp* op = request.add_ops();
      op->set_shard("t");
      op->set_kind(UpdateOp::ASSIGN_ADD);
      op->mutable_range();  // the whole shard
      op->set_values(Bytes(std::vector<float>(rows * width, 1.0f)));
      op->set_dtype(DT_FLOAT32);
      return request.SerializeAsString();
    };
    const std::string first = add_one(), second = add_one();
    int calls = 0;
    float read_min = -1, looked_up_min = -1;
    absl::Status second_status;
    std::vector<std::thread> after;
    ASSERT_TRUE(store
                    .UpdateWire({first},
                                [&] {
                                  ++calls;
                                  after.emplace_back([&] {
                                    const std::vector<float> all = ReadAll(store, "t");
                                    read_min = *std::min_element(all.begin(), all.end());
                                  });
                                  after.emplace_back([&] {
                                    const std::vector<float> some =
                                        LookupRows(store, "t", {rows - 1, 0, rows / 2});
                                    looked_up_min = *std::min_element(some.begin(), some.end());
                                  });
                                  after.emplace_back(
                                      [&] { second_status = store.UpdateWire({second}); });
                                  return true;
                                })
                    .ok());
    for (std::thread& t : after) t.join();
    EXPECT_EQ(calls, 1);
    EXPECT_GE(read_min, 1.0f);  // every row had the first update (some perhaps the second too)
    EXPECT_GE(looked_up_min, 1.0f);
    ASSERT_TRUE(second_status.ok()) << second_status;
    const std::vector<float> all = ReadAll(store, "t");
    EXPECT_EQ(*std::min_element(all.begin(), all.end()), 2.0f);
    EXPECT_EQ(*std::max_element(all.begin(), all.end()), 2.0f);

    // Invalid (a row out of range), or with a dynamic table's op: not called.
    UpdateRequest bad;
    *bad.add_ops() = SparseOp("t", UpdateOp::ASSIGN_ADD, {rows}, {1, 1, 1, 1});
    auto count = [&] {
      ++calls;
      return true;
    };
    EXPECT_FALSE(store.UpdateWire({bad.SerializeAsString()}, count).ok());
    UpdateRequest mixed;
    *mixed.add_ops() = SparseOp("t", UpdateOp::ASSIGN_ADD, {0}, {1, 1, 1, 1});
    *mixed.add_ops() = SparseOp("d", UpdateOp::ASSIGN_ADD, {7}, {1, 1, 1, 1});
    absl::Status s = store.UpdateWire({mixed.SerializeAsString()}, count);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(calls, 1);
    EXPECT_THAT(LookupRows(store, "t", {0}), ElementsAre(3, 3, 3, 3));
    UpdateRequest gradients;
    *gradients.add_ops() = SparseOp("d", UpdateOp::APPLY_GRADIENT, {7}, {10, 10, 10, 10});
    s = store.UpdateWire({gradients.SerializeAsString()}, count);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(calls, 2);  // SGD at 0.1: key 7 from 1 to 0
    EXPECT_THAT(LookupRows(store, "d", {7}), ElementsAre(0, 0, 0, 0));
    // Declined: applied all the same, and nothing is left waiting.
    ASSERT_TRUE(store.UpdateWire({first}, [&] {
                       ++calls;
                       return false;
                     }).ok());
    EXPECT_EQ(calls, 3);
    EXPECT_THAT(LookupRows(store, "t", {rows - 1}), ElementsAre(3, 3, 3, 3));
  }
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

// An update's request step reaches the schedule: SGD whose rate halves after step 0, a gradient of
// 1 at request steps 1 (0-based 0: rate 1) and 2 (rate 0.5).
TEST(VariableStoreScheduleTest, RequestStep_PicksTheRate) {
  VariableStore store(/*data_threads=*/0);
  VariableShardDef def;
  def.set_name("w");
  def.set_variable("w");
  def.add_full_shape(1);
  def.set_dtype(DT_FLOAT32);
  def.set_num_rows(1);
  def.set_num_shards(1);
  def.mutable_optimizer()->set_kind(OptimizerDef::SGD);
  LearningRateSchedule* s = def.mutable_optimizer()->mutable_schedule();
  s->set_kind(LearningRateSchedule::PIECEWISE_CONSTANT);
  s->add_boundaries(0);
  s->add_values(1.0);
  s->add_values(0.5);
  ASSERT_TRUE(store.CreateShards({def}).ok());
  const float one = 1.0f;
  for (int64_t step : {1, 2}) {
    UpdateRequest request;
    request.set_step(step);
    UpdateOp* op = request.add_ops();
    op->set_shard("w");
    op->set_kind(UpdateOp::APPLY_GRADIENT);
    op->mutable_range();
    op->set_values(std::string(reinterpret_cast<const char*>(&one), 4));
    op->set_dtype(DT_FLOAT32);
    ASSERT_TRUE(store.Update(request).ok());
  }
  ReadRequest read;
  read.add_ops()->set_shard("w");
  ReadResponse response;
  ASSERT_TRUE(store.Read(read, &response).ok());
  float w;
  std::memcpy(&w, response.values(0).data(), 4);
  EXPECT_FLOAT_EQ(w, -1.5f);
}

}  // namespace
}  // namespace pstrain
