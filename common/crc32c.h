// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by TFRecord files, LevelDB/RocksDB
// and iSCSI, plus TFRecord's masked form. On x86-64 CPUs with SSE4.2 the crc32 instruction is used
// (chosen at run time; the build needs no -msse4.2); elsewhere a slice-by-8 table. Both give the
// same values. Every function here is pure and thread-safe.
#ifndef PSTRAIN_COMMON_CRC32C_H_
#define PSTRAIN_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace pstrain {
namespace crc32c {

// The CRC-32C of A followed by data[0, n), where `crc` is the CRC-32C of A (0 for an empty A).
// So Extend(Extend(0, a, na), b, nb) == Value of a and b concatenated.
uint32_t Extend(uint32_t crc, const char* data, size_t n);

// The CRC-32C of data[0, n).
inline uint32_t Value(const char* data, size_t n) { return Extend(0, data, n); }
inline uint32_t Value(absl::string_view data) { return Extend(0, data.data(), data.size()); }

// TFRecord's masked CRC: computing the CRC of a string that contains embedded CRCs is
// problematic, so stored CRCs are rotated right by 15 bits and offset by a constant.
inline constexpr uint32_t kMaskDelta = 0xa282ead8u;
inline constexpr uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }
inline constexpr uint32_t Unmask(uint32_t masked) {
  const uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

// Whether Extend uses the CPU's crc32 instruction on this machine (for logs and benchmarks).
bool IsHardwareAccelerated();

namespace internal {
// The two implementations behind Extend, exposed so tests can check both against each other.
// ExtendHardware must only be called when IsHardwareAccelerated() is true.
uint32_t ExtendPortable(uint32_t crc, const char* data, size_t n);
uint32_t ExtendHardware(uint32_t crc, const char* data, size_t n);
}  // namespace internal

}  // namespace crc32c
}  // namespace pstrain

#endif  // PSTRAIN_COMMON_CRC32C_H_
