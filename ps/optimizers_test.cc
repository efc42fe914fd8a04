#include "ps/optimizers.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Optimizer> Make(const OptimizerDef& def) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(def);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return opt.ok() ? std::move(*opt) : nullptr;
}

// Applies `grads` one after another to a one-element variable starting at `var`; returns var.
float ApplySteps(const Optimizer& opt, float var, std::vector<float> grads, std::vector<float>* slots) {
  slots->assign(opt.num_slots(), 0);
  for (int s = 0; s < opt.num_slots(); ++s) (*slots)[s] = opt.slot_initial_value(s);
  float* slot_ptrs[4];
  for (int s = 0; s < opt.num_slots(); ++s) slot_ptrs[s] = &(*slots)[s];
  for (size_t t = 0; t < grads.size(); ++t) {
    opt.ApplyRow(&var, slot_ptrs, &grads[t], /*width=*/1, opt.Prepare(t + 1, t));
  }
  return var;
}

TEST(OptimizerTest, Sgd_HandComputed) {
  OptimizerDef def;
  def.set_kind(OptimizerDef::SGD);
  def.set_learning_rate(0.1);
  std::vector<float> slots;
  EXPECT_FLOAT_EQ(ApplySteps(*Make(def), 1.0f, {0.5f}, &slots), 0.95f);
  EXPECT_FLOAT_EQ(ApplySteps(*Make(def), 1.0f, {0.5f, -1.0f}, &slots), 1.05f);
}

TEST(OptimizerTest, Momentum_PlainAndNesterov_HandComputed) {
  OptimizerDef def;
  def.set_kind(OptimizerDef::MOMENTUM);
  def.set_learning_rate(0.1);
  def.set_momentum(0.9);
  std::vector<float> slots;
  // accum 0.5 -> var 0.95; accum 0.95 -> var 0.855.
  EXPECT_FLOAT_EQ(ApplySteps(*Make(def), 1.0f, {0.5f, 0.5f}, &slots), 0.855f);
  EXPECT_FLOAT_EQ(slots[0], 0.95f);
  def.set_nesterov(true);
  // accum 0.5; var -= 0.1*0.5 + 0.1*0.9*0.5 = 0.095.
  EXPECT_FLOAT_EQ(ApplySteps(*Make(def), 1.0f, {0.5f}, &slots), 0.905f);
}

TEST(OptimizerTest, Adagrad_DefaultsAndHandComputed) {
  OptimizerDef def;
  def.set_kind(OptimizerDef::ADAGRAD);
  std::unique_ptr<Optimizer> defaults = Make(def);
  EXPECT_DOUBLE_EQ(defaults->def().learning_rate(), 0.001);
  EXPECT_DOUBLE_EQ(defaults->def().initial_accumulator_value(), 0.1);
  EXPECT_DOUBLE_EQ(defaults->def().epsilon(), 1e-7);
  def.set_learning_rate(0.1);
  std::vector<float> slots;
  // accum = 0.1 + 0.25 = 0.35; var = 1 - 0.1 * 0.5 / (sqrt(0.35) + 1e-7).
  const double expected = 1.0 - 0.1 * 0.5 / (std::sqrt(0.35) + 1e-7);
  EXPECT_NEAR(ApplySteps(*Make(def), 1.0f, {0.5f}, &slots), expected, 1e-6);
  EXPECT_FLOAT_EQ(slots[0], 0.35f);
}

