// The table and the deterministic updates the kill -9 test's writer process applies, shared by the
// writer (checkpoint_writer_main.cc) and the test that replays them to know what a checkpoint holds.
#ifndef PSTRAIN_TESTS_CHECKPOINT_KILL_UTIL_H_
#define PSTRAIN_TESTS_CHECKPOINT_KILL_UTIL_H_

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

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_CHECKPOINT_KILL_UTIL_H_
