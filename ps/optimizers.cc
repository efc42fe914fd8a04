#include "ps/optimizers.h"

#include <atomic>
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

// The optimizers' row kernels: each loop is written once (Run) and compiled twice, for AVX2 and
// for any x86-64 (SSE2), and each optimizer picks the one the CPU runs when it is made. Bazel's
// -c opt targets plain x86-64, where these loops run 4 floats at a time, and Adagrad's and Adam's
// square roots and divisions make them bound by arithmetic, not memory: on AVX2 a stand-alone
// Adagrad loop over random rows ran 1.3x faster, sparse Adagrad pushes through ps_bench 1.03-1.2x
// (docs/benchmarks.md, "The data plane against ps-lite"). Only AVX2, not FMA: a fused
// multiply-add rounds once where the plain build rounds twice, and both versions must compute the
// same bits. (Chosen by hand, not by GCC's target_clones: its ifunc resolvers run before
// ThreadSanitizer's runtime is up, and crash a TSan build.)
#define PSTRAIN_LOOP static inline __attribute__((always_inline)) void

bool CpuHasAvx2() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

std::atomic<bool> avx2_allowed{true};  // UseAvx2RowKernels

template <typename Loop, typename Signature>
struct Kernel;
template <typename Loop, typename... Args>
struct Kernel<Loop, void (*)(Args...)> {
  using Fn = void (*)(Args...);
#if defined(__x86_64__)
  __attribute__((target("avx2"))) static void Avx2(Args... args) { Loop::Run(args...); }
#endif
  static void Base(Args... args) { Loop::Run(args...); }
  static Fn Pick() {
#if defined(__x86_64__)
    if (CpuHasAvx2() && avx2_allowed.load(std::memory_order_relaxed)) return &Avx2;
#endif
    return &Base;
  }
};
// The kernel of `Loop` for this CPU.
template <typename Loop>
auto PickKernel() {
  return Kernel<Loop, decltype(&Loop::Run)>::Pick();
}

// var -= lr * g
struct SgdLoop {
  PSTRAIN_LOOP Run(float* __restrict var, const UnalignedFloat* __restrict g, int64_t width,
                   float lr) {
    for (int64_t i = 0; i < width; ++i) var[i] -= lr * g[i];
  }
};

struct MomentumLoop {
  PSTRAIN_LOOP Run(float* __restrict var, float* __restrict accum,
                   const UnalignedFloat* __restrict g, int64_t width, float lr, float momentum,
                   bool nesterov) {
    for (int64_t i = 0; i < width; ++i) {
      accum[i] = accum[i] * momentum + g[i];
      var[i] -= nesterov ? lr * g[i] + lr * momentum * accum[i] : lr * accum[i];
    }
  }
};

struct AdagradLoop {
  PSTRAIN_LOOP Run(float* __restrict var, float* __restrict accum,
                   const UnalignedFloat* __restrict g, int64_t width, float lr, float eps) {
    for (int64_t i = 0; i < width; ++i) {
      accum[i] += g[i] * g[i];
      var[i] -= lr * g[i] / (std::sqrt(accum[i]) + eps);
    }
  }
};

struct AdamLoop {
  PSTRAIN_LOOP Run(float* __restrict var, float* __restrict m, float* __restrict v,
                   const UnalignedFloat* __restrict g, int64_t width, float lr, float b1, float b2,
                   float eps) {
    for (int64_t i = 0; i < width; ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      var[i] -= lr * m[i] / (std::sqrt(v[i]) + eps);
    }
  }
};

// var -= lr * g
class Sgd final : public Optimizer {
 public:
  explicit Sgd(OptimizerDef def) : Optimizer(std::move(def)), row_(PickKernel<SgdLoop>()) {}
  std::vector<std::string> slot_names() const override { return {}; }
  float slot_initial_value(int) const override { return 0; }
  void ApplyRow(float* __restrict var, float* const*, const UnalignedFloat* __restrict g,
                int64_t width, const StepScalars& s) const override {
    row_(var, g, width, s.lr);
  }

 private:
  const decltype(PickKernel<SgdLoop>()) row_;
};

// TF ApplyMomentum: accum = accum * momentum + g;
//   var -= lr * accum                         (plain)
//   var -= lr * g + lr * momentum * accum     (nesterov)
class Momentum final : public Optimizer {
 public:
  explicit Momentum(OptimizerDef def)
      : Optimizer(std::move(def)),
        momentum_(def_.momentum()),
        nesterov_(def_.nesterov()),
        row_(PickKernel<MomentumLoop>()) {}
  std::vector<std::string> slot_names() const override { return {"momentum"}; }
  float slot_initial_value(int) const override { return 0; }
  void ApplyRow(float* __restrict var, float* const* slots, const UnalignedFloat* __restrict g,
                int64_t width, const StepScalars& s) const override {
    row_(var, slots[0], g, width, s.lr, momentum_, nesterov_);
  }

