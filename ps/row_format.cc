#include "ps/row_format.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

// Loads and stores through memcpy: a row may sit at any address (a reply's buffer, a value read
// from disk), and these compile to plain moves.
inline void StoreFloat(char* p, float v) { std::memcpy(p, &v, 4); }
inline uint16_t LoadU16(const char* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
inline void StoreU16(char* p, uint16_t h) { std::memcpy(p, &h, 2); }

inline uint32_t FloatBits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
inline float BitsFloat(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

constexpr float kTwoTo24 = 16777216.0f;         // 2^24
constexpr float kTwoToMinus24 = 5.9604645e-8f;  // 2^-24
constexpr float kTwoTo112 = 5.1922969e33f;      // 2^112
// INT8: a value within this fraction of a step of a step is on it.
constexpr float kOnStep = 1e-3f;
// Rows are converted in pieces of this many elements, each piece's rounding noise drawn first
// (so that the conversion loops have no calls and vectorize).
constexpr int64_t kPiece = 64;

// 16 bits of rounding noise per element of a piece (nearest: a half, 0x8000).
void Noise(RoundingBits* bits, int64_t n, uint16_t* noise) {
  if (bits == nullptr) {
    for (int64_t k = 0; k < n; ++k) noise[k] = 0x8000;
    return;
  }
  for (int64_t k = 0; k < n; k += 4) {
    const uint64_t r = bits->Next64();
    for (int64_t i = 0; i < 4 && k + i < n; ++i)
      noise[k + i] = static_cast<uint16_t>(r >> (16 * i));
  }
}

// One element to half, `noise16` 16 bits of which the top 13 are used (0x8000: to nearest).
inline uint16_t HalfOf(float x, uint32_t noise16) {
  const uint32_t b = FloatBits(x);
  const uint32_t sign = (b >> 16) & 0x8000;
  const uint32_t magnitude = b & 0x7fffffff;
  const uint32_t noise13 = noise16 >> 3;
  // Normal halves: adding noise below float32's 13 extra bits and dropping them rounds up with
  // the probability of their value (a carry moves into the exponent as it should).
  const uint32_t rounded = (magnitude + noise13) & ~uint32_t{0x1fff};
  const int32_t exponent = static_cast<int32_t>(rounded >> 23) - 127 + 15;
  uint32_t h = (static_cast<uint32_t>(exponent) << 10) | ((rounded >> 13) & 0x3ff);
  h = exponent >= 31 ? 0x7bff : h;  // past 65504 (and infinity): the largest finite
  // Under 2^-14: steps of 2^-24, the subnormals (a count of 1024 of them is the least normal,
  // whose bits are the same number).
  const float small = BitsFloat(std::min(magnitude, uint32_t{0x38800000}));
  const uint32_t steps =
      static_cast<uint32_t>(small * kTwoTo24 + static_cast<float>(noise13) * (1.0f / 8192.0f));
  h = magnitude < 0x38800000 ? steps : h;
  h = magnitude > 0x7f800000 ? 0x7e00 : h;  // NaN
  return static_cast<uint16_t>(h | sign);
}

inline float FloatOfHalf(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t em = h & 0x7fff;
  // Shifted into float32's place, the bits are the value times 2^-112, subnormals included.
  const float scaled = BitsFloat(em << 13) * kTwoTo112;
  const uint32_t magnitude = em >= 0x7c00 ? (0x7f800000 | (em << 13)) : FloatBits(scaled);
  return BitsFloat(magnitude | sign);
}

inline uint16_t Bfloat16Of(float x, uint32_t noise16) {
  const uint32_t b = FloatBits(x);
  const uint32_t sign = b & 0x80000000;
  const uint32_t magnitude = b & 0x7fffffff;
  uint32_t rounded = (magnitude + noise16) >> 16;
  rounded = rounded >= 0x7f80 ? 0x7f7f : rounded;       // rounded past the largest (and infinity)
  rounded = magnitude > 0x7f800000 ? 0x7fc0 : rounded;  // NaN
  return static_cast<uint16_t>((sign >> 16) | rounded);
}

void EncodeInt8(const float* row, int64_t dim, char* out, RoundingBits* bits) {
  float lo = 0, hi = 0;
  bool finite = true;
  if (dim > 0) lo = hi = row[0];
  for (int64_t k = 0; k < dim; ++k) {
    finite = finite && std::isfinite(row[k]);
    lo = std::min(lo, row[k]);
    hi = std::max(hi, row[k]);
  }
  uint8_t* q = reinterpret_cast<uint8_t*>(out + 8);
  if (!finite) {
    lo = hi = std::nanf("");
    std::memset(q, 0, static_cast<size_t>(dim));
  } else {
    const float range = hi - lo;
    // (A range so small that 255 / range overflows: every element reads the least.)
    float inv = range > 0 && std::isfinite(range) ? 255.0f / range : 0.0f;
    if (!std::isfinite(inv)) inv = 0.0f;
    uint16_t noise[kPiece];
    for (int64_t at = 0; at < dim; at += kPiece) {
      const int64_t n = std::min(kPiece, dim - at);
      Noise(bits, n, noise);
      for (int64_t k = 0; k < n; ++k) {
        // In [0, 255] (up to rounding): truncation is floor.
        const float steps = std::max(0.0f, (row[at + k] - lo) * inv);
        const float nearest = static_cast<float>(static_cast<int32_t>(steps + 0.5f));
        const float up = static_cast<float>(noise[k]) * (1.0f / 65536.0f);
        const float v = std::fabs(steps - nearest) < kOnStep
                            ? nearest
                            : static_cast<float>(static_cast<int32_t>(steps + up));
        q[at + k] = static_cast<uint8_t>(std::min(255.0f, v));
      }
    }
  }
  std::memcpy(out, &lo, 4);
  std::memcpy(out + 4, &hi, 4);
  // Padding to a multiple of 4 bytes: zeros, so that equal rows are equal bytes.
  for (int64_t k = 8 + dim; k < RowBytes(ROW_INT8, dim); ++k) out[k] = 0;
}

void DecodeInt8(const char* stored, int64_t dim, char* out) {
  float lo, hi;
  std::memcpy(&lo, stored, 4);
  std::memcpy(&hi, stored + 4, 4);
  const float step = (hi - lo) * (1.0f / 255.0f);
  const uint8_t* q = reinterpret_cast<const uint8_t*>(stored + 8);
  for (int64_t k = 0; k < dim; ++k) {
    // The greatest exactly (lo + 255 * step may round past it).
    StoreFloat(out + 4 * k, q[k] == 255 ? hi : lo + step * static_cast<float>(q[k]));
  }
}

}  // namespace

int64_t RowBytes(RowFormat format, int64_t dim) {
  switch (format) {
    case ROW_FLOAT16:
    case ROW_BFLOAT16:
      return (2 * dim + 3) / 4 * 4;
    case ROW_INT8:
      return (8 + dim + 3) / 4 * 4;
    default:
      return 4 * dim;
  }
}

RowFormat StoredFormatFor(RowFormat asked, int64_t dim) {
  if (asked == ROW_INT8 && RowBytes(ROW_INT8, dim) >= RowBytes(ROW_BFLOAT16, dim)) {
    return ROW_BFLOAT16;
  }
  return asked;
}

const char* RowFormatName(RowFormat format) {
  switch (format) {
    case ROW_FLOAT16:
      return "float16";
    case ROW_BFLOAT16:
      return "bfloat16";
    case ROW_INT8:
      return "int8";
    default:
      return "float32";
  }
}

absl::Status ParseRowFormat(const std::string& name, RowFormat* format) {
  for (RowFormat f : {ROW_FLOAT32, ROW_FLOAT16, ROW_BFLOAT16, ROW_INT8}) {
    if (name == RowFormatName(f)) {
      *format = f;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("row format \"", name, "\" is not one of float32, float16, bfloat16, int8"));
}

bool IsSlotFormat(RowFormat format) {
  return format == ROW_FLOAT32 || format == ROW_FLOAT16 || format == ROW_BFLOAT16;
}

absl::Status ParseSlotFormat(const std::string& name, RowFormat* format) {
  RowFormat parsed;
  if (!ParseRowFormat(name, &parsed).ok() || !IsSlotFormat(parsed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot format \"", name, "\" is not one of float32, float16, bfloat16"));
  }
  *format = parsed;
  return absl::OkStatus();
}

uint16_t FloatToHalf(float x, uint32_t random13) { return HalfOf(x, (random13 & 0x1fff) << 3); }

float HalfToFloat(uint16_t h) { return FloatOfHalf(h); }

uint16_t FloatToBfloat16(float x, uint32_t random16) { return Bfloat16Of(x, random16 & 0xffff); }

float Bfloat16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

void EncodeRow(RowFormat format, const float* row, int64_t dim, char* out, RoundingBits* bits) {
  switch (format) {
    case ROW_FLOAT16:
    case ROW_BFLOAT16: {
      uint16_t noise[kPiece];
      for (int64_t at = 0; at < dim; at += kPiece) {
        const int64_t n = std::min(kPiece, dim - at);
        Noise(bits, n, noise);
        char* h = out + 2 * at;
        if (format == ROW_FLOAT16) {
          for (int64_t k = 0; k < n; ++k) StoreU16(h + 2 * k, HalfOf(row[at + k], noise[k]));
        } else {
          for (int64_t k = 0; k < n; ++k) StoreU16(h + 2 * k, Bfloat16Of(row[at + k], noise[k]));
        }
      }
      if (dim % 2 == 1) StoreU16(out + 2 * dim, 0);
      return;
    }
    case ROW_INT8:
      EncodeInt8(row, dim, out, bits);
      return;
    default:
      std::memcpy(out, row, static_cast<size_t>(4 * dim));
  }
}

void DecodeRow(RowFormat format, const char* stored, int64_t dim, void* out_floats) {
  char* out = static_cast<char*>(out_floats);
  switch (format) {
    case ROW_FLOAT16:
      for (int64_t k = 0; k < dim; ++k)
        StoreFloat(out + 4 * k, FloatOfHalf(LoadU16(stored + 2 * k)));
      return;
    case ROW_BFLOAT16:
      for (int64_t k = 0; k < dim; ++k) {
        StoreFloat(out + 4 * k, Bfloat16ToFloat(LoadU16(stored + 2 * k)));
      }
      return;
    case ROW_INT8:
      DecodeInt8(stored, dim, out);
      return;
    default:
      std::memcpy(out, stored, static_cast<size_t>(4 * dim));
  }
}

}  // namespace pstrain
