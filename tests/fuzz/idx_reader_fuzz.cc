// The IDX reader (models/data/idx_reader.h, Fashion-MNIST's format, plain or gzip): images and
// labels from any bytes.
#include <cstring>

#include "models/data/idx_reader.h"
#include "tests/fuzz/fuzz_target.h"

namespace pstrain {

std::vector<std::string> FuzzSeeds() {
  // 2 images of 2x3 pixels; 3 labels.
  std::string images("\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x03", 16);
  images += std::string("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c", 12);
  std::string labels("\x00\x00\x08\x01\x00\x00\x00\x03\x07\x00\x09", 11);
  return {images, labels, images.substr(0, 20), labels + "x"};
}

}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = pstrain::WriteFuzzFile("in.idx", data, size);
  absl::StatusOr<pstrain::data::IdxImages> images = pstrain::data::ReadIdxImages(path);
  if (images.ok() &&
      images->pixels.size() != static_cast<size_t>(images->count * images->rows * images->cols)) {
    __builtin_trap();
  }
  (void)pstrain::data::ReadIdxLabels(path);
  return 0;
}
