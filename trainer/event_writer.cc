#include "trainer/event_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/utf8.h"

namespace pstrain {
namespace {

constexpr size_t kHeaderBytes = sizeof(uint64_t) + sizeof(uint32_t);
constexpr size_t kFooterBytes = sizeof(uint32_t);

void AppendLE(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t LoadLE(const char* p, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(p[i]);
  return value;
}

// Appends `data` framed as one TFRecord.
void AppendRecord(absl::string_view data, std::string* out) {
  const size_t start = out->size();
  AppendLE(data.size(), sizeof(uint64_t), out);
  AppendLE(crc32c::Mask(crc32c::Value(out->data() + start, sizeof(uint64_t))), sizeof(uint32_t),
           out);
  out->append(data.data(), data.size());
  AppendLE(crc32c::Mask(crc32c::Value(data)), sizeof(uint32_t), out);
}

std::string Hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// As TensorFlow stamps events: microseconds / 1e6 (correctly rounded; absl::ToDoubleSeconds can be an
// ulp off).
double ToUnixSecondsDouble(absl::Time t) {
  return static_cast<double>(absl::ToUnixMicros(t)) / 1e6;
}

// Creates `path` with O_EXCL. Returns the fd, or -1 with errno set.
int CreateExclusive(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

class EventWriterImpl : public EventWriter {
 public:
  EventWriterImpl(std::string path, int fd, EventWriterOptions options)
      : options_(std::move(options)), path_(std::move(path)), fd_(fd) {}

  ~EventWriterImpl() override {
    absl::Status status = Close();
    if (!status.ok()) LOG(ERROR) << "Closing event file: " << status;
  }

  const std::string& path() const override { return path_; }

  absl::Status WriteScalar(absl::string_view tag, int64_t step, float value) override {
    if (!IsValidUtf8(tag)) {
      return absl::InvalidArgumentError(absl::StrCat("event tag \"", absl::CHexEscape(tag),
                                                     "\" is not valid UTF-8"));
    }
    tensorflow::Event event;
    event.set_wall_time(ToUnixSecondsDouble(options_.clock()));
    event.set_step(step);
    tensorflow::Summary::Value* summary_value = event.mutable_summary()->add_value();
    summary_value->set_tag(std::string(tag));
    summary_value->set_simple_value(value);
    return WriteEvent(event);
  }

  absl::Status WriteEvent(const tensorflow::Event& event) override {
    const std::string data = event.SerializeAsString();
    absl::MutexLock lock(&mu_);
    if (fd_ < 0) return ClosedError();
    AppendRecord(data, &buffer_);
    if (buffer_.size() >= options_.buffer_bytes) return FlushLocked();
    return absl::OkStatus();
  }

  absl::Status Flush() override {
    absl::MutexLock lock(&mu_);
    if (fd_ < 0) return ClosedError();
    return FlushLocked();
  }

  absl::Status Close() override {
    absl::MutexLock lock(&mu_);
    if (fd_ < 0) return absl::OkStatus();
    absl::Status status = FlushLocked();
    if (::close(fd_) != 0 && status.ok()) {
      status = absl::ErrnoToStatus(errno, absl::StrCat("closing event file ", path_));
    }
    fd_ = -1;
    buffer_.clear();
    return status;
  }

 private:
  absl::Status ClosedError() const {
    return absl::FailedPreconditionError(absl::StrCat("event file ", path_, " is closed"));
  }

  absl::Status FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    size_t done = 0;
    while (done < buffer_.size()) {
      const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        const int error = errno;
        // Keep what was not written, so a later Flush can retry it.
        buffer_.erase(0, done);
        return absl::ErrnoToStatus(error, absl::StrCat("writing event file ", path_));
      }
      done += static_cast<size_t>(n);
    }
    buffer_.clear();
    return absl::OkStatus();
  }

  const EventWriterOptions options_;
  const std::string path_;

  absl::Mutex mu_;
  // Below: guarded by mu_.
  int fd_ ABSL_GUARDED_BY(mu_);  // -1 once closed
  std::string buffer_ ABSL_GUARDED_BY(mu_);  // framed records not yet written
};

}  // namespace

absl::StatusOr<std::unique_ptr<EventWriter>> EventWriter::Create(const std::string& logdir,
                                                                 EventWriterOptions options) {
  if (!options.clock) options.clock = [] { return absl::Now(); };
  if (options.hostname.empty()) options.hostname = Hostname();

  std::error_code ec;
  std::filesystem::create_directories(logdir, ec);
  if (ec) {
    return absl::ErrnoToStatus(ec.value(),
                               absl::StrCat("creating event file directory ", logdir));
  }

  const absl::Time now = options.clock();
  const std::string base =
      absl::StrFormat("%s/events.out.tfevents.%010d.%s%s", logdir, absl::ToUnixSeconds(now),
                      options.hostname, options.filename_suffix);
  std::string path = base;
  int fd = CreateExclusive(path);
  for (int attempt = 1; fd < 0 && errno == EEXIST && attempt < 1000; ++attempt) {
    path = absl::StrCat(base, ".", attempt);
    fd = CreateExclusive(path);
  }
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("creating event file ", path));

  auto writer = std::make_unique<EventWriterImpl>(std::move(path), fd, std::move(options));
  tensorflow::Event version;
  version.set_wall_time(ToUnixSecondsDouble(now));
  version.set_file_version(kEventFileVersion);
  RETURN_IF_ERROR(writer->WriteEvent(version));
  RETURN_IF_ERROR(writer->Flush());
  return writer;
}

absl::StatusOr<std::vector<tensorflow::Event>> ReadEventFile(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("opening event file ", path));
  std::string contents;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      return absl::ErrnoToStatus(error, absl::StrCat("reading event file ", path));
    }
    if (n == 0) break;
    contents.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);

  std::vector<tensorflow::Event> events;
  size_t offset = 0;
  while (offset < contents.size()) {
    auto corrupt = [&](absl::string_view what) {
      return absl::DataLossError(
          absl::StrCat("event file ", path, ": ", what, " in the record at offset ", offset));
    };
    const char* record = contents.data() + offset;
    const size_t left = contents.size() - offset;
    if (left < kHeaderBytes) return corrupt("truncated header");
    const uint64_t length = LoadLE(record, sizeof(uint64_t));
    const uint32_t length_crc = static_cast<uint32_t>(LoadLE(record + sizeof(uint64_t), 4));
    if (crc32c::Unmask(length_crc) != crc32c::Value(record, sizeof(uint64_t))) {
      return corrupt("length CRC mismatch");
    }
    if (length > left - kHeaderBytes || left - kHeaderBytes - length < kFooterBytes) {
      return corrupt(absl::StrCat("truncated data (length ", length, ", ", left - kHeaderBytes,
                                  " bytes left)"));
    }
    const char* data = record + kHeaderBytes;
    const uint32_t data_crc = static_cast<uint32_t>(LoadLE(data + length, 4));
    if (crc32c::Unmask(data_crc) != crc32c::Value(data, length)) {
      return corrupt("data CRC mismatch");
    }
    tensorflow::Event event;
    if (!event.ParseFromArray(data, static_cast<int>(length))) {
      return corrupt("data that is not an Event proto");
    }
    events.push_back(std::move(event));
    offset += kHeaderBytes + length + kFooterBytes;
  }
  return events;
}

}  // namespace pstrain
