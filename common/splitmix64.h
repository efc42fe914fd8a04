// SplitMix64 (Steele, Lea and Flood, 2014): a 64-bit mix that scatters any input uniformly, and the
// counter-based generator built on it. Used for key routing, per-key initial values, port picking
// and benchmark ids: the same input always gives the same bits.
#ifndef PSTRAIN_COMMON_SPLITMIX64_H_
#define PSTRAIN_COMMON_SPLITMIX64_H_

#include <cstdint>

namespace pstrain {

inline constexpr uint64_t kSplitMix64Gamma = 0x9e3779b97f4a7c15ULL;

// The generator's output for state `x`: x + gamma, then the finalizer.
inline uint64_t SplitMix64(uint64_t x) {
  x += kSplitMix64Gamma;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The next output of the generator whose state is *state, advancing it.
inline uint64_t SplitMix64Next(uint64_t* state) {
  const uint64_t x = *state;
  *state += kSplitMix64Gamma;
  return SplitMix64(x);
}

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SPLITMIX64_H_
