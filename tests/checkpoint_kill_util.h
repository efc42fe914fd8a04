// The tables and the deterministic updates the kill -9 test's writer process applies, shared by the
// writer (checkpoint_writer_main.cc) and the test that replays them to know what a checkpoint holds:
// a fixed Adagrad table, and (incremental runs) a dynamic one whose keys come and go.
#ifndef PSTRAIN_TESTS_CHECKPOINT_KILL_UTIL_H_
#define PSTRAIN_TESTS_CHECKPOINT_KILL_UTIL_H_

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "coordinator/variable_creator.h"
#include "ps/sharded_variable.h"

namespace pstrain {

inline constexpr int64_t kKillTestRows = 30000;
inline constexpr int64_t kKillTestWidth = 8;

// A [30000, 8] Adagrad table in 3 shards (about 1.9 MB with its accumulator).
inline VariableSpec KillTestTableSpec() {
  VariableSpec spec;
  spec.name = "kill/table";
  spec.shape = {kKillTestRows, kKillTestWidth};
  spec.partitioner.kind = PartitionerKind::kFixed;
  spec.partitioner.num_shards = 3;
  spec.initializer.set_kind(InitializerDef::NORMAL);
  spec.initializer.set_stddev(0.1);
  spec.initializer.set_seed(11);
  OptimizerDef adagrad;
  adagrad.set_kind(OptimizerDef::ADAGRAD);
  adagrad.set_learning_rate(0.3);
  spec.optimizer = adagrad;
  return spec;
}

// Step `step`: a gradient on every row, a function of (step, row, column) only.
inline absl::Status ApplyKillTestStep(const ShardedVariable& table, int64_t step) {
  std::vector<int64_t> ids(kKillTestRows);
  std::vector<float> grads(kKillTestRows * kKillTestWidth);
  for (int64_t r = 0; r < kKillTestRows; ++r) {
    ids[r] = r;
    for (int64_t c = 0; c < kKillTestWidth; ++c) {
      grads[r * kKillTestWidth + c] = static_cast<float>(((step * 31 + r * 7 + c) % 17) - 8) * 0.01f;
    }
  }
  return table.ApplyGradients(ids, grads.data());
}

inline constexpr int64_t kKillTestDim = 8;
inline constexpr int64_t kKillTestKeySpace = 5000;

// A dynamic Adagrad table in `shards` shards.
inline TableSpec KillTestDynamicSpec(int shards) {
  TableSpec spec;
  spec.name = "kill/dynamic";
  spec.dim = kKillTestDim;
  spec.num_shards = shards;
  spec.initializer.set_kind(InitializerDef::UNIFORM);
  spec.initializer.set_minval(-0.1);
  spec.initializer.set_maxval(0.1);
  spec.initializer.set_seed(5);
  OptimizerDef adagrad;
  adagrad.set_kind(OptimizerDef::ADAGRAD);
  adagrad.set_learning_rate(0.2);
  spec.optimizer = adagrad;
  return spec;
}

// Step `step` of the dynamic table: a training lookup of 300 keys (some new), a gradient for each,
// and 5 keys erased; all a function of the step only.
inline absl::Status ApplyKillTestDynamicStep(const DynamicTable& table, int64_t step) {
  std::vector<int64_t> keys(300);
  for (int64_t i = 0; i < 300; ++i) keys[i] = (step * 97 + i * 13) % kKillTestKeySpace;
  std::vector<float> rows(keys.size() * kKillTestDim), grads(keys.size() * kKillTestDim);
  absl::Status s = table.Lookup(keys, rows.data(), LookupMode::kTrain, step);
  if (!s.ok()) return s;
  for (size_t i = 0; i < grads.size(); ++i) {
    grads[i] = static_cast<float>(((step * 7 + static_cast<int64_t>(i) * 3) % 11) - 5) * 0.01f;
  }
  s = table.ApplyGradients(keys, grads.data(), step);
  if (!s.ok()) return s;
  std::vector<int64_t> gone(5);
  for (int64_t j = 0; j < 5; ++j) gone[j] = (step * 53 + j) % kKillTestKeySpace;
  return table.Erase(gone);
}

// Everything a dynamic table holds, as one comparable string (keys in order, each with its row,
// slots, count and step).
inline absl::StatusOr<std::map<int64_t, std::string>> KillTestExport(const DynamicTable& table) {
  std::map<int64_t, std::string> all;
  absl::Status s = table.Export(true, 4096, [&](int, const ExportResponse& r) -> absl::Status {
    const size_t n = r.keys().size() / 8;
    for (size_t i = 0; i < n; ++i) {
      int64_t key;
      std::memcpy(&key, r.keys().data() + 8 * i, 8);
      const size_t row = r.values().size() / n, slots = r.slots().size() / n;
      all[key] = r.values().substr(i * row, row) + r.slots().substr(i * slots, slots) +
                 r.counts().substr(4 * i, 4) + r.steps().substr(8 * i, 8);
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return all;
}

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_CHECKPOINT_KILL_UTIL_H_
