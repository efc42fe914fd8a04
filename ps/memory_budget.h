// A ps task's memory budget: every table's memory (fixed shards' rows and slots, dynamic tables'
// records, indexes and admission sketches) is reserved here before it is allocated, so that a
// create or a growth past the budget fails with kResourceExhausted naming the table and the bytes,
// instead of the kernel's out-of-memory kill taking the whole ps (and every shard it holds).
#ifndef PSTRAIN_PS_MEMORY_BUDGET_H_
#define PSTRAIN_PS_MEMORY_BUDGET_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pstrain {

// Thread-safe.
class MemoryBudget {
 public:
  // `limit_bytes` 0: no limit (reservations are still counted).
  explicit MemoryBudget(int64_t limit_bytes = 0) : limit_(limit_bytes) {}

  // Reserves `bytes` for `what` (a table's name), leaving at least `headroom` bytes of the budget
  // unreserved. Errors: kResourceExhausted naming `what`, the bytes asked for, the budget and what
  // is already reserved; nothing is reserved then.
  absl::Status Reserve(int64_t bytes, absl::string_view what, int64_t headroom = 0);
  void Release(int64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

  int64_t limit() const { return limit_; }
  int64_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  const int64_t limit_;
  std::atomic<int64_t> used_{0};
};

// Bytes reserved in a budget (which may be null: nothing is counted), given back when this goes.
// Move-only.
class BudgetReservation {
 public:
  BudgetReservation() = default;
  explicit BudgetReservation(MemoryBudget* budget) : budget_(budget) {}
  ~BudgetReservation() { Reset(); }
  BudgetReservation(BudgetReservation&& other) noexcept
      : budget_(other.budget_), bytes_(other.bytes_) {
    other.bytes_ = 0;
  }
  BudgetReservation& operator=(BudgetReservation&& other) noexcept {
    if (this != &other) {
      Reset();
      budget_ = other.budget_;
      bytes_ = other.bytes_;
      other.bytes_ = 0;
    }
    return *this;
  }
  BudgetReservation(const BudgetReservation&) = delete;
  BudgetReservation& operator=(const BudgetReservation&) = delete;

  // Reserves `bytes` more (leaving `headroom`). Errors: as MemoryBudget::Reserve.
  absl::Status Add(int64_t bytes, absl::string_view what, int64_t headroom = 0) {
    if (budget_ != nullptr && bytes > 0) {
      absl::Status s = budget_->Reserve(bytes, what, headroom);
      if (!s.ok()) return s;
    }
    bytes_ += bytes;
    return absl::OkStatus();
  }
  // Gives `bytes` back.
  void Remove(int64_t bytes) {
    if (budget_ != nullptr) budget_->Release(bytes);
    bytes_ -= bytes;
  }
  void Reset() {
    if (budget_ != nullptr && bytes_ != 0) budget_->Release(bytes_);
    bytes_ = 0;
  }
  int64_t bytes() const { return bytes_; }

 private:
  MemoryBudget* budget_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_MEMORY_BUDGET_H_
