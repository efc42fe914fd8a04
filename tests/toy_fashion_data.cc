#include "tests/toy_fashion_data.h"

#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

uint32_t BigEndian(uint32_t v) {
  return (v >> 24) | ((v >> 8) & 0xff00) | ((v << 8) & 0xff0000) | (v << 24);
}

}  // namespace

void WriteIdx(const std::string& path, uint32_t magic, const std::vector<uint32_t>& dims,
              const std::vector<uint8_t>& values) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint32_t m = BigEndian(magic);
  out.write(reinterpret_cast<const char*>(&m), 4);
  for (uint32_t d : dims) {
    const uint32_t be = BigEndian(d);
    out.write(reinterpret_cast<const char*>(&be), 4);
  }
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size()));
  ASSERT_TRUE(out.good()) << path;
}

void WriteToySplit(const std::string& dir, const std::string& prefix, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> pixels(count * 16), labels(count);
  for (int i = 0; i < count; ++i) {
    labels[i] = static_cast<uint8_t>(rng() % 3);
    for (int p = 0; p < 16; ++p) {
      const bool lit = p / 4 == labels[i];
      pixels[i * 16 + p] = static_cast<uint8_t>((lit ? 140 : 0) + rng() % 110);
    }
  }
  WriteIdx(absl::StrCat(dir, "/", prefix, "-images-idx3-ubyte.gz"), 0x803,
           {static_cast<uint32_t>(count), 4, 4}, pixels);
  WriteIdx(absl::StrCat(dir, "/", prefix, "-labels-idx1-ubyte.gz"), 0x801,
           {static_cast<uint32_t>(count)}, labels);
}

}  // namespace pstrain
