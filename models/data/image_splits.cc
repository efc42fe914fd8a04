#include "models/data/image_splits.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace data {
namespace {

// A uniform double in [0, 1) from (seed, row): splitmix64's finalizer. Both image models split
// with it (fashion_mnist_worker.cc), so they hold out the same examples for a seed.
double HashUnit(uint64_t seed, uint64_t row) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + row + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}
constexpr uint64_t kValidationSalt = 0x7A11DA7E00000000ull;

}  // namespace

std::string DataFile(const std::string& dir, const char* name) {
  return dir.empty() ? name : absl::StrCat(dir, "/", name);
}

absl::StatusOr<std::vector<int32_t>> ReadImageLabels(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadIdxLabels(path));
  return std::vector<int32_t>(bytes.begin(), bytes.end());
}

absl::StatusOr<ImageSplit> ReadImageSplit(const std::string& dir, const char* images_file,
                                          const char* labels_file) {
  ImageSplit split;
  ASSIGN_OR_RETURN(split.images, ReadIdxImages(DataFile(dir, images_file)));
  ASSIGN_OR_RETURN(split.labels, ReadImageLabels(DataFile(dir, labels_file)));
  if (split.images.count != split.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        DataFile(dir, images_file), " has ", split.images.count, " images but ",
        DataFile(dir, labels_file), " has ", split.size(), " labels"));
  }
  return split;
}

bool IsValidationExample(uint64_t seed, int64_t row, double fraction) {
  return HashUnit(seed ^ kValidationSalt, static_cast<uint64_t>(row)) < fraction;
}

void SplitOffValidation(uint64_t seed, double fraction, ImageSplit* all,
                        ImageSplit* validation) {
  const int64_t pixels = all->pixels();
  ImageSplit train;
  *validation = ImageSplit{};
  train.images.rows = validation->images.rows = all->images.rows;
  train.images.cols = validation->images.cols = all->images.cols;
  for (int64_t r = 0; r < all->size(); ++r) {
    ImageSplit& to = IsValidationExample(seed, r, fraction) ? *validation : train;
    const uint8_t* in = all->images.pixels.data() + r * pixels;
    to.images.pixels.insert(to.images.pixels.end(), in, in + pixels);
    to.labels.push_back(all->labels[r]);
  }
  train.images.count = train.size();
  validation->images.count = validation->size();
  *all = std::move(train);
}

void GatherImages(const ImageSplit& split, absl::Span<const int64_t> rows, std::vector<float>* x,
                  std::vector<int32_t>* labels) {
  const int64_t pixels = split.pixels();
  x->resize(rows.size() * pixels);
  labels->resize(rows.size());
  constexpr float kScale = 1.0f / 255.0f;
  for (size_t k = 0; k < rows.size(); ++k) {
    const uint8_t* in = split.images.pixels.data() + rows[k] * pixels;
    float* out = x->data() + k * pixels;
    for (int64_t p = 0; p < pixels; ++p) out[p] = static_cast<float>(in[p]) * kScale;
    (*labels)[k] = split.labels[rows[k]];
  }
}

}  // namespace data
}  // namespace pstrain
