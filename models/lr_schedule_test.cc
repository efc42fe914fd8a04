#include "models/lr_schedule.h"

#include <cmath>

#include "gtest/gtest.h"
#include "ps/optimizers.h"

namespace pstrain {
namespace {

// The rate an optimizer of rate `rate` applies at `step` under `text`.
double RateAt(const std::string& text, double rate, int64_t step) {
  absl::StatusOr<RelativeSchedule> s = ParseLrSchedule(text);
  EXPECT_TRUE(s.ok()) << s.status();
  OptimizerDef def;
  def.set_kind(OptimizerDef::ADAGRAD);
  def.set_learning_rate(rate);
  ApplyLrSchedule(*s, &def);
  EXPECT_TRUE(Optimizer::Create(def).ok()) << text;
  return ScheduledLearningRate(def.learning_rate(), def.schedule(), step);
}

TEST(LrScheduleTest, ConstantLeavesTheRate) {
  EXPECT_DOUBLE_EQ(RateAt("constant", 0.05, 0), 0.05);
  EXPECT_DOUBLE_EQ(RateAt("constant", 0.05, 100000), 0.05);
}

TEST(LrScheduleTest, ExponentialScalesWithEachOptimizersRate) {
  // Keras ExponentialDecay(0.1, 100, 0.5): 0.1 * 0.5^(250 / 100).
  EXPECT_NEAR(RateAt("exponential:decay_steps=100,decay_rate=0.5", 0.1, 250),
              0.1 * std::pow(0.5, 2.5), 1e-12);
  EXPECT_NEAR(RateAt("exponential:decay_steps=100,decay_rate=0.5,staircase", 0.1, 250),
              0.1 * 0.25, 1e-12);
  EXPECT_NEAR(RateAt("exponential:decay_steps=100,decay_rate=0.5,staircase", 0.4, 250),
              0.4 * 0.25, 1e-12);
}

TEST(LrScheduleTest, PiecewiseScalesAreFractionsOfTheRate) {
  const std::string text = "piecewise:boundaries=10+20,scales=1+0.5+0.1";
  EXPECT_NEAR(RateAt(text, 0.2, 10), 0.2, 1e-12);  // step <= 10
  EXPECT_NEAR(RateAt(text, 0.2, 11), 0.1, 1e-12);
  EXPECT_NEAR(RateAt(text, 0.2, 20), 0.1, 1e-12);
  EXPECT_NEAR(RateAt(text, 0.2, 21), 0.02, 1e-12);
}

TEST(LrScheduleTest, CosineWarmsUpToTheRateThenDecays) {
  const std::string text = "cosine:decay_steps=100,alpha=0.1,warmup_steps=10";
  EXPECT_NEAR(RateAt(text, 0.2, 0), 0.0, 1e-12);
  EXPECT_NEAR(RateAt(text, 0.2, 5), 0.1, 1e-12);
  EXPECT_NEAR(RateAt(text, 0.2, 10), 0.2, 1e-12);
  // Halfway through the decay: cos = 0, so 0.2 * (0.9 * 0.5 + 0.1).
  EXPECT_NEAR(RateAt(text, 0.2, 60), 0.2 * (0.9 * 0.5 + 0.1), 1e-12);
  EXPECT_NEAR(RateAt(text, 0.2, 5000), 0.2 * 0.1, 1e-12);
  // warmup_from: the first step's fraction of the rate.
  EXPECT_NEAR(RateAt(text + ",warmup_from=0.5", 0.2, 0), 0.1, 1e-12);
  EXPECT_NEAR(RateAt("cosine:decay_steps=100", 0.2, 50), 0.1, 1e-12);
}

TEST(LrScheduleTest, ErrorsNameTheBadPart) {
  auto error = [](const std::string& text) {
    absl::StatusOr<RelativeSchedule> s = ParseLrSchedule(text);
    EXPECT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << text;
    return std::string(s.status().message());
  };
  EXPECT_NE(error("linear").find("unknown schedule 'linear'"), std::string::npos);
  EXPECT_NE(error("exponential:decay_rate=0.5").find("needs decay_steps"), std::string::npos);
  EXPECT_NE(error("exponential:decay_steps=x,decay_rate=0.5").find("decay_steps=x"),
            std::string::npos);
  EXPECT_NE(error("exponential:decay_steps=0,decay_rate=0.5").find("decay_steps > 0"),
            std::string::npos);
  EXPECT_NE(error("exponential:decay_steps=10,decay_rate=0.5,staircase=maybe").find("staircase"),
            std::string::npos);
  EXPECT_NE(error("piecewise:boundaries=10+5,scales=1+1+1").find("must increase"),
            std::string::npos);
  EXPECT_NE(error("piecewise:boundaries=10,scales=1").find("one more value"), std::string::npos);
  EXPECT_NE(error("piecewise:boundaries=10").find("scales"), std::string::npos);
  EXPECT_NE(error("cosine:decay_steps=10,alpha=2").find("alpha"), std::string::npos);
  EXPECT_NE(error("cosine:decay_steps=10,warmup_from=3,warmup_steps=2").find("warmup_from"),
            std::string::npos);
  EXPECT_NE(error("cosine:decay_steps=10,beta=1").find("unknown key 'beta'"), std::string::npos);
  EXPECT_NE(error("cosine:decay_steps=10,decay_steps=20").find("twice"), std::string::npos);
}

}  // namespace
}  // namespace pstrain
