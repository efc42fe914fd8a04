#include "models/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace pstrain {
namespace data {
namespace {

constexpr uint32_t kLabelsMagic = 0x00000801;
constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint64_t kMaxValues = uint64_t{1} << 40;
// Bytes read per gzread call (its length is an unsigned int), and how much the output grows at a
// time: a corrupt header asking for terabytes fails on the data it lacks, not on allocation.
constexpr size_t kChunk = size_t{1} << 24;

// A gzFile that closes itself. gzopen reads plain files as they are.
class GzFile {
 public:
  explicit GzFile(std::string path) : path_(std::move(path)) {}
  ~GzFile() {
    if (file_ != nullptr) gzclose(file_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  absl::Status Open() {
    errno = 0;
    file_ = gzopen(path_.c_str(), "rb");
    if (file_ == nullptr) {
      // errno is 0 when zlib itself failed (out of memory).
      if (errno != 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path_));
      return absl::ResourceExhaustedError(absl::StrCat("cannot open ", path_, ": zlib failed"));
    }
    gzbuffer(file_, 1 << 17);
    return absl::OkStatus();
  }

  // Reads up to `n` bytes into `out`; returns how many it read (fewer only at the end of the data).
  absl::StatusOr<size_t> Read(uint8_t* out, size_t n) {
    size_t done = 0;
    while (done < n) {
      const unsigned want = static_cast<unsigned>(std::min(n - done, kChunk));
      const int got = gzread(file_, out + done, want);
      if (got < 0) {
        int zerr = Z_OK;
        const char* message = gzerror(file_, &zerr);
        if (zerr == Z_ERRNO) {
          return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path_));
        }
        return absl::DataLossError(
            absl::StrCat(path_, ": corrupt gzip data after ", done, " bytes: ", message));
      }
      if (got == 0) break;
      done += got;
    }
    // gzread stops quietly at a gzip stream cut short; gzerror says so.
    int zerr = Z_OK;
    const char* message = gzerror(file_, &zerr);
    if (zerr != Z_OK && zerr != Z_STREAM_END) {
      return absl::DataLossError(absl::StrCat(path_, ": ", message));
    }
    return done;
  }

  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  gzFile file_ = nullptr;
};

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct IdxData {
  std::vector<uint64_t> dims;
  std::vector<uint8_t> values;
};

// Reads an unsigned-byte IDX file whose magic must be `magic`.
absl::StatusOr<IdxData> ReadIdx(const std::string& path, uint32_t magic, const char* what) {
  GzFile file(path);
  RETURN_IF_ERROR(file.Open());
  const size_t num_dims = magic & 0xff;
  uint8_t header[4 + 4 * 4];
  const size_t header_size = 4 + 4 * num_dims;
  ASSIGN_OR_RETURN(size_t got, file.Read(header, 4));
  if (got < 4) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: ", got, " bytes, no IDX magic"));
  }
  const uint32_t found = BigEndian32(header);
  if (found != magic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: bad magic 0x%08x, expected 0x%08x (IDX %s)%s", path, found, magic, what,
        found == kImagesMagic || found == kLabelsMagic
            ? (found == kImagesMagic ? ": this is an images file" : ": this is a labels file")
            : ""));
  }
  ASSIGN_OR_RETURN(got, file.Read(header + 4, header_size - 4));
  if (got < header_size - 4) {
    return absl::DataLossError(absl::StrCat(path, ": truncated in the header: ", 4 + got, " of ",
                                            header_size, " bytes"));
  }
  IdxData data;
  uint64_t total = 1;
  for (size_t i = 0; i < num_dims; ++i) {
    data.dims.push_back(BigEndian32(header + 4 + 4 * i));
    if (data.dims.back() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": dimension ", i, " is 0"));
    }
    if (data.dims.back() > kMaxValues / total) {  // total * dim > kMaxValues, without overflow
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": more than 2^40 values in the header's dimensions"));
    }
    total *= data.dims.back();
  }
  // Grow as data arrives, so a bad header fails on missing data rather than on a huge allocation.
  while (data.values.size() < total) {
    const size_t before = data.values.size();
    const size_t want = std::min<uint64_t>(total - before, kChunk);
    data.values.resize(before + want);
    ASSIGN_OR_RETURN(got, file.Read(data.values.data() + before, want));
    if (got < want) {
      return absl::DataLossError(absl::StrCat(path, ": truncated: ", before + got, " of ", total,
                                              " values after the header"));
    }
  }
  uint8_t extra;
  ASSIGN_OR_RETURN(got, file.Read(&extra, 1));
  if (got != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": bytes after the last of the header's ", total, " values"));
  }
  return data;
}

}  // namespace

absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path) {
  ASSIGN_OR_RETURN(IdxData data, ReadIdx(path, kImagesMagic, "images"));
  IdxImages images;
  images.count = static_cast<int64_t>(data.dims[0]);
  images.rows = static_cast<int64_t>(data.dims[1]);
  images.cols = static_cast<int64_t>(data.dims[2]);
  images.pixels = std::move(data.values);
  return images;
}

absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path) {
  ASSIGN_OR_RETURN(IdxData data, ReadIdx(path, kLabelsMagic, "labels"));
  return std::move(data.values);
}

}  // namespace data
}  // namespace pstrain