 private:
  const float momentum_;
  const bool nesterov_;
  const decltype(PickKernel<MomentumLoop>()) row_;
};

// TF ApplyAdagradV2: accum += g^2; var -= lr * g / (sqrt(accum) + epsilon)
class Adagrad final : public Optimizer {
 public:
  explicit Adagrad(OptimizerDef def)
      : Optimizer(std::move(def)), eps_(def_.epsilon()), row_(PickKernel<AdagradLoop>()) {}
  std::vector<std::string> slot_names() const override { return {"accumulator"}; }
  float slot_initial_value(int) const override { return def_.initial_accumulator_value(); }
  void ApplyRow(float* __restrict var, float* const* slots, const UnalignedFloat* __restrict g,
                int64_t width, const StepScalars& s) const override {
    row_(var, slots[0], g, width, s.lr, eps_);
  }

 private:
  const float eps_;
  const decltype(PickKernel<AdagradLoop>()) row_;
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
        eps_(def_.epsilon()),
        row_(PickKernel<AdamLoop>()) {}
  std::vector<std::string> slot_names() const override { return {"m", "v"}; }
  float slot_initial_value(int) const override { return 0; }
  StepScalars Prepare(int64_t t, int64_t step) const override {
    const double tt = static_cast<double>(t);
    StepScalars s;
    s.lr = static_cast<float>(LearningRate(step) * std::sqrt(1.0 - std::pow(def_.beta_2(), tt)) /
                              (1.0 - std::pow(def_.beta_1(), tt)));
    return s;
  }
  void ApplyRow(float* __restrict var, float* const* slots, const UnalignedFloat* __restrict g,
                int64_t width, const StepScalars& s) const override {
    row_(var, slots[0], slots[1], g, width, s.lr, b1_, b2_, eps_);
  }

 private:
  const float b1_, b2_, eps_;
  const decltype(PickKernel<AdamLoop>()) row_;
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
        power_(def_.learning_rate_power()),
        l1_(def_.l1_regularization_strength()),
        l2_(def_.l2_regularization_strength()),
        beta_(def_.beta()),
        shrinkage_(def_.l2_shrinkage_regularization_strength()) {}
  std::vector<std::string> slot_names() const override { return {"accumulator", "linear"}; }
  float slot_initial_value(int slot) const override {
    return slot == 0 ? def_.initial_accumulator_value() : 0;
  }
  void ApplyRow(float* __restrict var, float* const* slots, const UnalignedFloat* __restrict g,
                int64_t width, const StepScalars& s) const override {
    float* accum = slots[0];
    float* linear = slots[1];
    const double lr = s.lr;
    const double l2 = l2_ + beta_ / (2.0 * lr);  // Keras folds beta into l2
    const bool sqrt_power = power_ == -0.5;
    for (int64_t i = 0; i < width; ++i) {
      const double grad = g[i];
      const double g_shrink = grad + 2.0 * shrinkage_ * var[i];
      const double accum_new = accum[i] + grad * grad;
      const double new_pow = sqrt_power ? std::sqrt(accum_new) : std::pow(accum_new, -power_);
      const double old_pow = sqrt_power ? std::sqrt(static_cast<double>(accum[i]))
                                        : std::pow(static_cast<double>(accum[i]), -power_);
      linear[i] += static_cast<float>(g_shrink - (new_pow - old_pow) / lr * var[i]);
      const double quadratic = new_pow / lr + 2.0 * l2;
      const double lin = linear[i];
      var[i] = std::fabs(lin) > l1_
                   ? static_cast<float>(((lin > 0 ? l1_ : -l1_) - lin) / quadratic)
                   : 0.0f;
      accum[i] = static_cast<float>(accum_new);
    }
  }

 private:
  const double power_, l1_, l2_, beta_, shrinkage_;
};

}  // namespace

bool UseAvx2RowKernels(bool allowed) {
  avx2_allowed.store(allowed, std::memory_order_relaxed);
  return CpuHasAvx2();
}

StepScalars Optimizer::Prepare(int64_t /*t*/, int64_t step) const {
  StepScalars s;
  s.lr = static_cast<float>(LearningRate(step));
  return s;
}

