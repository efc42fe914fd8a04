// When a dynamic table shard's keys go (ps/dynamic_shard.h): by age (TTL) and by capacity.
//
//   StepClock   the shard's step: the largest global step of any request it got. A key whose last
//               step is more than ttl_steps behind it is expired: never read, updated, exported,
//               saved or counted again; a stripe's expired keys are swept (freed) at most every
//               max(1, ttl_steps / 8) steps.
//   Capacity    past its capacity, the least recently used keys go first: the smallest last step,
//               then fewer sightings, then the smaller key (EvictionOrder).
//
// Steps are kept in records as their low 32 bits; ages are computed modulo 2^32, so TTLs below
// 2^31 steps are exact. StepClock is thread-safe (an atomic); the rest are plain functions.
#ifndef PSTRAIN_PS_DYNAMIC_EVICTION_H_
#define PSTRAIN_PS_DYNAMIC_EVICTION_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace pstrain {

class StepClock {
 public:
  // `ttl_steps` 0: keys never expire.
  explicit StepClock(int64_t ttl_steps = 0) : ttl_(ttl_steps) {}

  int64_t ttl() const { return ttl_; }
  // The shard's step.
  int64_t step() const { return step_.load(std::memory_order_relaxed); }
  // Moves the shard's step up to `step` (never back: async workers' steps arrive out of order).
  void Advance(int64_t step);
  // A request's step as records keep it: its own, or the shard's when it gave none (0).
  uint32_t Effective(int64_t request_step) const {
    return static_cast<uint32_t>(request_step > 0 ? request_step : step());
  }
  // Whether a record last touched at `record_step` has expired.
  bool Expired(uint32_t record_step) const {
    return ttl_ > 0 &&
           static_cast<uint32_t>(static_cast<uint32_t>(step()) - record_step) >
               static_cast<uint32_t>(ttl_);
  }
  // The full step whose low 32 bits are `record_step`: the one at most 2^31 from the shard's.
  int64_t FullStep(uint32_t record_step) const {
    const int64_t now = step();
    return now + static_cast<int32_t>(record_step - static_cast<uint32_t>(now));
  }
  // Whether a stripe whose next sweep is due at *next_sweep_step should sweep now; if so, the next
  // one is set. Never with no TTL.
  bool SweepDue(int64_t* next_sweep_step) const;

 private:
  const int64_t ttl_;
  std::atomic<int64_t> step_{0};
};

// A record's last step moves only forward (async workers send steps out of order); compared
// modulo 2^32.
inline void Touch(uint32_t* last, uint32_t step) {
  if (static_cast<int32_t>(step - *last) > 0) *last = step;
}

// A key that capacity eviction may take.
struct EvictionCandidate {
  uint32_t age;  // steps since its last step (larger: less recently used)
  uint32_t count;
  int64_t key;
  int stripe;
};

// Moves the first `evict` candidates to go (by age, then fewer sightings, then the smaller key) to
// the front of `candidates`, in no particular order among themselves (evict <= size).
void EvictionOrder(size_t evict, std::vector<EvictionCandidate>* candidates);

// Whether `held` keys and `inserting` more would pass `capacity` (0: no capacity); if so,
// *keep is how many keys to keep before inserting: evictions come in batches, down to
// capacity - capacity/16 - inserting (which may be below 0: then every key goes).
bool EvictionNeeded(int64_t capacity, int64_t held, int64_t inserting, int64_t* keep);

}  // namespace pstrain

#endif  // PSTRAIN_PS_DYNAMIC_EVICTION_H_
