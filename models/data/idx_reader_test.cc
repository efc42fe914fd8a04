#include "models/data/idx_reader.h"

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/test_util.h"

namespace pstrain {
namespace data {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

void AppendBigEndian32(uint32_t v, std::string* out) {
  out->push_back(static_cast<char>(v >> 24));
  out->push_back(static_cast<char>(v >> 16));
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v));
}

// The bytes of an IDX file: magic, dimensions, then `values`.
std::string Idx(uint32_t magic, const std::vector<uint32_t>& dims, const std::string& values) {
  std::string out;
  AppendBigEndian32(magic, &out);
  for (uint32_t d : dims) AppendBigEndian32(d, &out);
  return out + values;
}

std::string Bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

std::string WritePlain(const std::string& name, const std::string& contents) {
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  EXPECT_TRUE(out.good()) << path;
  return path;
}

std::string WriteGzip(const std::string& name, const std::string& contents) {
  const std::string path = TempPath(name);
  gzFile file = gzopen(path.c_str(), "wb");
  EXPECT_NE(file, nullptr) << path;
  if (file == nullptr) return path;
  EXPECT_EQ(gzwrite(file, contents.data(), static_cast<unsigned>(contents.size())),
            static_cast<int>(contents.size()));
  EXPECT_EQ(gzclose(file), Z_OK);
  return path;
}

std::string ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Two 2x3 images: pixel values 0..11.
const std::string& TwoImages() {
  static const std::string* idx =
      new std::string(Idx(0x00000803, {2, 2, 3}, Bytes({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 255})));
  return *idx;
}

TEST(ReadIdxImagesTest, ReadIdxImages_PlainFile_ReadsShapeAndPixels) {
  const std::string path = WritePlain("images.idx", TwoImages());
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->count, 2);
  EXPECT_EQ(images->rows, 2);
  EXPECT_EQ(images->cols, 3);
  EXPECT_THAT(images->pixels, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 255));
}

TEST(ReadIdxImagesTest, ReadIdxImages_Gzipped_ReadsShapeAndPixels) {
  const std::string path = WriteGzip("images.idx.gz", TwoImages());
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->count, 2);
  EXPECT_EQ(images->rows, 2);
  EXPECT_EQ(images->cols, 3);
  EXPECT_THAT(images->pixels, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 255));
}

TEST(ReadIdxImagesTest, ReadIdxImages_LargerThanOneChunk_ReadsAll) {
  // 1000 images of 130x130: 16.9 MB, more than one 16 MiB read.
  std::string pixels(1000 * 130 * 130, '\0');
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<char>(i * 7);
  const std::string path = WriteGzip("big.idx.gz", Idx(0x00000803, {1000, 130, 130}, pixels));
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_TRUE(images.ok()) << images.status();
  ASSERT_EQ(images->pixels.size(), pixels.size());
  EXPECT_TRUE(std::equal(pixels.begin(), pixels.end(), images->pixels.begin(),
                         [](char a, uint8_t b) { return static_cast<uint8_t>(a) == b; }));
}

TEST(ReadIdxLabelsTest, ReadIdxLabels_Gzipped_ReadsLabels) {
  const std::string path = WriteGzip("labels.idx.gz", Idx(0x00000801, {4}, Bytes({9, 0, 3, 9})));
  absl::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(path);
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_THAT(*labels, ElementsAre(9, 0, 3, 9));
}

TEST(ReadIdxErrorTest, ReadIdxImages_LabelsFile_BadMagicSaysWhatItIs) {
  const std::string path = WriteGzip("labels_as_images.gz", Idx(0x00000801, {1}, Bytes({1})));
  EXPECT_THAT(ReadIdxImages(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("bad magic 0x00000801, expected 0x00000803"),
                             HasSubstr("this is a labels file"))));
}

TEST(ReadIdxErrorTest, ReadIdxLabels_NotIdx_BadMagic) {
  const std::string path = WritePlain("text.txt", "hello, not an IDX file\n");
  EXPECT_THAT(ReadIdxLabels(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("bad magic 0x68656c6c, expected 0x00000801"))));
}

