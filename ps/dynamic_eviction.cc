#include "ps/dynamic_eviction.h"

#include <algorithm>

namespace pstrain {

void StepClock::Advance(int64_t step) {
  int64_t now = step_.load(std::memory_order_relaxed);
  while (step > now && !step_.compare_exchange_weak(now, step, std::memory_order_relaxed)) {
  }
}

bool StepClock::SweepDue(int64_t* next_sweep_step) const {
  if (ttl_ == 0) return false;
  const int64_t now = step();
  if (now < *next_sweep_step) return false;
  *next_sweep_step = now + std::max<int64_t>(1, ttl_ / 8);
  return true;
}

void EvictionOrder(size_t evict, std::vector<EvictionCandidate>* candidates) {
  if (evict == 0) return;
  const auto first_to_go = [](const EvictionCandidate& a, const EvictionCandidate& b) {
    if (a.age != b.age) return a.age > b.age;
    if (a.count != b.count) return a.count < b.count;
    return a.key < b.key;
  };
  std::nth_element(candidates->begin(), candidates->begin() + (evict - 1), candidates->end(),
                   first_to_go);
}

bool EvictionNeeded(int64_t capacity, int64_t held, int64_t inserting, int64_t* keep) {
  if (capacity <= 0 || held + inserting <= capacity) return false;
  *keep = capacity - capacity / 16 - inserting;
  return true;
}

}  // namespace pstrain
