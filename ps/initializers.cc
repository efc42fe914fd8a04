#include "ps/initializers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

// SplitMix64: a counter-based generator; the same (seed, index) always gives the same bits.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A uniform double in (0, 1) for element `index`, draw `draw`.
inline double Uniform01(uint64_t seed, int64_t index, uint64_t draw) {
  uint64_t bits = Mix(Mix(seed ^ 0x5851f42d4c957f2dULL) ^ Mix(static_cast<uint64_t>(index) * 4 + draw));
  return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// A standard normal by Box-Muller from two uniforms of this element (draw pair `pair`).
inline double StandardNormal(uint64_t seed, int64_t index, uint64_t pair) {
  double u1 = Uniform01(seed, index, 2 * pair);
  double u2 = Uniform01(seed, index, 2 * pair + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace

absl::Status ValidateInitializer(const InitializerDef& init) {
  switch (init.kind()) {
    case InitializerDef::ZEROS:
    case InitializerDef::CONSTANT:
      return absl::OkStatus();
    case InitializerDef::UNIFORM:
      if (!(init.minval() < init.maxval())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "uniform initializer needs minval < maxval, got minval=", init.minval(),
            " maxval=", init.maxval()));
      }
      return absl::OkStatus();
    case InitializerDef::NORMAL:
    case InitializerDef::TRUNCATED_NORMAL:
      if (!(init.stddev() > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat(InitializerDef::Kind_Name(init.kind()),
                         " initializer needs stddev > 0, got ", init.stddev()));
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown initializer kind ", static_cast<int>(init.kind())));
  }
}

namespace {

// InitializeFloat with the seed given apart.
void InitializeFloatSeeded(const InitializerDef& init, uint64_t seed, int64_t first_element,
                           int64_t count, float* out) {
  switch (init.kind()) {
    case InitializerDef::ZEROS:
      for (int64_t i = 0; i < count; ++i) out[i] = 0.0f;
      return;
    case InitializerDef::CONSTANT:
      for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(init.value());
      return;
    case InitializerDef::UNIFORM: {
      const double span = init.maxval() - init.minval();
      for (int64_t i = 0; i < count; ++i) {
        out[i] = static_cast<float>(init.minval() + span * Uniform01(seed, first_element + i, 0));
      }
      return;
    }
    case InitializerDef::NORMAL:
      for (int64_t i = 0; i < count; ++i) {
        out[i] = static_cast<float>(init.mean() +
                                    init.stddev() * StandardNormal(seed, first_element + i, 0));
      }
      return;
    case InitializerDef::TRUNCATED_NORMAL:
      // As TF: values beyond two standard deviations are drawn again.
      for (int64_t i = 0; i < count; ++i) {
        double z = 0;
        for (uint64_t pair = 0;; ++pair) {
          z = StandardNormal(seed, first_element + i, pair);
          if (std::fabs(z) <= 2.0 || pair == 1000) break;
        }
        out[i] = static_cast<float>(init.mean() + init.stddev() * z);
      }
      return;
    default:
      return;
  }
}

}  // namespace

void InitializeFloat(const InitializerDef& init, int64_t first_element, int64_t count, float* out) {
  InitializeFloatSeeded(init, init.seed(), first_element, count, out);
}

void InitializeFloatForKey(const InitializerDef& init, int64_t key, int64_t count, float* out) {
  // A stream of its own per key (a dynamic table draws a row at every insert, so this is on its
  // hot path): draw n is Mix(key_seed + n * gamma), SplitMix64's sequence, and each 64-bit draw
  // gives two 32-bit halves, each a uniform in (0, 1) of 23 bits (exact in float arithmetic):
  // one Mix per two elements (InitializeFloat spends two per element), drawn a batch at a time
  // and turned into values by float arithmetic in a second loop the compiler can vectorize.
  const uint64_t key_seed =
      Mix(init.seed() ^ Mix(static_cast<uint64_t>(key) ^ 0x6a09e667f3bcc909ULL));
  constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
  constexpr int64_t kBatch = 16;  // uniforms per batch (fixed: the loops below vectorize)
  uint32_t bits[kBatch];
  uint64_t next_draw = 0;
  auto draw = [&]() {  // the next kBatch uniforms' bits
    for (int64_t j = 0; j < kBatch; j += 2) {
      const uint64_t b = Mix(key_seed + next_draw++ * kGamma);
      bits[j] = static_cast<uint32_t>(b);
      bits[j + 1] = static_cast<uint32_t>(b >> 32);
    }
  };
  auto uniform = [](uint32_t b) {  // in (0, 1)
    return (static_cast<float>(static_cast<int32_t>(b >> 9)) + 0.5f) * (1.0f / 8388608.0f);
  };
  switch (init.kind()) {
    case InitializerDef::UNIFORM: {
      const float lo = static_cast<float>(init.minval());
      const float span = static_cast<float>(init.maxval() - init.minval());
      float values[kBatch];
      for (int64_t base = 0; base < count; base += kBatch) {
        draw();
        for (int64_t j = 0; j < kBatch; ++j) values[j] = lo + span * uniform(bits[j]);
        std::memcpy(out + base, values, sizeof(float) * std::min(kBatch, count - base));
      }
      return;
    }
    case InitializerDef::NORMAL:
    case InitializerDef::TRUNCATED_NORMAL: {
      // Box-Muller, both of a draw's normals; truncated: values beyond two standard deviations
      // are drawn again (as TF), from the stream's next draws.
      const bool truncated = init.kind() == InitializerDef::TRUNCATED_NORMAL;
      const float mean = static_cast<float>(init.mean());
      const float stddev = static_cast<float>(init.stddev());
      int64_t i = 0;
      while (i < count) {
        draw();
        for (int64_t j = 0; j < kBatch && i < count; j += 2) {
          const float r = std::sqrt(-2.0f * std::log(uniform(bits[j])));
          const float theta = 6.2831853f * uniform(bits[j + 1]);
          for (const float z : {r * std::cos(theta), r * std::sin(theta)}) {
            if (i == count) break;
            // After 1000 draws per element (never, in practice), anything is taken.
            if (truncated && std::fabs(z) > 2.0f &&
                next_draw < 1000 * static_cast<uint64_t>(count)) {
              continue;
            }
            out[i++] = mean + stddev * z;
          }
        }
      }
      return;
    }
    default:  // zeros, constant
      InitializeFloatSeeded(init, key_seed, 0, count, out);
      return;
  }
}

void InitializeInt64(const InitializerDef& init, int64_t /*first_element*/, int64_t count,
                     int64_t* out) {
  const int64_t v =
      init.kind() == InitializerDef::CONSTANT ? static_cast<int64_t>(init.value()) : 0;
  for (int64_t i = 0; i < count; ++i) out[i] = v;
}

}  // namespace pstrain
