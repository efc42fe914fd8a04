#include "models/data/csv_records.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace data {
namespace {

constexpr size_t kInitialBufferSize = size_t{1} << 20;  // grows for longer records
constexpr size_t kGzipInputSize = size_t{1} << 18;
constexpr int64_t kTailBytes = int64_t{16} << 10;  // a range's reads past its end

}  // namespace

struct CsvRecordReader::Gzip {
  z_stream zs{};
  std::unique_ptr<unsigned char[]> in{new unsigned char[kGzipInputSize]};
  bool initialized = false;
  bool member_ended = false;  // the last inflate() finished a member (a clean end of file here)
  ~Gzip() {
    if (initialized) inflateEnd(&zs);
  }
};

CsvRecordReader::CsvRecordReader(std::string path, const CsvRecordOptions& options)
    : path_(std::move(path)), options_(options) {}

CsvRecordReader::~CsvRecordReader() {
  if (fd_ >= 0) close(fd_);
}

std::string CsvRecordReader::Where() const { return absl::StrCat(path_, ":", line_); }

absl::StatusOr<std::unique_ptr<CsvRecordReader>> CsvRecordReader::Open(
    const std::string& path, const CsvRecordOptions& options) {
  if (options.begin < 0 || (options.end >= 0 && options.end < options.begin) ||
      options.first_line < 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad range [", options.begin, ", ",
                                                   options.end, ") from line ",
                                                   options.first_line));
  }
  std::unique_ptr<CsvRecordReader> r(new CsvRecordReader(path, options));
  RETURN_IF_ERROR(r->Start());
  return r;
}

absl::Status CsvRecordReader::Start() {
  fd_ = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path_));
  struct stat st;
  if (fstat(fd_, &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path_, " is a directory, not a CSV file"));
  }
  posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);  // advisory only
  unsigned char magic[2] = {0, 0};
  const ssize_t got = pread(fd_, magic, 2, 0);
  if (got < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path_));
  capacity_ = kInitialBufferSize;
  if (options_.end >= 0) {
    // A small range needs no more than itself and its last record's tail.
    capacity_ = static_cast<size_t>(std::clamp<int64_t>(options_.end - options_.begin + kTailBytes,
                                                        int64_t{64} << 10,
                                                        static_cast<int64_t>(kInitialBufferSize)));
  }
  buffer_ = std::make_unique<char[]>(capacity_);
  next_line_ = options_.first_line;
  if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    gzip_ = std::make_unique<Gzip>();
    if (inflateInit2(&gzip_->zs, 15 + 16) != Z_OK) {
      return absl::InternalError(absl::StrCat(path_, ": cannot start zlib"));
    }
    gzip_->initialized = true;
    // No seeking into a compressed stream: decompress up to `begin` and drop it.
    while (options_.begin > base_) {
      ASSIGN_OR_RETURN(int64_t n, ReadFile(buffer_.get(), static_cast<int64_t>(capacity_)));
      if (n == 0) {
        eof_ = true;
        break;
      }
      if (base_ + n > options_.begin) {
        end_ = static_cast<size_t>(n);
        pos_ = static_cast<size_t>(options_.begin - base_);
        break;
      }
      base_ += n;
    }
    return absl::OkStatus();
  }
  if (options_.begin > 0 && lseek(fd_, options_.begin, SEEK_SET) < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot seek in ", path_));
  }
  base_ = options_.begin;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CsvRecordReader::ReadFile(char* out, int64_t max) {
  if (gzip_ == nullptr) {
    while (true) {
      const ssize_t n = read(fd_, out, static_cast<size_t>(max));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path_));
      file_bytes_ += n;
      return static_cast<int64_t>(n);
    }
  }
  z_stream& zs = gzip_->zs;
  zs.next_out = reinterpret_cast<unsigned char*>(out);
  zs.avail_out = static_cast<uInt>(std::min<int64_t>(max, 1 << 30));
  while (zs.avail_out > 0) {
    if (zs.avail_in == 0) {
      ssize_t n;
      do {
        n = read(fd_, gzip_->in.get(), kGzipInputSize);
      } while (n < 0 && errno == EINTR);
      if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path_));
      if (n == 0) {
        if (!gzip_->member_ended) {
          return absl::DataLossError(absl::StrCat(path_, ": truncated gzip data"));
        }
        break;
      }
      file_bytes_ += n;
      zs.next_in = gzip_->in.get();
      zs.avail_in = static_cast<uInt>(n);
    }
    if (gzip_->member_ended) {
      // Another member follows (gzip files may be concatenated).
      if (inflateReset(&zs) != Z_OK) {
        return absl::InternalError(absl::StrCat(path_, ": cannot restart zlib"));
      }
      gzip_->member_ended = false;
    }
    const int rc = inflate(&zs, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      gzip_->member_ended = true;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return absl::DataLossError(absl::StrCat(path_, ": bad gzip data (",
                                              zs.msg != nullptr ? zs.msg : "zlib error", ")"));
    }
    if (zs.avail_out < static_cast<uInt>(std::min<int64_t>(max, 1 << 30))) break;  // some output
  }
  return static_cast<int64_t>(reinterpret_cast<char*>(zs.next_out) - out);
}

