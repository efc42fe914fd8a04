#include "models/data/idx_test_util.h"

#include <fstream>

namespace pstrain {
namespace data {
namespace {

void PutBigEndian(uint32_t v, std::string* out) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

}  // namespace

void WriteIdx(const std::string& path, uint32_t magic, const std::vector<uint32_t>& dims,
              const std::vector<uint8_t>& values) {
  std::string bytes;
  PutBigEndian(magic, &bytes);
  for (uint32_t d : dims) PutBigEndian(d, &bytes);
  bytes.append(values.begin(), values.end());
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace data
}  // namespace pstrain
