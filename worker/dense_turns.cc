#include "worker/dense_turns.h"

#include <utility>

namespace pstrain {

DenseTurn::DenseTurn(DenseTurn&& other) noexcept
    : turns_(std::exchange(other.turns_, nullptr)), step_(other.step_) {}

DenseTurn& DenseTurn::operator=(DenseTurn&& other) noexcept {
  if (this != &other) {
    Release();
    turns_ = std::exchange(other.turns_, nullptr);
    step_ = other.step_;
  }
  return *this;
}

DenseCache* DenseTurn::cache() const {
  if (turns_ == nullptr) return nullptr;
  const DenseTurnsOptions& o = turns_->options();
  return o.turns == 1 || o.by_step ? &turns_->cache_ : nullptr;
}

void DenseTurn::Release() {
  if (turns_ == nullptr) return;
  std::exchange(turns_, nullptr)->Give(step_);
}

DenseTurn DenseTurns::Take(int64_t step) {
  absl::MutexLock lock(&mu_);
  ++waiting_;
  if (options_.by_step) {
    auto ready = [this, step]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return next_step_ == step && held_ == 0;
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
  return DenseTurn(this, step);
}

void DenseTurns::Give(int64_t step) {
  absl::MutexLock lock(&mu_);
  --held_;
  if (options_.by_step) next_step_ = step + 1;
}

void DenseTurns::Restart(int64_t first_step) {
  absl::MutexLock lock(&mu_);
  next_step_ = first_step;
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
