#include "ps/optimizers.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

absl::Status Check(bool ok, absl::string_view optimizer, absl::string_view what, double value) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(optimizer, " optimizer: ", what, ", got ", value));
}

// var -= lr * g
class Sgd final : public Optimizer {
 public:
  explicit Sgd(OptimizerDef def) : Optimizer(std::move(def)), lr_(def_.learning_rate()) {}
  std::vector<std::string> slot_names() const override { return {}; }
  float slot_initial_value(int) const override { return 0; }
  void ApplyRow(float* __restrict var, float* const*, const UnalignedFloat* __restrict g,
                int64_t width, const StepScalars&) const override {
    for (int64_t i = 0; i < width; ++i) var[i] -= lr_ * g[i];
  }

 private:
  const float lr_;
};

// TF ApplyMomentum: accum = accum * momentum + g;
//   var -= lr * accum                         (plain)
//   var -= lr * g + lr * momentum * accum     (nesterov)
class Momentum final : public Optimizer {
 public:
  explicit Momentum(OptimizerDef def)
      : Optimizer(std::move(def)),
        lr_(def_.learning_rate()),
        momentum_(def_.momentum()),
        nesterov_(def_.nesterov()) {}
  std::vector<std::string> slot_names() const override { return {"momentum"}; }
  float slot_initial_value(int) const override { return 0; }
  void ApplyRow(float* __restrict var, float* const* slots, const UnalignedFloat* __restrict g,
                int64_t width, const StepScalars&) const override {
    float* __restrict accum = slots[0];
    for (int64_t i = 0; i < width; ++i) {
      accum[i] = accum[i] * momentum_ + g[i];
      var[i] -= nesterov_ ? lr_ * g[i] + lr_ * momentum_ * accum[i] : lr_ * accum[i];
    }
  }

 private:
  const float lr_, momentum_;
  const bool nesterov_;
};

// TF ApplyAdagradV2: accum += g^2; var -= lr * g / (sqrt(accum) + epsilon)
class Adagrad final : public Optimizer {
 public:
  explicit Adagrad(OptimizerDef def)
      : Optimizer(std::move(def)), lr_(def_.learning_rate()), eps_(def_.epsilon()) {}
  std::vector<std::string> slot_names() const override { return {"accumulator"}; }
  float slot_initial_value(int) const override { return def_.initial_accumulator_value(); }
  void ApplyRow(float* __restrict var, float* const* slots, const UnalignedFloat* __restrict g,
                int64_t width, const StepScalars&) const override {
    float* __restrict accum = slots[0];
    for (int64_t i = 0; i < width; ++i) {
      accum[i] += g[i] * g[i];
      var[i] -= lr_ * g[i] / (std::sqrt(accum[i]) + eps_);
    }
  }

 private:
  const float lr_, eps_;
};

// TF ApplyAdam: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t); var -= lr_t * m / (sqrt(v) + epsilon).
// Sparse updates touch only the rows given ("lazy" Adam, as for large embeddings), t counts the
// gradients applied to this shard.
class Adam final : public Optimizer {
 public:
  explicit Adam(OptimizerDef def)
      : Optimizer(std::move(def)),
        b1_(def_.beta_1()),
        b2_(def_.beta_2()),
        eps_(def_.epsilon()) {}
  std::vector<std::string> slot_names() const override { return {"m", "v"}; }
  float slot_initial_value(int) const override { return 0; }
  StepScalars Prepare(int64_t step) const override {
    const double t = static_cast<double>(step);
    StepScalars s;
    s.lr = static_cast<float>(def_.learning_rate() * std::sqrt(1.0 - std::pow(def_.beta_2(), t)) /
                              (1.0 - std::pow(def_.beta_1(), t)));
    return s;
  }
  void ApplyRow(float* __restrict var, float* const* slots, const UnalignedFloat* __restrict g,
                int64_t width, const StepScalars& s) const override {
    float* __restrict m = slots[0];
    float* __restrict v = slots[1];
    for (int64_t i = 0; i < width; ++i) {
      m[i] = b1_ * m[i] + (1 - b1_) * g[i];
      v[i] = b2_ * v[i] + (1 - b2_) * g[i] * g[i];
      var[i] -= s.lr * m[i] / (std::sqrt(v[i]) + eps_);
    }
  }

 private:
  const float b1_, b2_, eps_;
};

// TF ApplyFtrlV2 (Keras folds `beta` into l2: l2 + beta / (2 lr)):
//   g_shrink = g + 2 * l2_shrinkage * var; accum_new = accum + g^2
//   linear += g_shrink - (accum_new^-p - accum^-p) / lr * var
//   quadratic = accum_new^-p / lr + 2 * l2
//   var = |linear| > l1 ? (sign(linear) * l1 - linear) / quadratic : 0
class Ftrl final : public Optimizer {
 public:
  explicit Ftrl(OptimizerDef def)
      : Optimizer(std::move(def)),
        lr_(def_.learning_rate()),
        power_(def_.learning_rate_power()),
        l1_(def_.l1_regularization_strength()),
        l2_(def_.l2_regularization_strength() + def_.beta() / (2.0 * def_.learning_rate())),
        shrinkage_(def_.l2_shrinkage_regularization_strength()) {}
  std::vector<std::string> slot_names() const override { return {"accumulator", "linear"}; }
  float slot_initial_value(int slot) const override {
    return slot == 0 ? def_.initial_accumulator_value() : 0;
  }
  void ApplyRow(float* __restrict var, float* const* slots, const UnalignedFloat* __restrict g,
                int64_t width, const StepScalars&) const override {
    float* accum = slots[0];
    float* linear = slots[1];
    const bool sqrt_power = power_ == -0.5;
    for (int64_t i = 0; i < width; ++i) {
      const double grad = g[i];
      const double g_shrink = grad + 2.0 * shrinkage_ * var[i];
      const double accum_new = accum[i] + grad * grad;
      const double new_pow = sqrt_power ? std::sqrt(accum_new) : std::pow(accum_new, -power_);
      const double old_pow = sqrt_power ? std::sqrt(static_cast<double>(accum[i]))
                                        : std::pow(static_cast<double>(accum[i]), -power_);
      linear[i] += static_cast<float>(g_shrink - (new_pow - old_pow) / lr_ * var[i]);
      const double quadratic = new_pow / lr_ + 2.0 * l2_;
      const double lin = linear[i];
      var[i] = std::fabs(lin) > l1_
                   ? static_cast<float>(((lin > 0 ? l1_ : -l1_) - lin) / quadratic)
                   : 0.0f;
      accum[i] = static_cast<float>(accum_new);
    }
  }

