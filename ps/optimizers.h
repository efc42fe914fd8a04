// Server-side optimizers: SGD, Momentum, Adagrad, Adam, FTRL with TensorFlow's update formulas and
// Keras's default hyperparameters. Slots (accumulators, moments) live beside the shard's values,
// one float buffer per slot with the shard's row layout.
#ifndef PSTRAIN_PS_OPTIMIZERS_H_
#define PSTRAIN_PS_OPTIMIZERS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/ps_service.pb.h"

namespace pstrain {

// A float at any address: gradients are applied where they arrived (gRPC's received slices, at
// whatever offset the message put them), so loads through this type assume no alignment.
typedef float UnalignedFloat __attribute__((aligned(1)));

// Per-apply scalars an optimizer computes once per update op: the learning rate (the schedule's,
// at the update's step; Adam's with its bias correction).
struct StepScalars {
  float lr = 0;
};

// The schedule's learning rate at `step` (0-based) for an optimizer whose base rate is
// `learning_rate` (see LearningRateSchedule in proto/ps_service.proto).
double ScheduledLearningRate(double learning_rate, const LearningRateSchedule& schedule,
                             int64_t step);
// Errors: kInvalidArgument naming the schedule's bad field.
absl::Status ValidateSchedule(const LearningRateSchedule& schedule);

// Stateless apart from its hyperparameters: the state is in the slots. Thread-safe.
class Optimizer {
 public:
  // Validates `def` and fills unset fields with the Keras defaults.
  // Errors: kInvalidArgument naming the hyperparameter (e.g. "learning_rate must be > 0").
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const OptimizerDef& def);

  virtual ~Optimizer() = default;

  // The definition with every default filled in.
  const OptimizerDef& def() const { return def_; }
  // Slot names, e.g. {"accumulator"} or {"m", "v"}; and each slot's initial value.
  virtual std::vector<std::string> slot_names() const = 0;
  virtual float slot_initial_value(int slot) const = 0;
  int num_slots() const { return static_cast<int>(slot_names().size()); }

  // Scalars for the `t`-th (1-based) gradient applied to this shard, computed at training step
  // `step` (0-based; the schedule's argument).
  virtual StepScalars Prepare(int64_t t, int64_t step) const;
  // The learning rate at `step`: the schedule's.
  double LearningRate(int64_t step) const {
    return ScheduledLearningRate(def_.learning_rate(), def_.schedule(), step);
  }
  // Applies `grad` to one row of `width` floats: `var` and each slots[i] point at that row.
  virtual void ApplyRow(float* var, float* const* slots, const UnalignedFloat* grad, int64_t width,
                        const StepScalars& scalars) const = 0;

 protected:
  explicit Optimizer(OptimizerDef def) : def_(std::move(def)) {}
  OptimizerDef def_;
};

// The optimizers' row loops come in two builds, AVX2 and plain x86-64 (SSE2), that compute the
// same bits; an optimizer takes the one this CPU runs when it is created. For tests: false makes
// the optimizers created after it take the plain build whatever the CPU (true, the default,
// restores the choice). Returns whether this CPU runs the AVX2 build.
bool UseAvx2RowKernels(bool allowed);

}  // namespace pstrain

#endif  // PSTRAIN_PS_OPTIMIZERS_H_
