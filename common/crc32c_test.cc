#include "common/crc32c.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace crc32c {
namespace {

// Bit at a time, straight from the definition: the reference the fast paths are checked against.
uint32_t BitwiseCrc32c(const std::string& data) {
  uint32_t l = 0xffffffffu;
  for (unsigned char byte : data) {
    l ^= byte;
    for (int bit = 0; bit < 8; ++bit) l = (l & 1) ? (l >> 1) ^ 0x82F63B78u : l >> 1;
  }
  return ~l;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

using Impl = uint32_t (*)(uint32_t, const char*, size_t);

struct NamedImpl {
  const char* name;
  Impl extend;
  bool available;
};

std::vector<NamedImpl> Impls() {
  return {{"Extend", &Extend, true},
          {"ExtendPortable", &internal::ExtendPortable, true},
          {"ExtendHardware", &internal::ExtendHardware, IsHardwareAccelerated()}};
}

TEST(Crc32cTest, Value_KnownVectors_MatchPublishedValues) {
  // RFC 3720 (iSCSI) B.4 and the usual check value.
  const std::string zeros(32, '\0');
  const std::string ones(32, '\xff');
  std::string ascending(32, '\0');
  std::string descending(32, '\0');
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<char>(i);
    descending[i] = static_cast<char>(31 - i);
  }
  const unsigned char iscsi_read[48] = {
      0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
      0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  const std::string iscsi(reinterpret_cast<const char*>(iscsi_read), sizeof(iscsi_read));

  for (const NamedImpl& impl : Impls()) {
    if (!impl.available) continue;
    SCOPED_TRACE(impl.name);
    auto value = [&](const std::string& s) { return impl.extend(0, s.data(), s.size()); };
    EXPECT_EQ(value("123456789"), 0xE3069283u);
    EXPECT_EQ(value(""), 0u);
    EXPECT_EQ(value("a"), 0xC1D04330u);
    EXPECT_EQ(value(zeros), 0x8A9136AAu);
    EXPECT_EQ(value(ones), 0x62A8AB43u);
    EXPECT_EQ(value(ascending), 0x46DD794Eu);
    EXPECT_EQ(value(descending), 0x113FDB5Cu);
    EXPECT_EQ(value(iscsi), 0xD9963A56u);
  }
  EXPECT_EQ(Value(absl::string_view("123456789")), 0xE3069283u);
}

TEST(Crc32cTest, Extend_EveryLengthAndAlignment_MatchesBitwiseReference) {
  // Lengths that cross every path of the hardware code: bytes before alignment, short and long
  // three-stream blocks (3 * 256 and 3 * 8192 bytes), the 8-byte tail and the byte tail.
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 1600; ++n) lengths.push_back(n);
  for (size_t n : {3 * 8192 - 1, 3 * 8192, 3 * 8192 + 1, 3 * 8192 + 3 * 256 + 13, 2 * 3 * 8192 + 999,
                   100000, 1 << 20}) {
    lengths.push_back(n);
  }
  const std::string buffer = RandomBytes((1 << 20) + 16, /*seed=*/1);
  for (size_t n : lengths) {
    for (size_t offset : {0, 1, 3, 7}) {
      if (n > 1600 && offset > 1) continue;  // keep the big cases quick
      const std::string piece = buffer.substr(offset, n);
      const uint32_t expected = BitwiseCrc32c(piece);
      for (const NamedImpl& impl : Impls()) {
        if (!impl.available) continue;
        ASSERT_EQ(impl.extend(0, buffer.data() + offset, n), expected)
            << impl.name << " length " << n << " offset " << offset;
      }
    }
  }
}

TEST(Crc32cTest, Extend_InPieces_EqualsWhole) {
  const std::string data = RandomBytes(100, /*seed=*/2);
  const uint32_t whole = Value(data);
  for (size_t split = 0; split <= data.size(); ++split) {
    const uint32_t first = Value(data.data(), split);
    EXPECT_EQ(Extend(first, data.data() + split, data.size() - split), whole) << "split " << split;
  }

  // Big data in random pieces, through each implementation.
  const std::string big = RandomBytes(200000, /*seed=*/3);
  const uint32_t big_whole = BitwiseCrc32c(big);
  std::mt19937 rng(4);
  for (const NamedImpl& impl : Impls()) {
    if (!impl.available) continue;
    uint32_t crc = 0;
    size_t pos = 0;
    while (pos < big.size()) {
      const size_t len = std::min<size_t>(big.size() - pos, rng() % 40000);
      crc = impl.extend(crc, big.data() + pos, len);
      pos += len;
    }
    EXPECT_EQ(crc, big_whole) << impl.name;
  }
}

TEST(Crc32cTest, Value_DifferentData_DifferentCrc) {
  EXPECT_NE(Value(absl::string_view("a")), Value(absl::string_view("foo")));
  EXPECT_NE(Value(absl::string_view("abc")), Value(absl::string_view("acb")));
}

TEST(Crc32cTest, Mask_RoundTrip_RecoversCrc) {
  const uint32_t crc = Value(absl::string_view("foo"));
  EXPECT_NE(crc, Mask(crc));
  EXPECT_NE(crc, Mask(Mask(crc)));
  EXPECT_EQ(crc, Unmask(Mask(crc)));
  EXPECT_EQ(crc, Unmask(Unmask(Mask(Mask(crc)))));
  for (uint32_t v : {0u, 1u, 0x80000000u, 0xffffffffu, 0xE3069283u}) {
    EXPECT_EQ(Unmask(Mask(v)), v);
  }
  // The definition, spelled out on one value: rotate right 15, add the delta.
  EXPECT_EQ(Mask(0xE3069283u), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u);
  static_assert(Unmask(Mask(12345u)) == 12345u, "Mask and Unmask are constexpr");
}

TEST(Crc32cTest, IsHardwareAccelerated_X86WithSse42_True) {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("sse4.2")) GTEST_SKIP() << "this CPU has no SSE4.2";
  EXPECT_TRUE(IsHardwareAccelerated());
#else
  EXPECT_FALSE(IsHardwareAccelerated());
#endif
}

}  // namespace
}  // namespace crc32c
}  // namespace pstrain