TEST(OptimizerTest, Adam_BiasCorrectedSteps_HandComputed) {
  OptimizerDef def;
  def.set_kind(OptimizerDef::ADAM);
  def.set_learning_rate(0.1);
  std::vector<float> slots;
  // Step 1: m = 0.05, v = 0.00025, lr_t = 0.1 * sqrt(0.001) / 0.1.
  double m = 0.05, v = 0.00025;
  double var = 1.0 - 0.1 * std::sqrt(1 - 0.999) / (1 - 0.9) * m / (std::sqrt(v) + 1e-7);
  // Step 2 with g = -0.25.
  m = 0.9 * m + 0.1 * -0.25;
  v = 0.999 * v + 0.001 * 0.0625;
  var -= 0.1 * std::sqrt(1 - 0.999 * 0.999) / (1 - 0.9 * 0.9) * m / (std::sqrt(v) + 1e-7);
  EXPECT_NEAR(ApplySteps(*Make(def), 1.0f, {0.5f, -0.25f}, &slots), var, 1e-5);
  EXPECT_NEAR(slots[0], m, 1e-7);
  EXPECT_NEAR(slots[1], v, 1e-8);  // float32 slot: ~1e-7 relative
}

TEST(OptimizerTest, Ftrl_WithAndWithoutL1_HandComputed) {
  OptimizerDef def;
  def.set_kind(OptimizerDef::FTRL);
  def.set_learning_rate(0.1);
  std::vector<float> slots;
  // accum_new = 0.35; linear = 0.5 - (sqrt(.35) - sqrt(.1)) / 0.1 * 1; quadratic = sqrt(.35) / .1.
  const double linear = 0.5 - (std::sqrt(0.35) - std::sqrt(0.1)) / 0.1;
  const double quadratic = std::sqrt(0.35) / 0.1;
  EXPECT_NEAR(ApplySteps(*Make(def), 1.0f, {0.5f}, &slots), -linear / quadratic, 1e-5);
  EXPECT_NEAR(slots[1], linear, 1e-5);
  def.set_l1_regularization_strength(1.0);
  EXPECT_NEAR(ApplySteps(*Make(def), 1.0f, {0.5f}, &slots), (-1.0 - linear) / quadratic, 1e-5);
  def.set_l1_regularization_strength(3.0);  // |linear| = 2.25 < 3: clipped to zero
  EXPECT_FLOAT_EQ(ApplySteps(*Make(def), 1.0f, {0.5f}, &slots), 0.0f);
  def.set_l1_regularization_strength(0);
  def.set_l2_regularization_strength(0.5);
  EXPECT_NEAR(ApplySteps(*Make(def), 1.0f, {0.5f}, &slots), -linear / (quadratic + 1.0), 1e-5);
}

// The AVX2 and plain x86-64 builds of the row loops compute the same bits (no fused multiply-add),
// for rows of every width (tails included) and gradients of every size.
TEST(OptimizerTest, Avx2AndPlainRowKernels_SameBits) {
  std::vector<OptimizerDef> defs(5);
  defs[0].set_kind(OptimizerDef::SGD);
  defs[1].set_kind(OptimizerDef::MOMENTUM);
  defs[2].set_kind(OptimizerDef::MOMENTUM);
  defs[2].set_nesterov(true);
  defs[3].set_kind(OptimizerDef::ADAGRAD);
  defs[4].set_kind(OptimizerDef::ADAM);
  for (OptimizerDef& def : defs) def.set_learning_rate(0.037);
  UseAvx2RowKernels(false);
  std::vector<std::unique_ptr<Optimizer>> plain;
  for (const OptimizerDef& def : defs) plain.push_back(Make(def));
  if (!UseAvx2RowKernels(true)) GTEST_SKIP() << "this CPU has no AVX2: one build only";
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (size_t k = 0; k < defs.size(); ++k) {
    const std::unique_ptr<Optimizer> wide = Make(defs[k]);
    for (int64_t width : {1, 3, 8, 16, 37, 64}) {
      // The same rows and slots on both sides, then 5 steps of the same gradients.
      std::vector<float> var(width), slots(4 * width);
      for (float& v : var) v = normal(rng);
      for (int s = 0; s < wide->num_slots(); ++s) {
        for (int64_t i = 0; i < width; ++i) {
          slots[s * width + i] = s == 0 && defs[k].kind() == OptimizerDef::ADAGRAD
                                     ? 0.1f + std::fabs(normal(rng))
                                     : std::fabs(normal(rng));
        }
      }
      std::vector<float> var2 = var, slots2 = slots;
      float* rows[4];
      float* rows2[4];
      for (int s = 0; s < 4; ++s) {
        rows[s] = slots.data() + s * width;
        rows2[s] = slots2.data() + s * width;
      }
      for (int t = 1; t <= 5; ++t) {
        std::vector<float> g(width);
        for (float& x : g) x = normal(rng) * (t == 3 ? 1e4f : 1.0f);
        const StepScalars scalars = wide->Prepare(t, t - 1);
        plain[k]->ApplyRow(var.data(), rows, g.data(), width, scalars);
        wide->ApplyRow(var2.data(), rows2, g.data(), width, scalars);
      }
      EXPECT_EQ(std::memcmp(var.data(), var2.data(), 4 * width), 0)
          << OptimizerDef::Kind_Name(defs[k].kind()) << " width " << width;
      EXPECT_EQ(std::memcmp(slots.data(), slots2.data(), 4 * slots.size()), 0)
          << OptimizerDef::Kind_Name(defs[k].kind()) << " width " << width;
    }
  }
}

