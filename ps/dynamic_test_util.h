// Helpers for the dynamic shard's tests (ps/dynamic_shard_test.cc, ps/dynamic_tier_test.cc): a
// table definition, keys and ops as the ps receives them, lookups and a whole export.
#ifndef PSTRAIN_PS_DYNAMIC_TEST_UTIL_H_
#define PSTRAIN_PS_DYNAMIC_TEST_UTIL_H_

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "ps/dynamic_shard.h"
#include "ps/initializers.h"

namespace pstrain {
namespace dynamic_test {

constexpr int64_t kDim = 4;

inline VariableShardDef Def(OptimizerDef::Kind optimizer = OptimizerDef::ADAGRAD,
                            int num_shards = 1, int shard_index = 0) {
  VariableShardDef def;
  def.set_name(num_shards == 1 ? "t" : "t/part_" + std::to_string(shard_index));
  def.set_variable("t");
  def.add_full_shape(kDim);
  def.set_dtype(DT_FLOAT32);
  def.set_shard_index(shard_index);
  def.set_num_shards(num_shards);
  def.mutable_initializer()->set_kind(InitializerDef::UNIFORM);
  def.mutable_initializer()->set_minval(-1);
  def.mutable_initializer()->set_maxval(1);
  def.mutable_initializer()->set_seed(11);
  def.mutable_optimizer()->set_kind(optimizer);
  def.mutable_dynamic()->set_dim(kDim);
  return def;
}

inline std::unique_ptr<DynamicShard> Make(const VariableShardDef& def,
                                          MemoryBudget* budget = nullptr,
                                          std::shared_ptr<DiskStore> disk = nullptr) {
  absl::StatusOr<std::unique_ptr<DynamicShard>> shard = DynamicShard::Create(def, budget, disk);
  EXPECT_TRUE(shard.ok()) << shard.status();
  return shard.ok() ? std::move(*shard) : nullptr;
}

inline std::string Keys(const std::vector<int64_t>& keys) {
  return std::string(reinterpret_cast<const char*>(keys.data()), keys.size() * 8);
}

inline DynamicOpContext At(int64_t step) {
  DynamicOpContext ctx;
  ctx.step = step;
  return ctx;
}

inline std::vector<float> Lookup(DynamicShard& shard, const std::vector<int64_t>& keys, bool insert,
                                 int64_t step) {
  std::vector<float> out(keys.size() * kDim, -99);
  absl::Status s =
      shard.Lookup(Keys(keys), insert, At(step), reinterpret_cast<char*>(out.data()), nullptr);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

inline std::vector<float> InitialRow(int64_t key) {
  std::vector<float> row(kDim);
  InitializeFloatForKey(Def().initializer(), key, kDim, row.data());
  return row;
}

inline std::vector<float> Row(const std::vector<float>& rows, size_t i) {
  return std::vector<float>(rows.begin() + i * kDim, rows.begin() + (i + 1) * kDim);
}

inline UpdateOpView Op(UpdateOp::Kind kind, const std::vector<int64_t>& keys,
                       const std::vector<float>& values, std::string* keys_bytes,
                       std::string* values_bytes) {
  *keys_bytes = Keys(keys);
  *values_bytes = std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  UpdateOpView op;
  op.shard_name = "t";
  op.kind = kind;
  op.dtype = DT_FLOAT32;
  op.sparse = true;
  op.ids = *keys_bytes;
  if (!values_bytes->empty()) op.values.push_back(*values_bytes);
  op.values_bytes = static_cast<int64_t>(values_bytes->size());
  return op;
}

inline absl::Status Apply(DynamicShard& shard, UpdateOp::Kind kind,
                          const std::vector<int64_t>& keys, const std::vector<float>& values,
                          int64_t step) {
  std::string k, v;
  UpdateOpView op = Op(kind, keys, values, &k, &v);
  RETURN_IF_ERROR(shard.ValidateUpdate(op));
  return shard.Update(op, At(step), nullptr);
}

inline std::map<int64_t, std::vector<float>> ExportAll(const DynamicShard& shard, int64_t chunk,
                                                       bool with_slots = false) {
  std::map<int64_t, std::vector<float>> all;
  std::string cursor;
  do {
    ExportResponse r;
    absl::Status s = shard.Export(cursor, chunk, with_slots, &r);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
    const int64_t n = static_cast<int64_t>(r.keys().size() / 8);
    EXPECT_LE(n, chunk);
    const int64_t per = with_slots ? kDim * (1 + shard.num_slots()) : kDim;
    for (int64_t i = 0; i < n; ++i) {
      int64_t key;
      std::memcpy(&key, r.keys().data() + 8 * i, 8);
      std::vector<float> v(per);
      std::memcpy(v.data(), r.values().data() + 4 * kDim * i, 4 * kDim);
      if (with_slots) {
        std::memcpy(v.data() + kDim, r.slots().data() + 4 * (per - kDim) * i, 4 * (per - kDim));
      }
      EXPECT_TRUE(all.emplace(key, v).second) << "key " << key << " exported twice";
    }
    cursor = r.next_cursor();
  } while (!cursor.empty());
  return all;
}

// Every key's row as the shard stores it (Export with stored_format).
inline std::map<int64_t, std::string> ExportStored(const DynamicShard& shard, int64_t chunk) {
  std::map<int64_t, std::string> all;
  std::string cursor;
  const int64_t rb = shard.stored_row_bytes();
  do {
    ExportResponse r;
    absl::Status s =
        shard.Export(cursor, chunk, /*with_slots=*/false, &r, /*stored_format=*/true);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
    const int64_t n = static_cast<int64_t>(r.keys().size() / 8);
    EXPECT_EQ(static_cast<int64_t>(r.values().size()), n * rb);
    for (int64_t i = 0; i < n; ++i) {
      int64_t key;
      std::memcpy(&key, r.keys().data() + 8 * i, 8);
      EXPECT_TRUE(all.emplace(key, r.values().substr(i * rb, rb)).second) << "key " << key;
    }
    cursor = r.next_cursor();
  } while (!cursor.empty());
  return all;
}

}  // namespace dynamic_test
}  // namespace pstrain

#endif  // PSTRAIN_PS_DYNAMIC_TEST_UTIL_H_
