// An image-classification data set in the MNIST file layout (Fashion-MNIST's four IDX files), as the
// image models read it: the training and test splits, a seeded validation split held out of the
// training examples, and batches as float pixels.
//
//   ASSIGN_OR_RETURN(ImageSplit train, ReadImageSplit(dir, kTrainImagesFile, kTrainLabelsFile));
//   ImageSplit validation;
//   SplitOffValidation(seed, 0.1, &train, &validation);
//   GatherImages(train, rows, &x, &labels);   // x: rows.size() x pixels floats in [0, 1]
//
// Stateless functions; an ImageSplit is a plain value (safe to read from several threads).
#ifndef PSTRAIN_MODELS_DATA_IMAGE_SPLITS_H_
#define PSTRAIN_MODELS_DATA_IMAGE_SPLITS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/data/idx_reader.h"

namespace pstrain {
namespace data {

// The files of a data directory (gzipped or plain: the reader tells them apart).
inline constexpr char kTrainImagesFile[] = "train-images-idx3-ubyte.gz";
inline constexpr char kTrainLabelsFile[] = "train-labels-idx1-ubyte.gz";
inline constexpr char kTestImagesFile[] = "t10k-images-idx3-ubyte.gz";
inline constexpr char kTestLabelsFile[] = "t10k-labels-idx1-ubyte.gz";

// `dir`/`name` ("name" alone for an empty dir).
std::string DataFile(const std::string& dir, const char* name);

// One split: images (one byte per pixel, one channel) and their labels.
struct ImageSplit {
  IdxImages images;
  std::vector<int32_t> labels;
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t pixels() const { return images.rows * images.cols; }
};

// An IDX label file's labels. Errors: ReadIdxLabels'.
absl::StatusOr<std::vector<int32_t>> ReadImageLabels(const std::string& path);

// The images and labels of `dir`'s two files. Errors: the reader's (naming the file), and
// kInvalidArgument when the files hold different numbers of examples.
absl::StatusOr<ImageSplit> ReadImageSplit(const std::string& dir, const char* images_file,
                                          const char* labels_file);

// Whether training example `row` is held out for validation: a hash of (seed, row) below
// `fraction`, so any process picks the same examples without reading the others.
bool IsValidationExample(uint64_t seed, int64_t row, double fraction);

// Moves the examples of `all` that IsValidationExample picks into `validation` (replacing what it
// held), keeping their order.
void SplitOffValidation(uint64_t seed, double fraction, ImageSplit* all, ImageSplit* validation);

// Examples `rows` of `split` (each in [0, split.size())) as floats in [0, 1], row-major
// [rows.size(), pixels] (pixel / 255), and their labels.
void GatherImages(const ImageSplit& split, absl::Span<const int64_t> rows, std::vector<float>* x,
                  std::vector<int32_t>* labels);

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_MODELS_DATA_IMAGE_SPLITS_H_
