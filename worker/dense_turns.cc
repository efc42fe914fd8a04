#include "worker/dense_turns.h"

#include <utility>

namespace pstrain {

DenseTurn::DenseTurn(DenseTurn&& other) noexcept
    : turns_(std::exchange(other.turns_, nullptr)),
      step_(other.step_),
      in_step_order_(other.in_step_order_) {}

DenseTurn& DenseTurn::operator=(DenseTurn&& other) noexcept {
  if (this != &other) {
    Release();
    turns_ = std::exchange(other.turns_, nullptr);
    step_ = other.step_;
    in_step_order_ = other.in_step_order_;
  }
  return *this;
}

DenseCache* DenseTurn::cache() const {
  if (turns_ == nullptr) return nullptr;
  return turns_->options().turns == 1 || in_step_order_ ? &turns_->cache_ : nullptr;
}

void DenseTurn::Release() {
  if (turns_ == nullptr) return;
  std::exchange(turns_, nullptr)->Give(step_, in_step_order_);
}

DenseTurn DenseTurns::Take(int64_t step, bool in_step_order) {
  absl::MutexLock lock(&mu_);
  ++waiting_;
  if (in_step_order) {
    auto ready = [this, step]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return held_ == 0 && (next_step_ == step || next_step_ < 0);
    };
    mu_.Await(absl::Condition(&ready));
  } else {
    const uint64_t ticket = next_ticket_++;
    auto ready = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return serving_ == ticket && (options_.turns <= 0 || held_ < options_.turns);
    };
    mu_.Await(absl::Condition(&ready));
    ++serving_;
  }
  --waiting_;
  ++held_;
  return DenseTurn(this, step, in_step_order);
}

void DenseTurns::Give(int64_t step, bool in_step_order) {
  absl::MutexLock lock(&mu_);
  --held_;
  if (in_step_order) next_step_ = step + 1;
}

bool DenseTurns::AwaitWaiting(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return waiting_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

int DenseTurns::held() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

}  // namespace pstrain
