// Test helper: a separable toy set in the Fashion-MNIST file layout (4x4 images of 3 classes,
// class c lighting row c, plus noise everywhere), as uncompressed IDX files. Test-only.
#ifndef PSTRAIN_TESTS_TOY_FASHION_DATA_H_
#define PSTRAIN_TESTS_TOY_FASHION_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

namespace pstrain {

// Writes an uncompressed IDX file (the reader takes plain files under any name). Fails the
// current test if the file can't be written.
void WriteIdx(const std::string& path, uint32_t magic, const std::vector<uint32_t>& dims,
              const std::vector<uint8_t>& values);

// `count` examples from `seed` into <dir>/<prefix>-images-idx3-ubyte.gz and -labels-idx1-ubyte.gz.
void WriteToySplit(const std::string& dir, const std::string& prefix, int count, uint32_t seed);

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_TOY_FASHION_DATA_H_
