#include "ps/initializers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/splitmix64.h"

namespace pstrain {
namespace {

// A uniform double in (0, 1) for element `index`, draw `draw`.
inline double Uniform01(uint64_t seed, int64_t index, uint64_t draw) {
  const uint64_t bits = SplitMix64(SplitMix64(seed ^ 0x5851f42d4c957f2dULL) ^
                                   SplitMix64(static_cast<uint64_t>(index) * 4 + draw));
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
  // hot path): draw n is SplitMix64(key_seed + n * gamma), SplitMix64's sequence, and each 64-bit
  // draw gives two 32-bit halves (low first), each a uniform in (0, 1) of 23 bits (exact in float
  // arithmetic): one mix per two elements, where InitializeFloat spends two per element.
  const uint64_t key_seed =
      SplitMix64(init.seed() ^ SplitMix64(static_cast<uint64_t>(key) ^ 0x6a09e667f3bcc909ULL));
  uint64_t next_draw = 0;
  auto uniform = [](uint32_t b) {  // in (0, 1)
    return (static_cast<float>(static_cast<int32_t>(b >> 9)) + 0.5f) * (1.0f / 8388608.0f);
  };
  switch (init.kind()) {
    case InitializerDef::UNIFORM: {
      // Four values from two draws at a time, in vector registers (GCC's and Clang's vector
      // types): the draws never pass through memory. Through a buffer, the vector load of four
      // 32-bit stores can't be forwarded and waits for every older store to reach the cache,
      // among them the cold record the caller has just begun to write.
      using U64x2 = uint64_t __attribute__((vector_size(16)));
      using U32x4 = uint32_t __attribute__((vector_size(16)));
      using I32x4 = int32_t __attribute__((vector_size(16)));
      using F32x4 = float __attribute__((vector_size(16)));
      const float lo = static_cast<float>(init.minval());
      const float span = static_cast<float>(init.maxval() - init.minval());
      for (int64_t i = 0; i < count; i += 4) {
        const U64x2 draws = {SplitMix64(key_seed + next_draw * kSplitMix64Gamma),
                             SplitMix64(key_seed + (next_draw + 1) * kSplitMix64Gamma)};
        next_draw += 2;
        U32x4 halves;
        std::memcpy(&halves, &draws, sizeof(halves));
        const I32x4 mantissas = reinterpret_cast<I32x4>(halves >> 9);
        const F32x4 u = (__builtin_convertvector(mantissas, F32x4) + 0.5f) * (1.0f / 8388608.0f);
        const F32x4 v = lo + span * u;
        if (count - i >= 4) {
          std::memcpy(out + i, &v, sizeof(v));
        } else {
          for (int64_t j = 0; i + j < count; ++j) out[i + j] = v[j];
        }
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
        const uint64_t bits = SplitMix64(key_seed + next_draw++ * kSplitMix64Gamma);
        const float r = std::sqrt(-2.0f * std::log(uniform(static_cast<uint32_t>(bits))));
        const float theta = 6.2831853f * uniform(static_cast<uint32_t>(bits >> 32));
        for (const float z : {r * std::cos(theta), r * std::sin(theta)}) {
          if (i == count) break;
          // After 1000 draws per element (never, in practice), anything is taken.
          if (truncated && std::fabs(z) > 2.0f && next_draw < 1000 * static_cast<uint64_t>(count)) {
            continue;
          }
          out[i++] = mean + stddev * z;
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