double ScheduledLearningRate(double learning_rate, const LearningRateSchedule& sc, int64_t step) {
  const double x = static_cast<double>(std::max<int64_t>(step, 0));
  switch (sc.kind()) {
    case LearningRateSchedule::EXPONENTIAL_DECAY: {
      double p = x / static_cast<double>(sc.decay_steps());
      if (sc.staircase()) p = std::floor(p);
      return learning_rate * std::pow(sc.decay_rate(), p);
    }
    case LearningRateSchedule::PIECEWISE_CONSTANT: {
      int i = 0;
      while (i < sc.boundaries_size() && step > sc.boundaries(i)) ++i;
      return sc.values(i);
    }
    case LearningRateSchedule::COSINE_DECAY: {
      const double decay_steps = static_cast<double>(sc.decay_steps());
      auto decay = [&](double s, double from) {
        const double fraction = std::min(s, decay_steps) / decay_steps;
        const double cosine = 0.5 * (1.0 + std::cos(M_PI * fraction));
        return from * ((1.0 - sc.alpha()) * cosine + sc.alpha());
      };
      if (sc.warmup_steps() <= 0) return decay(x, learning_rate);
      const double warmup = static_cast<double>(sc.warmup_steps());
      if (x < warmup) {
        return learning_rate + (sc.warmup_target() - learning_rate) * (x / warmup);
      }
      return decay(x - warmup, sc.warmup_target());
    }
    default:
      return learning_rate;
  }
}

absl::Status ValidateSchedule(const LearningRateSchedule& sc) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("learning-rate schedule: ", what));
  };
  switch (sc.kind()) {
    case LearningRateSchedule::CONSTANT:
      return absl::OkStatus();
    case LearningRateSchedule::EXPONENTIAL_DECAY:
      if (sc.decay_steps() <= 0) return bad("exponential decay needs decay_steps > 0");
      if (!(sc.decay_rate() > 0)) return bad("exponential decay needs decay_rate > 0");
      return absl::OkStatus();
    case LearningRateSchedule::PIECEWISE_CONSTANT:
      if (sc.values_size() != sc.boundaries_size() + 1) {
        return bad(absl::StrCat("piecewise constant needs one more value than boundaries (",
                                sc.values_size(), " values, ", sc.boundaries_size(),
                                " boundaries)"));
      }
      for (int i = 1; i < sc.boundaries_size(); ++i) {
        if (sc.boundaries(i) <= sc.boundaries(i - 1)) {
          return bad("piecewise constant boundaries must increase");
        }
      }
      for (double v : sc.values()) {
        if (!(v > 0)) return bad("piecewise constant values must be > 0");
      }
      return absl::OkStatus();
    case LearningRateSchedule::COSINE_DECAY:
      if (sc.decay_steps() <= 0) return bad("cosine decay needs decay_steps > 0");
      if (!(sc.alpha() >= 0 && sc.alpha() <= 1)) return bad("cosine decay alpha must be in [0, 1]");
      if (sc.warmup_steps() < 0) return bad("cosine decay warmup_steps must be >= 0");
      if (sc.warmup_steps() > 0 && !(sc.warmup_target() > 0)) {
        return bad("cosine decay with warmup_steps needs warmup_target > 0");
      }
      return absl::OkStatus();
    default:
      return bad(absl::StrCat("unknown kind ", static_cast<int>(sc.kind())));
  }
}

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
  // A warmup may start from 0 (as Keras's CosineDecay may); piecewise values replace the rate.
  const LearningRateSchedule& sc = def.schedule();
  const bool may_be_zero =
      (sc.kind() == LearningRateSchedule::COSINE_DECAY && sc.warmup_steps() > 0) ||
      sc.kind() == LearningRateSchedule::PIECEWISE_CONSTANT;
  RETURN_IF_ERROR(Check(def.learning_rate() > 0 || (may_be_zero && def.learning_rate() == 0),
                        name, "learning_rate must be > 0", def.learning_rate()));
  if (absl::Status sc = ValidateSchedule(def.schedule()); !sc.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " optimizer: ", sc.message()));
  }
  switch (def.kind()) {
    case OptimizerDef::SGD: return std::unique_ptr<Optimizer>(new Sgd(def));
    case OptimizerDef::MOMENTUM: return std::unique_ptr<Optimizer>(new Momentum(def));
    case OptimizerDef::ADAGRAD: return std::unique_ptr<Optimizer>(new Adagrad(def));
    case OptimizerDef::ADAM: return std::unique_ptr<Optimizer>(new Adam(def));
    default: return std::unique_ptr<Optimizer>(new Ftrl(def));
  }
}

}  // namespace pstrain