TEST(OptimizerTest, Create_BadHyperparameters_NamedInError) {
  struct Case {
    OptimizerDef::Kind kind;
    std::function<void(OptimizerDef*)> set;
    const char* message;
  } cases[] = {
      {OptimizerDef::SGD, [](OptimizerDef* d) { d->set_learning_rate(0); },
       "SGD optimizer: learning_rate must be > 0, got 0"},
      {OptimizerDef::MOMENTUM, [](OptimizerDef* d) { d->set_momentum(1.5); },
       "momentum must be in [0, 1]"},
      {OptimizerDef::ADAGRAD, [](OptimizerDef* d) { d->set_initial_accumulator_value(-1); },
       "initial_accumulator_value must be >= 0"},
      {OptimizerDef::ADAM, [](OptimizerDef* d) { d->set_beta_1(1.0); }, "beta_1 must be in [0, 1)"},
      {OptimizerDef::ADAM, [](OptimizerDef* d) { d->set_epsilon(-1); }, "epsilon must be >= 0"},
      {OptimizerDef::FTRL, [](OptimizerDef* d) { d->set_learning_rate_power(0.5); },
       "learning_rate_power must be <= 0"},
      {OptimizerDef::FTRL, [](OptimizerDef* d) { d->set_l1_regularization_strength(-1); },
       "l1_regularization_strength must be >= 0"},
  };
  for (const Case& c : cases) {
    OptimizerDef def;
    def.set_kind(c.kind);
    c.set(&def);
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(def);
    ASSERT_FALSE(opt.ok()) << c.message;
    EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(opt.status().message()), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

LearningRateSchedule Schedule(LearningRateSchedule::Kind kind) {
  LearningRateSchedule s;
  s.set_kind(kind);
  return s;
}

// Each schedule at given steps against Keras's formulas, worked by hand.
TEST(LearningRateScheduleTest, MatchesKerasFormulas) {
  // ExponentialDecay(0.1, decay_steps=100000, decay_rate=0.96): 0.1 * 0.96^(step / 100000).
  LearningRateSchedule e = Schedule(LearningRateSchedule::EXPONENTIAL_DECAY);
  e.set_decay_steps(100000);
  e.set_decay_rate(0.96);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(0.1, e, 0), 0.1);
  EXPECT_NEAR(ScheduledLearningRate(0.1, e, 50000), 0.1 * std::sqrt(0.96), 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(0.1, e, 200000), 0.1 * 0.96 * 0.96, 1e-12);
  e.set_staircase(true);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(0.1, e, 99999), 0.1);
  EXPECT_NEAR(ScheduledLearningRate(0.1, e, 100000), 0.096, 1e-12);
  // PiecewiseConstantDecay([100000, 110000], [1.0, 0.5, 0.1]).
  LearningRateSchedule p = Schedule(LearningRateSchedule::PIECEWISE_CONSTANT);
  p.add_boundaries(100000);
  p.add_boundaries(110000);
  for (double v : {1.0, 0.5, 0.1}) p.add_values(v);
  EXPECT_EQ(ScheduledLearningRate(0.3, p, 0), 1.0);
  EXPECT_EQ(ScheduledLearningRate(0.3, p, 100000), 1.0);
  EXPECT_EQ(ScheduledLearningRate(0.3, p, 100001), 0.5);
  EXPECT_EQ(ScheduledLearningRate(0.3, p, 110000), 0.5);
  EXPECT_EQ(ScheduledLearningRate(0.3, p, 110001), 0.1);
  // CosineDecay(0.1, decay_steps=1000, alpha): 0.1 * ((1 - a) (1 + cos(pi min(s, 1000)/1000))/2 + a).
  LearningRateSchedule c = Schedule(LearningRateSchedule::COSINE_DECAY);
  c.set_decay_steps(1000);
  EXPECT_NEAR(ScheduledLearningRate(0.1, c, 500), 0.05, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(0.1, c, 1000), 0.0, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(0.1, c, 5000), 0.0, 1e-12);
  c.set_alpha(0.1);
  EXPECT_NEAR(ScheduledLearningRate(0.1, c, 500), 0.1 * (0.9 * 0.5 + 0.1), 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(0.1, c, 1000), 0.01, 1e-12);
  // CosineDecay(0.0, 1000, warmup_target=0.1, warmup_steps=100): linear to 0.1, then decays.
  c.set_alpha(0);
  c.set_warmup_steps(100);
  c.set_warmup_target(0.1);
  EXPECT_NEAR(ScheduledLearningRate(0.0, c, 0), 0.0, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(0.0, c, 50), 0.05, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(0.0, c, 100), 0.1, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(0.0, c, 600), 0.05, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(0.0, c, 1100), 0.0, 1e-12);
}

