// Test helper: writes IDX files (the MNIST layout models/data/idx_reader.h reads) for tests that
// need a small image data set on disk. Test-only; stateless.
#ifndef PSTRAIN_MODELS_DATA_IDX_TEST_UTIL_H_
#define PSTRAIN_MODELS_DATA_IDX_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

namespace pstrain {
namespace data {

// An uncompressed IDX file at `path`: `magic` (0x803 for images, 0x801 for labels), the
// dimensions, then `values` (the reader takes plain files under the gzip names too).
void WriteIdx(const std::string& path, uint32_t magic, const std::vector<uint32_t>& dims,
              const std::vector<uint8_t>& values);

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_MODELS_DATA_IDX_TEST_UTIL_H_
