// Where a dynamic table shard's export (ps/dynamic_shard.h, ExportRequest) goes on: the stripe and
// the next record number in it, sent to the client as an opaque cursor of 8 bytes (little-endian
// stripe << 32 | record); past RAM's stripes (stripe == stripes), the disk tier's next key, as 16
// bytes (that word, then the key). An empty cursor starts at the beginning.
#ifndef PSTRAIN_PS_DYNAMIC_EXPORT_H_
#define PSTRAIN_PS_DYNAMIC_EXPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {

struct ExportCursor {
  int stripe = 0;
  uint32_t record = 0;
  bool on_disk = false;  // past RAM's stripes (stripe == stripes)
  int64_t disk_key = 0;  // then: the disk tier's next key

  // Reads a cursor Encode made for a shard of `stripes` stripes. Errors: kInvalidArgument naming
  // `shard` (a cursor not of 8 or 16 bytes, a stripe out of range, a disk key without the disk's
  // stripe).
  static absl::StatusOr<ExportCursor> Decode(absl::string_view bytes, int stripes,
                                             absl::string_view shard);
  std::string Encode() const;
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_DYNAMIC_EXPORT_H_