TEST(ReadIdxErrorTest, ReadIdxImages_TruncatedValues_DataLoss) {
  const std::string& full = TwoImages();
  const std::string path = WritePlain("truncated.idx", full.substr(0, full.size() - 5));
  EXPECT_THAT(ReadIdxImages(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(path), HasSubstr("truncated: 7 of 12 values"))));
}

TEST(ReadIdxErrorTest, ReadIdxImages_TruncatedHeader_DataLoss) {
  const std::string path = WritePlain("truncated_header.idx", TwoImages().substr(0, 10));
  EXPECT_THAT(ReadIdxImages(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(path), HasSubstr("truncated in the header: 10 of 16 bytes"))));
}

TEST(ReadIdxErrorTest, ReadIdxLabels_EmptyFile_DataLoss) {
  const std::string path = WritePlain("empty.idx", "");
  EXPECT_THAT(ReadIdxLabels(path),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr(path), HasSubstr("no IDX magic"))));
}

TEST(ReadIdxErrorTest, ReadIdxImages_TruncatedGzipStream_DataLoss) {
  std::string pixels(100 * 28 * 28, '\0');
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<char>((i * 31) ^ (i >> 3));
  const std::string whole = WriteGzip("whole.gz", Idx(0x00000803, {100, 28, 28}, pixels));
  const std::string compressed = ReadRaw(whole);
  const std::string path = WritePlain("cut.gz", compressed.substr(0, compressed.size() / 2));
  EXPECT_THAT(ReadIdxImages(path), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)));
}

TEST(ReadIdxErrorTest, ReadIdxImages_CorruptGzipStream_DataLoss) {
  std::string pixels(100 * 28 * 28, '\0');
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<char>((i * 31) ^ (i >> 3));
  const std::string whole = WriteGzip("whole2.gz", Idx(0x00000803, {100, 28, 28}, pixels));
  std::string compressed = ReadRaw(whole);
  for (size_t i = compressed.size() / 3; i < compressed.size() / 3 + 64; ++i) compressed[i] ^= 0x5a;
  const std::string path = WritePlain("corrupt.gz", compressed);
  EXPECT_THAT(ReadIdxImages(path), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)));
}

TEST(ReadIdxErrorTest, ReadIdxLabels_BytesAfterTheValues_InvalidArgument) {
  const std::string path = WriteGzip("trailing.gz", Idx(0x00000801, {2}, Bytes({1, 2, 3})));
  EXPECT_THAT(ReadIdxLabels(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("bytes after the last of the header's 2 values"))));
}

TEST(ReadIdxErrorTest, ReadIdxImages_ZeroDimension_InvalidArgument) {
  const std::string path = WritePlain("zero.idx", Idx(0x00000803, {5, 0, 28}, ""));
  EXPECT_THAT(ReadIdxImages(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                            AllOf(HasSubstr(path), HasSubstr("dimension 1 is 0"))));
}

TEST(ReadIdxErrorTest, ReadIdxImages_HugeDimensions_InvalidArgument) {
  const std::string path =
      WritePlain("huge.idx", Idx(0x00000803, {0xffffffff, 0xffffffff, 0xffffffff}, ""));
  EXPECT_THAT(ReadIdxImages(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("more than 2^40 values")));
}

TEST(ReadIdxErrorTest, ReadIdxImages_LargeHeaderLittleData_TruncatedWithoutHugeAllocation) {
  // The header promises 2^39 values (512 GiB); the reader must fail on the missing data.
  const std::string path = WritePlain("big_header.idx", Idx(0x00000803, {1u << 19, 1u << 10, 1u << 10},
                                                            std::string(100, 'x')));
  EXPECT_THAT(ReadIdxImages(path),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated: 100 of 549755813888")));
}

TEST(ReadIdxErrorTest, ReadIdxLabels_NoSuchFile_NotFound) {
  const std::string path = TempPath("no_such_labels.gz");
  EXPECT_THAT(ReadIdxLabels(path), StatusIs(absl::StatusCode::kNotFound, HasSubstr(path)));
}

}  // namespace
}  // namespace data
}  // namespace pstrain
