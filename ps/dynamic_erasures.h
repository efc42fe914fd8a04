// Keys erased or evicted from one stripe of a dynamic table shard (ps/dynamic_shard.h), each with
// the save generation it happened in, while incremental checkpoints need them: a delta since
// generation B lists the keys erased after B that are not held again.
//
// Not thread-safe: the stripe's lock guards it.
#ifndef PSTRAIN_PS_DYNAMIC_ERASURES_H_
#define PSTRAIN_PS_DYNAMIC_ERASURES_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace pstrain {

class ErasureLog {
 public:
  void Add(int64_t key, uint32_t generation) { erased_.emplace_back(key, generation); }
  // Appends to *keys the keys erased after generation `since` for which held(key) is false
  // (stored again since: no longer erased). Keys erased twice appear twice.
  template <typename Held>
  void Since(uint32_t since, Held&& held, std::vector<int64_t>* keys) const {
    for (const auto& [key, generation] : erased_) {
      if (generation > since && !held(key)) keys->push_back(key);
    }
  }
  // Forgets erasures of generation `through` or earlier (no later delta needs them).
  void ForgetThrough(uint32_t through);
  // Memory held.
  int64_t bytes() const { return static_cast<int64_t>(erased_.capacity() * sizeof(erased_[0])); }

 private:
  std::vector<std::pair<int64_t, uint32_t>> erased_;  // (key, generation)
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_DYNAMIC_ERASURES_H_
