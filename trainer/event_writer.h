// TensorBoard event files: scalars written as TensorFlow's Event protos in TFRecord framing, so
// `tensorboard --logdir=<logdir>` plots them. Each record is
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | data |
//   uint32 masked CRC-32C of data
// (see common/crc32c.h for the mask), and the first record of a file is an Event whose
// file_version is "brain.Event:2". ReadEventFile reads such a file back, checking every CRC.
#ifndef PSTRAIN_TRAINER_EVENT_WRITER_H_
#define PSTRAIN_TRAINER_EVENT_WRITER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/tensorboard_event.pb.h"

namespace pstrain {

inline constexpr char kEventFileVersion[] = "brain.Event:2";

struct EventWriterOptions {
  // Wall time for each event's wall_time and for the file name. Default (empty): absl::Now.
  std::function<absl::Time()> clock;
  // The host name in the file name. Default (empty): gethostname().
  std::string hostname;
  // Appended to the file name, e.g. ".worker0". Default: "".
  std::string filename_suffix;
  // Records are buffered in memory and written out when this many bytes are pending (and on
  // Flush/Close). Default 64 KiB.
  size_t buffer_bytes = 64 << 10;
};

// Appends events to one new file `<logdir>/events.out.tfevents.<unix seconds>.<hostname><suffix>`.
// Records reach the file on Flush(), Close(), destruction, or when the buffer fills. Thread-safe.
class EventWriter {
 public:
  // Creates `logdir` (and its parents) if needed and a new event file in it, then writes the
  // file_version record. If a file of that name exists (two writers in the same second), ".1",
  // ".2", ... is appended rather than overwriting it.
  // Errors (each names the path): as the failing system call (absl::ErrnoToStatus), e.g.
  // kPermissionDenied, kFailedPrecondition if a part of `logdir` is a file.
  static absl::StatusOr<std::unique_ptr<EventWriter>> Create(const std::string& logdir,
                                                             EventWriterOptions options = {});

  // Closes the file; an error from that is logged.
  virtual ~EventWriter() = default;

  // The event file's path.
  virtual const std::string& path() const = 0;

  // Appends an Event at `step` holding one Summary value {tag, simple_value: value}, stamped with
  // the clock's time. Errors: kInvalidArgument if `tag` is not valid UTF-8 (protobuf would not
  // read it back); kFailedPrecondition after Close(); otherwise as Flush.
  virtual absl::Status WriteScalar(absl::string_view tag, int64_t step, float value) = 0;

  // Appends `event` as it is (wall_time is not filled in). Errors: as WriteScalar.
  virtual absl::Status WriteEvent(const tensorflow::Event& event) = 0;

  // Writes every buffered record to the file (to the OS, not fsync).
  // Errors (naming the path): as write(2), e.g. kResourceExhausted for a full disk;
  // kFailedPrecondition after Close().
  virtual absl::Status Flush() = 0;

  // Flushes and closes the file. Later writes fail; a second Close() returns OK.
  // Errors: as Flush, or as close(2).
  virtual absl::Status Close() = 0;
};

// Reads every Event of an event file written by EventWriter (or TensorFlow), checking the length
// CRC and the data CRC of each record.
// Errors (each names the path): kNotFound if the file does not exist, other read errors as
// absl::ErrnoToStatus; kDataLoss for a CRC mismatch, a truncated record or data that is not an
// Event, naming the byte offset of the bad record.
absl::StatusOr<std::vector<tensorflow::Event>> ReadEventFile(const std::string& path);

}  // namespace pstrain

#endif  // PSTRAIN_TRAINER_EVENT_WRITER_H_
