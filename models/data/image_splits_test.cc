#include "models/data/image_splits.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/data/idx_test_util.h"

namespace pstrain {
namespace data {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// `count` 2x3 images whose pixels are all the example's index, labels index % 10.
std::string WriteSplit(const std::string& name, uint32_t count, uint32_t label_count) {
  const std::string dir = FreshTempDir(name);
  std::vector<uint8_t> pixels, labels;
  for (uint32_t i = 0; i < count; ++i) pixels.insert(pixels.end(), 6, static_cast<uint8_t>(i));
  for (uint32_t i = 0; i < label_count; ++i) labels.push_back(static_cast<uint8_t>(i % 10));
  WriteIdx(DataFile(dir, kTrainImagesFile), 0x803, {count, 2, 3}, pixels);
  WriteIdx(DataFile(dir, kTrainLabelsFile), 0x801, {label_count}, labels);
  return dir;
}

TEST(ImageSplitsTest, ReadImageSplit_ImagesAndLabels) {
  const std::string dir = WriteSplit("read", /*count=*/12, /*label_count=*/12);
  absl::StatusOr<ImageSplit> split = ReadImageSplit(dir, kTrainImagesFile, kTrainLabelsFile);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->size(), 12);
  EXPECT_EQ(split->pixels(), 6);
  EXPECT_EQ(split->labels[11], 1);
  EXPECT_EQ(split->images.pixels[6 * 11], 11);
}

TEST(ImageSplitsTest, ReadImageSplit_CountsDiffer_InvalidArgumentNamingBothFiles) {
  const std::string dir = WriteSplit("mismatch", /*count=*/12, /*label_count=*/11);
  EXPECT_THAT(ReadImageSplit(dir, kTrainImagesFile, kTrainLabelsFile),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("has 12 images"), HasSubstr("has 11 labels"),
                             HasSubstr(kTrainLabelsFile))));
}

TEST(ImageSplitsTest, ReadImageSplit_NoFile_NotFoundNamingIt) {
  const std::string dir = FreshTempDir("empty");
  EXPECT_THAT(ReadImageSplit(dir, kTestImagesFile, kTestLabelsFile),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(kTestImagesFile)));
}

TEST(ImageSplitsTest, SplitOffValidation_SeededDisjointInOrder) {
  const std::string dir = WriteSplit("split", /*count=*/200, /*label_count=*/200);
  absl::StatusOr<ImageSplit> all = ReadImageSplit(dir, kTrainImagesFile, kTrainLabelsFile);
  ASSERT_TRUE(all.ok()) << all.status();
  ImageSplit train = *all, validation;
  SplitOffValidation(/*seed=*/3, /*fraction=*/0.25, &train, &validation);
  EXPECT_EQ(train.size() + validation.size(), 200);
  EXPECT_GT(validation.size(), 25);  // about 50
  EXPECT_LT(validation.size(), 80);
  EXPECT_EQ(train.images.count, train.size());
  EXPECT_EQ(validation.images.count, validation.size());
  // Each example (its pixel value is its index) went where IsValidationExample says, in order.
  std::vector<int64_t> want_train, want_validation, got_train, got_validation;
  for (int64_t r = 0; r < 200; ++r) {
    (IsValidationExample(3, r, 0.25) ? want_validation : want_train).push_back(r);
  }
  for (int64_t i = 0; i < train.size(); ++i) got_train.push_back(train.images.pixels[i * 6]);
  for (int64_t i = 0; i < validation.size(); ++i) {
    got_validation.push_back(validation.images.pixels[i * 6]);
    EXPECT_EQ(validation.labels[i], got_validation.back() % 10);
  }
  EXPECT_EQ(got_train, want_train);
  EXPECT_EQ(got_validation, want_validation);
  // Another seed holds out other examples; fraction 0 none.
  ImageSplit other = *all, other_validation;
  SplitOffValidation(/*seed=*/4, 0.25, &other, &other_validation);
  EXPECT_NE(other_validation.labels, validation.labels);
  ImageSplit none = *all, none_validation;
  SplitOffValidation(/*seed=*/3, 0.0, &none, &none_validation);
  EXPECT_EQ(none.size(), 200);
  EXPECT_EQ(none_validation.size(), 0);
}

TEST(ImageSplitsTest, GatherImages_ScalesToUnitAndPicksRows) {
  const std::string dir = WriteSplit("gather", /*count=*/12, /*label_count=*/12);
  absl::StatusOr<ImageSplit> split = ReadImageSplit(dir, kTrainImagesFile, kTrainLabelsFile);
  ASSERT_TRUE(split.ok()) << split.status();
  split->images.pixels[6 * 3 + 5] = 255;
  std::vector<float> x;
  std::vector<int32_t> labels;
  GatherImages(*split, {3, 0}, &x, &labels);
  EXPECT_THAT(labels, ElementsAre(3, 0));
  ASSERT_EQ(x.size(), 12u);
  EXPECT_FLOAT_EQ(x[0], 3.0f / 255.0f);
  EXPECT_FLOAT_EQ(x[5], 1.0f);
  EXPECT_FLOAT_EQ(x[6], 0.0f);
}

}  // namespace
}  // namespace data
}  // namespace pstrain
