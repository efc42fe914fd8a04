// The --lr_schedule flag: a learning-rate schedule (proto LearningRateSchedule, applied on the ps
// at each update's step; ps/optimizers.h) given RELATIVE to an optimizer's rate, so that one flag
// fits each of a model's optimizers (flights_ctr's embedding and dense rates, say). Text:
//
//   constant                                   the rate at every step (the default)
//   exponential:decay_steps=N,decay_rate=R[,staircase]
//                                              rate * R^(step / N), floor()ed with staircase
//   piecewise:boundaries=B0+B1+...,scales=S0+S1+...+Sk
//                                              rate * S0 while step <= B0, rate * S(i+1) while
//                                              Bi < step <= B(i+1), rate * Sk after the last
//   cosine:decay_steps=N[,alpha=A][,warmup_steps=W[,warmup_from=F]]
//                                              over W steps from F * rate (default 0) linearly up to
//                                              the rate, then down along a half cosine to A * rate
//                                              (default 0) over N steps, and A * rate after
//
// Each is Keras's schedule (ExponentialDecay, PiecewiseConstantDecay, CosineDecay) with the
// optimizer's rate as its initial_learning_rate (cosine with warmup: as its warmup_target, and
// F * rate as its initial_learning_rate); piecewise's values are Keras's `values` divided by the
// rate. `step` is the 0-based training step that computed the update.
#ifndef PSTRAIN_MODELS_LR_SCHEDULE_H_
#define PSTRAIN_MODELS_LR_SCHEDULE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/ps_service.pb.h"

namespace pstrain {

struct RelativeSchedule {
  // The schedule for a rate of 1 (piecewise values are the scales; cosine's warmup_target is 1).
  LearningRateSchedule unit;
  // Cosine with warmup: the first step's rate, a fraction of the rate.
  double warmup_from = 0;
  // The text it was parsed from ("constant" by default).
  std::string text = "constant";

  bool is_constant() const { return unit.kind() == LearningRateSchedule::CONSTANT; }
};

// Errors: kInvalidArgument naming the bad part of `text` (an unknown kind or key, a missing or
// out-of-range value).
absl::StatusOr<RelativeSchedule> ParseLrSchedule(absl::string_view text);

// `optimizer` with its learning_rate's schedule set from `schedule` (a constant one leaves it as
// it is).
void ApplyLrSchedule(const RelativeSchedule& schedule, OptimizerDef* optimizer);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_LR_SCHEDULE_H_