absl::StatusOr<bool> CsvRecordReader::Fill() {
  if (eof_) return false;
  if (pos_ > 0) {
    std::memmove(buffer_.get(), buffer_.get() + pos_, end_ - pos_);
    base_ += static_cast<int64_t>(pos_);
    end_ -= pos_;
    pos_ = 0;
  }
  if (end_ == capacity_) {
    auto bigger = std::make_unique<char[]>(capacity_ * 2);
    std::memcpy(bigger.get(), buffer_.get(), end_);
    buffer_ = std::move(bigger);
    capacity_ *= 2;
  }
  int64_t want = static_cast<int64_t>(capacity_ - end_);
  if (options_.end >= 0 && gzip_ == nullptr) {
    // A range: read up to its end, then only what its last record may still need.
    want = std::min(want, std::max(kTailBytes, options_.end - (base_ + static_cast<int64_t>(end_))));
  }
  ASSIGN_OR_RETURN(int64_t n, ReadFile(buffer_.get() + end_, want));
  if (n == 0) {
    eof_ = true;
    return false;
  }
  end_ += static_cast<size_t>(n);
  return true;
}

void CsvRecordReader::SplitPlain(const char* begin, const char* end) {
  fields_.clear();
  const char d = options_.delimiter;
  const char* p = begin;
  while (true) {
    const char* next = static_cast<const char*>(std::memchr(p, d, end - p));
    if (next == nullptr) {
      fields_.emplace_back(p, end - p);
      return;
    }
    fields_.emplace_back(p, next - p);
    p = next + 1;
  }
}

absl::StatusOr<bool> CsvRecordReader::ParseQuoted() {
  const char* const buf = buffer_.get();
  const char d = options_.delimiter;
  unquoted_.clear();
  std::vector<std::pair<size_t, size_t>> spans;  // into unquoted_
  size_t p = pos_;
  int64_t newlines = 0;  // inside quoted fields
  bool ended_by_newline = false;
  auto error = [&](size_t field, absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ":", next_line_, ": field ", field, ": ", what));
  };
  while (true) {
    const size_t start = unquoted_.size();
    if (p < end_ && buf[p] == '"') {
      ++p;
      while (true) {
        const char* q = static_cast<const char*>(std::memchr(buf + p, '"', end_ - p));
        if (q == nullptr) {
          if (!eof_) return false;
          return error(spans.size() + 1, "a quoted field is not closed before the end of the file");
        }
        const size_t at = static_cast<size_t>(q - buf);
        newlines += std::count(buf + p, q, '\n');
        unquoted_.append(buf + p, at - p);
        if (at + 1 >= end_ && !eof_) return false;
        if (at + 1 < end_ && buf[at + 1] == '"') {
          unquoted_.push_back('"');
          p = at + 2;
          continue;
        }
        p = at + 1;
        break;
      }
      spans.emplace_back(start, unquoted_.size() - start);
      if (p >= end_) {
        if (!eof_) return false;
        break;
      }
      if (buf[p] == d) {
        ++p;
        continue;
      }
      if (buf[p] == '\n') {
        ++p;
        ended_by_newline = true;
        break;
      }
      if (buf[p] == '\r') {
        if (p + 1 >= end_ && !eof_) return false;
        if (p + 1 < end_ && buf[p + 1] == '\n') {
          p += 2;
          ended_by_newline = true;
          break;
        }
      }
      size_t shown = p;
      while (shown < end_ && shown - p < 10 && buf[shown] != '\n' && buf[shown] != '\r') ++shown;
      return error(spans.size(), absl::StrCat("text after a closing quote ('",
                                              absl::string_view(buf + p, shown - p),
                                              "'): quote the whole field"));
    }
    // Unquoted: up to the delimiter or the line end ('"' is an ordinary character here).
    size_t q = p;
    while (q < end_ && buf[q] != d && buf[q] != '\n') ++q;
    if (q >= end_ && !eof_) return false;
    size_t field_end = q;
    if (q < end_ && buf[q] == '\n' && field_end > p && buf[field_end - 1] == '\r') --field_end;
    if (q >= end_ && field_end > p && buf[field_end - 1] == '\r') --field_end;
    unquoted_.append(buf + p, field_end - p);
    spans.emplace_back(start, unquoted_.size() - start);
    if (q >= end_) {
      p = q;
      break;
    }
    p = q + 1;
    if (buf[q] == '\n') {
      ended_by_newline = true;
      break;
    }
  }
  offset_ = base_ + static_cast<int64_t>(pos_);
  line_ = next_line_;
  next_line_ += newlines + (ended_by_newline ? 1 : 0);
  pos_ = p;
  fields_.clear();
  for (const auto& [at, size] : spans) fields_.emplace_back(unquoted_.data() + at, size);
  return true;
}

