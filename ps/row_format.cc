#include "ps/row_format.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

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
// INT8: a value within this fraction of a step of a step is on it.
constexpr float kOnStep = 1e-3f;

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
    const float inv = range > 0 && std::isfinite(range) ? 255.0f / range : 0.0f;
    for (int64_t k = 0; k < dim; ++k) {
      const float steps = (row[k] - lo) * inv;
      const float nearest = std::nearbyint(steps);
      float v;
      if (bits == nullptr || std::fabs(steps - nearest) < kOnStep) {
        v = nearest;
      } else {
        v = std::floor(steps + static_cast<float>(bits->Next32() >> 8) * kTwoToMinus24);
      }
      q[k] = static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, v)));
    }
  }
  std::memcpy(out, &lo, 4);
  std::memcpy(out + 4, &hi, 4);
  // Padding to a multiple of 4 bytes: zeros, so that equal rows are equal bytes.
  for (int64_t k = 8 + dim; k < RowBytes(ROW_INT8, dim); ++k) out[k] = 0;
}

void DecodeInt8(const char* stored, int64_t dim, float* out) {
  float lo, hi;
  std::memcpy(&lo, stored, 4);
  std::memcpy(&hi, stored + 4, 4);
  const float step = (hi - lo) * (1.0f / 255.0f);
  const uint8_t* q = reinterpret_cast<const uint8_t*>(stored + 8);
  for (int64_t k = 0; k < dim; ++k) {
    // The greatest exactly (lo + 255 * step may round past it).
    out[k] = q[k] == 255 ? hi : lo + step * static_cast<float>(q[k]);
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

uint16_t FloatToHalf(float x, uint32_t random13) {
  const uint32_t b = FloatBits(x);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  const uint32_t magnitude = b & 0x7fffffff;
  if (magnitude > 0x7f800000) return 0x7e00 | sign;  // NaN
  if (magnitude < 0x38800000) {
    // Under 2^-14: steps of 2^-24, the subnormals (a count of 1024 of them is the least normal,
    // whose bits are the same number).
    const float steps = BitsFloat(magnitude) * kTwoTo24;
    const float rounded = std::floor(steps + static_cast<float>(random13) * (1.0f / 8192.0f));
    return static_cast<uint16_t>(static_cast<uint32_t>(rounded)) | sign;
  }
  // The 13 bits float32 has beyond half's 10: adding random bits below them and dropping them
  // rounds up with the probability of their value (a carry moves into the exponent as it should).
  const uint32_t rounded = (magnitude + (random13 & 0x1fff)) & ~uint32_t{0x1fff};
  const int exponent = static_cast<int>(rounded >> 23) - 127 + 15;
  if (exponent >= 31) return 0x7bff | sign;  // past 65504 (and infinity): the largest finite
  return static_cast<uint16_t>((exponent << 10) | ((rounded >> 13) & 0x3ff)) | sign;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t em = h & 0x7fff;
  float magnitude;
  if (em >= 0x7c00) {
    magnitude = BitsFloat(0x7f800000 | ((em & 0x3ff) << 13));
  } else if (em < 0x0400) {
    magnitude = static_cast<float>(em) * kTwoToMinus24;
  } else {
    magnitude = BitsFloat(((em >> 10) - 15 + 127) << 23 | (em & 0x3ff) << 13);
  }
  return BitsFloat(FloatBits(magnitude) | sign);
}

uint16_t FloatToBfloat16(float x, uint32_t random16) {
  const uint32_t b = FloatBits(x);
  const uint32_t sign = b & 0x80000000;
  const uint32_t magnitude = b & 0x7fffffff;
  if (magnitude > 0x7f800000) return static_cast<uint16_t>((sign | 0x7fc00000) >> 16);
  uint32_t rounded = (magnitude + (random16 & 0xffff)) >> 16;
  if (rounded >= 0x7f80) rounded = 0x7f7f;  // rounded past the largest (and infinity)
  return static_cast<uint16_t>((sign >> 16) | rounded);
}

float Bfloat16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

void EncodeRow(RowFormat format, const float* row, int64_t dim, char* out, RoundingBits* bits) {
  switch (format) {
    case ROW_FLOAT16: {
      uint16_t* h = reinterpret_cast<uint16_t*>(out);
      if (bits == nullptr) {
        for (int64_t k = 0; k < dim; ++k) h[k] = FloatToHalf(row[k], 0x1000);
      } else {
        for (int64_t k = 0; k < dim; ++k) h[k] = FloatToHalf(row[k], bits->Next32() & 0x1fff);
      }
      if (dim % 2 == 1) h[dim] = 0;
      return;
    }
    case ROW_BFLOAT16: {
      uint16_t* h = reinterpret_cast<uint16_t*>(out);
      if (bits == nullptr) {
        for (int64_t k = 0; k < dim; ++k) h[k] = FloatToBfloat16(row[k], 0x8000);
      } else {
        for (int64_t k = 0; k < dim; ++k) h[k] = FloatToBfloat16(row[k], bits->Next32() & 0xffff);
      }
      if (dim % 2 == 1) h[dim] = 0;
      return;
    }
    case ROW_INT8:
      EncodeInt8(row, dim, out, bits);
      return;
    default:
      std::memcpy(out, row, static_cast<size_t>(4 * dim));
  }
}

void DecodeRow(RowFormat format, const char* stored, int64_t dim, float* out) {
  switch (format) {
    case ROW_FLOAT16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(stored);
      for (int64_t k = 0; k < dim; ++k) out[k] = HalfToFloat(h[k]);
      return;
    }
    case ROW_BFLOAT16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(stored);
      for (int64_t k = 0; k < dim; ++k) out[k] = Bfloat16ToFloat(h[k]);
      return;
    }
    case ROW_INT8:
      DecodeInt8(stored, dim, out);
      return;
    default:
      std::memcpy(out, stored, static_cast<size_t>(4 * dim));
  }
}

}  // namespace pstrain
