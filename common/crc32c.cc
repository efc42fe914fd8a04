#include "common/crc32c.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PSTRAIN_CRC32C_X86 1
#include <nmmintrin.h>
#endif

namespace pstrain {
namespace crc32c {
namespace {

// The reflected Castagnoli polynomial. In the reflected form bit 31 stands for x^0 and bit 0 for
// x^31, so shifting right multiplies by x.
constexpr uint32_t kPoly = 0x82F63B78u;

// Slice-by-8 tables: kSlice.t[k][b] is the CRC register after byte b followed by k zero bytes.
struct SliceTables {
  uint32_t t[8][256];
};

constexpr SliceTables MakeSliceTables() {
  SliceTables tables{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    tables.t[0][i] = c;
  }
  for (int k = 1; k < 8; ++k) {
    for (int i = 0; i < 256; ++i) {
      const uint32_t prev = tables.t[k - 1][i];
      tables.t[k][i] = (prev >> 8) ^ tables.t[0][prev & 0xff];
    }
  }
  return tables;
}

constexpr SliceTables kSlice = MakeSliceTables();

// Little-endian unaligned load: one mov on x86.
inline uint64_t LoadLE64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

}  // namespace

namespace internal {

uint32_t ExtendPortable(uint32_t crc, const char* data, size_t n) {
  const auto& t = kSlice.t;
  const uint8_t* p = reinterpret_cast<const uint8_t*>(data);
  uint32_t l = ~crc;
  while (n >= 8) {
    const uint64_t w = LoadLE64(p) ^ l;
    l = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^
        t[4][(w >> 24) & 0xff] ^ t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^
        t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    l = t[0][(l ^ *p++) & 0xff] ^ (l >> 8);
    --n;
  }
  return ~l;
}

}  // namespace internal

#ifdef PSTRAIN_CRC32C_X86
namespace {

// a(x) * b(x) mod P, both in the reflected form.
constexpr uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return product;
}

// x^(8n) mod P: what appending n zero bytes multiplies the CRC register by.
constexpr uint32_t XPow8N(size_t n) {
  uint32_t result = 1u << 31;  // x^0
  uint32_t square = 1u << 23;  // x^8
  while (n != 0) {
    if (n & 1) result = MultModP(square, result);
    square = MultModP(square, square);
    n >>= 1;
  }
  return result;
}

// The register after appending `kBytes` zero bytes, as four byte-indexed tables (the operation is
// linear in the register, so the four bytes' contributions XOR together).
template <size_t kBytes>
struct ZeroShift {
  uint32_t t[4][256];
};

template <size_t kBytes>
constexpr ZeroShift<kBytes> MakeZeroShift() {
  ZeroShift<kBytes> shift{};
  const uint32_t x = XPow8N(kBytes);
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) shift.t[k][b] = MultModP(x, b << (8 * k));
  }
  return shift;
}

// The hardware path runs three independent crc32 streams over three adjacent blocks (the
// instruction's latency is 3 cycles, its throughput one per cycle), then joins them by shifting
// the earlier registers over the later blocks' lengths. Long blocks for the bulk, short blocks for
// the remainder, then one stream for the last < 3 * kShortBlock bytes.
constexpr size_t kLongBlock = 8192;
constexpr size_t kShortBlock = 256;
constexpr ZeroShift<kLongBlock> kLongShift = MakeZeroShift<kLongBlock>();
constexpr ZeroShift<kShortBlock> kShortShift = MakeZeroShift<kShortBlock>();

template <size_t kBytes>
inline uint32_t Shift(const ZeroShift<kBytes>& s, uint32_t crc) {
  return s.t[0][crc & 0xff] ^ s.t[1][(crc >> 8) & 0xff] ^ s.t[2][(crc >> 16) & 0xff] ^
         s.t[3][crc >> 24];
}

template <size_t kBlock>
__attribute__((target("sse4.2"))) inline void ThreeStreams(const ZeroShift<kBlock>& shift,
                                                           uint32_t& l, const uint8_t*& p,
                                                           size_t& n) {
  static_assert(kBlock % 32 == 0, "the loop below takes 4 words per stream per step");
  while (n >= 3 * kBlock) {
    uint64_t c0 = l, c1 = 0, c2 = 0;
    const uint8_t* const end = p + kBlock;
    while (p < end) {
      for (int i = 0; i < 32; i += 8) {
        c0 = _mm_crc32_u64(c0, LoadLE64(p + i));
        c1 = _mm_crc32_u64(c1, LoadLE64(p + kBlock + i));
        c2 = _mm_crc32_u64(c2, LoadLE64(p + 2 * kBlock + i));
      }
      p += 32;
    }
    // State after block 0, then over block 1 (c0 shifted by its length, XOR c1), then block 2.
    l = Shift(shift, Shift(shift, static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1)) ^
        static_cast<uint32_t>(c2);
    p += 2 * kBlock;
    n -= 3 * kBlock;
  }
}

}  // namespace

namespace internal {

__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc, const char* data,
                                                          size_t n) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(data);
  uint32_t l = ~crc;
  // Align the bulk loads to 8 bytes.
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    l = _mm_crc32_u8(l, *p++);
    --n;
  }
  ThreeStreams(kLongShift, l, p, n);
  ThreeStreams(kShortShift, l, p, n);
  uint64_t l64 = l;
  while (n >= 8) {
    l64 = _mm_crc32_u64(l64, LoadLE64(p));
    p += 8;
    n -= 8;
  }
  l = static_cast<uint32_t>(l64);
  while (n > 0) {
    l = _mm_crc32_u8(l, *p++);
    --n;
  }
  return ~l;
}

}  // namespace internal

#else  // !PSTRAIN_CRC32C_X86

namespace internal {
uint32_t ExtendHardware(uint32_t crc, const char* data, size_t n) {
  return ExtendPortable(crc, data, n);
}
}  // namespace internal

#endif  // PSTRAIN_CRC32C_X86

namespace {

using ExtendFn = uint32_t (*)(uint32_t, const char*, size_t);

bool DetectHardware() {
#ifdef PSTRAIN_CRC32C_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

ExtendFn ChooseExtend() {
  return DetectHardware() ? internal::ExtendHardware : internal::ExtendPortable;
}

}  // namespace

bool IsHardwareAccelerated() {
  static const bool hardware = DetectHardware();
  return hardware;
}

uint32_t Extend(uint32_t crc, const char* data, size_t n) {
  static const ExtendFn extend = ChooseExtend();
  return extend(crc, data, n);
}

}  // namespace crc32c
}  // namespace pstrain