 private:
  const double lr_, power_, l1_, l2_, shrinkage_;
};

}  // namespace

StepScalars Optimizer::Prepare(int64_t /*step*/) const { return StepScalars(); }

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerDef& in) {
  OptimizerDef def = in;
  const std::string name = OptimizerDef::Kind_Name(def.kind());
  switch (def.kind()) {
    case OptimizerDef::SGD:
      if (!def.has_learning_rate()) def.set_learning_rate(0.01);
      break;
    case OptimizerDef::MOMENTUM:
      if (!def.has_learning_rate()) def.set_learning_rate(0.01);
      if (!def.has_momentum()) def.set_momentum(0.9);
      if (!def.has_nesterov()) def.set_nesterov(false);
      RETURN_IF_ERROR(Check(def.momentum() >= 0 && def.momentum() <= 1, name,
                            "momentum must be in [0, 1]", def.momentum()));
      break;
    case OptimizerDef::ADAGRAD:
      if (!def.has_learning_rate()) def.set_learning_rate(0.001);
      if (!def.has_initial_accumulator_value()) def.set_initial_accumulator_value(0.1);
      if (!def.has_epsilon()) def.set_epsilon(1e-7);
      RETURN_IF_ERROR(Check(def.initial_accumulator_value() >= 0, name,
                            "initial_accumulator_value must be >= 0",
                            def.initial_accumulator_value()));
      RETURN_IF_ERROR(Check(def.epsilon() >= 0, name, "epsilon must be >= 0", def.epsilon()));
      break;
    case OptimizerDef::ADAM:
      if (!def.has_learning_rate()) def.set_learning_rate(0.001);
      if (!def.has_beta_1()) def.set_beta_1(0.9);
      if (!def.has_beta_2()) def.set_beta_2(0.999);
      if (!def.has_epsilon()) def.set_epsilon(1e-7);
      RETURN_IF_ERROR(Check(def.beta_1() >= 0 && def.beta_1() < 1, name,
                            "beta_1 must be in [0, 1)", def.beta_1()));
      RETURN_IF_ERROR(Check(def.beta_2() >= 0 && def.beta_2() < 1, name,
                            "beta_2 must be in [0, 1)", def.beta_2()));
      RETURN_IF_ERROR(Check(def.epsilon() >= 0, name, "epsilon must be >= 0", def.epsilon()));
      break;
    case OptimizerDef::FTRL:
      if (!def.has_learning_rate()) def.set_learning_rate(0.001);
      if (!def.has_learning_rate_power()) def.set_learning_rate_power(-0.5);
      if (!def.has_initial_accumulator_value()) def.set_initial_accumulator_value(0.1);
      if (!def.has_l1_regularization_strength()) def.set_l1_regularization_strength(0);
      if (!def.has_l2_regularization_strength()) def.set_l2_regularization_strength(0);
      if (!def.has_l2_shrinkage_regularization_strength()) {
        def.set_l2_shrinkage_regularization_strength(0);
      }
      if (!def.has_beta()) def.set_beta(0);
      RETURN_IF_ERROR(Check(def.learning_rate_power() <= 0, name,
                            "learning_rate_power must be <= 0", def.learning_rate_power()));
      RETURN_IF_ERROR(Check(def.initial_accumulator_value() >= 0, name,
                            "initial_accumulator_value must be >= 0",
                            def.initial_accumulator_value()));
      RETURN_IF_ERROR(Check(def.l1_regularization_strength() >= 0, name,
                            "l1_regularization_strength must be >= 0",
                            def.l1_regularization_strength()));
      RETURN_IF_ERROR(Check(def.l2_regularization_strength() >= 0, name,
                            "l2_regularization_strength must be >= 0",
                            def.l2_regularization_strength()));
      RETURN_IF_ERROR(Check(def.l2_shrinkage_regularization_strength() >= 0, name,
                            "l2_shrinkage_regularization_strength must be >= 0",
                            def.l2_shrinkage_regularization_strength()));
      RETURN_IF_ERROR(Check(def.beta() >= 0, name, "beta must be >= 0", def.beta()));
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown optimizer kind ", static_cast<int>(def.kind())));
  }
  RETURN_IF_ERROR(Check(def.learning_rate() > 0, name, "learning_rate must be > 0",
                        def.learning_rate()));
  switch (def.kind()) {
    case OptimizerDef::SGD: return std::unique_ptr<Optimizer>(new Sgd(def));
    case OptimizerDef::MOMENTUM: return std::unique_ptr<Optimizer>(new Momentum(def));
    case OptimizerDef::ADAGRAD: return std::unique_ptr<Optimizer>(new Adagrad(def));
    case OptimizerDef::ADAM: return std::unique_ptr<Optimizer>(new Adam(def));
    default: return std::unique_ptr<Optimizer>(new Ftrl(def));
  }
}

}  // namespace pstrain