absl::StatusOr<bool> CsvRecordReader::Next() {
  if (done_) return false;
  auto finish = [&](absl::Status s) -> absl::StatusOr<bool> {
    done_ = true;
    fields_.clear();
    if (!s.ok()) return s;
    return false;
  };
  while (true) {
    if (!bom_checked_ && base_ + static_cast<int64_t>(pos_) == 0 && end_ - pos_ < 3 && !eof_) {
      absl::StatusOr<bool> more = Fill();
      if (!more.ok()) return finish(more.status());
      continue;
    }
    if (!bom_checked_) {
      bom_checked_ = true;
      if (base_ + static_cast<int64_t>(pos_) == 0 && end_ - pos_ >= 3 &&
          std::memcmp(buffer_.get() + pos_, "\xEF\xBB\xBF", 3) == 0) {
        pos_ += 3;  // a UTF-8 byte order mark: not part of the first field
      }
    }
    // Blank lines.
    if (pos_ == end_) {
      absl::StatusOr<bool> more = Fill();
      if (!more.ok()) return finish(more.status());
      if (!*more) return finish(absl::OkStatus());
      continue;
    }
    if (options_.end >= 0 && base_ + static_cast<int64_t>(pos_) >= options_.end) {
      return finish(absl::OkStatus());
    }
    const char* const buf = buffer_.get();
    if (buf[pos_] == '\n') {
      ++pos_;
      ++next_line_;
      continue;
    }
    if (buf[pos_] == '\r') {
      if (pos_ + 1 == end_ && !eof_) {
        absl::StatusOr<bool> more = Fill();
        if (!more.ok()) return finish(more.status());
        continue;
      }
      if (pos_ + 1 == end_ || buf[pos_ + 1] == '\n') {
        pos_ += pos_ + 1 == end_ ? 1 : 2;
        ++next_line_;
        continue;
      }
    }
    const char* begin = buf + pos_;
    const char* newline = static_cast<const char*>(std::memchr(begin, '\n', end_ - pos_));
    if (newline == nullptr && !eof_) {
      absl::StatusOr<bool> more = Fill();
      if (!more.ok()) return finish(more.status());
      continue;
    }
    const char* line_end = newline != nullptr ? newline : buf + end_;
    if (std::memchr(begin, '"', line_end - begin) == nullptr) {
      const char* e = line_end;
      if (e > begin && e[-1] == '\r') --e;
      SplitPlain(begin, e);
      offset_ = base_ + static_cast<int64_t>(pos_);
      line_ = next_line_;
      if (newline != nullptr) {
        pos_ = static_cast<size_t>(newline - buf) + 1;
        ++next_line_;
      } else {
        pos_ = end_;
      }
      return true;
    }
    absl::StatusOr<bool> parsed = ParseQuoted();
    if (!parsed.ok()) return finish(parsed.status());
    if (*parsed) return true;
    absl::StatusOr<bool> more = Fill();  // the record continues past the buffer
    if (!more.ok()) return finish(more.status());
  }
}

absl::StatusOr<std::vector<std::string>> ReadCsvHeaderRecord(const std::string& path,
                                                             char delimiter) {
  CsvRecordOptions options;
  options.delimiter = delimiter;
  ASSIGN_OR_RETURN(std::unique_ptr<CsvRecordReader> reader, CsvRecordReader::Open(path, options));
  ASSIGN_OR_RETURN(bool any, reader->Next());
  if (!any) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file, expected a header line"));
  }
  std::vector<std::string> names;
  for (absl::string_view f : reader->fields()) names.emplace_back(f);
  return names;
}

}  // namespace data
}  // namespace pstrain