TEST(LearningRateScheduleTest, BadSchedules_InvalidArgumentNamingTheField) {
  OptimizerDef def;
  def.set_kind(OptimizerDef::SGD);
  def.mutable_schedule()->set_kind(LearningRateSchedule::EXPONENTIAL_DECAY);
  EXPECT_THAT(Optimizer::Create(def).status().message(), ::testing::HasSubstr("decay_steps"));
  def.mutable_schedule()->set_kind(LearningRateSchedule::PIECEWISE_CONSTANT);
  def.mutable_schedule()->add_boundaries(10);
  EXPECT_THAT(Optimizer::Create(def).status().message(), ::testing::HasSubstr("one more value"));
  def.mutable_schedule()->set_kind(LearningRateSchedule::COSINE_DECAY);
  def.mutable_schedule()->set_decay_steps(10);
  def.mutable_schedule()->set_warmup_steps(5);
  EXPECT_THAT(Optimizer::Create(def).status().message(), ::testing::HasSubstr("warmup_target"));
}

// The rate applied to an update is the schedule's at the step that computed it: SGD with a
// piecewise rate, gradients of 1 sent at steps 1 and 3 (0-based 0 and 2) move the weight by the
// rate of each (not of the order they arrive in).
TEST(LearningRateScheduleTest, Sgd_AppliesTheRateOfTheUpdatesStep) {
  OptimizerDef def;
  def.set_kind(OptimizerDef::SGD);
  LearningRateSchedule* s = def.mutable_schedule();
  s->set_kind(LearningRateSchedule::PIECEWISE_CONSTANT);
  s->add_boundaries(1);
  s->add_values(0.5);
  s->add_values(0.125);
  auto opt = *Optimizer::Create(def);
  float var = 0;
  const float g = 1;
  opt->ApplyRow(&var, nullptr, &g, 1, opt->Prepare(/*t=*/1, /*step=*/2));  // arrives first
  EXPECT_FLOAT_EQ(var, -0.125f);
  opt->ApplyRow(&var, nullptr, &g, 1, opt->Prepare(/*t=*/2, /*step=*/0));
  EXPECT_FLOAT_EQ(var, -0.625f);
}

}  // namespace
}  // namespace pstrain
