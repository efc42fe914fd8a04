// Reads IDX files (the MNIST / Fashion-MNIST format), gzipped or plain (zlib tells them apart).
//
//   ASSIGN_OR_RETURN(IdxImages train, ReadIdxImages("data/fashion_mnist/train-images-idx3-ubyte.gz"));
//   ASSIGN_OR_RETURN(std::vector<uint8_t> labels,
//                    ReadIdxLabels("data/fashion_mnist/train-labels-idx1-ubyte.gz"));
//
// The format: a big-endian 32-bit magic 0x000008NN (0x08 = unsigned bytes, NN = number of
// dimensions), NN big-endian 32-bit dimension sizes, then the values, row-major. Only unsigned-byte
// files are read: 0x00000803 images [count, rows, cols] and 0x00000801 labels [count].
//
// Stateless functions: safe to call from several threads at once.
#ifndef PSTRAIN_MODELS_DATA_IDX_READER_H_
#define PSTRAIN_MODELS_DATA_IDX_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {
namespace data {

// Images of an IDX file with magic 0x00000803.
struct IdxImages {
  int64_t count = 0;  // number of images
  int64_t rows = 0;   // pixels per image, vertically
  int64_t cols = 0;   // pixels per image, horizontally
  // count * rows * cols values, row-major: pixel (r, c) of image i is at (i * rows + r) * cols + c.
  std::vector<uint8_t> pixels;
};

// Errors (the message names the file):
//   kNotFound: no such file (other I/O failures: the errno's code, or kDataLoss).
//   kInvalidArgument: a magic other than 0x00000803 (0x00000801 for labels), a dimension of 0 or a
//     total size above 2^40 values, or bytes after the last value.
//   kDataLoss: the file ends before the last value (truncated), or its gzip stream is corrupt.
absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path);

// The labels of an IDX file with magic 0x00000801, one per item. Errors as for ReadIdxImages.
absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path);

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_MODELS_DATA_IDX_READER_H_
