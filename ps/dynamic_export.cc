#include "ps/dynamic_export.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace pstrain {

absl::StatusOr<ExportCursor> ExportCursor::Decode(absl::string_view bytes, int stripes,
                                                  absl::string_view shard) {
  ExportCursor cursor;
  if (bytes.empty()) return cursor;
  uint64_t v = 0;
  if (bytes.size() != sizeof(v) && bytes.size() != 2 * sizeof(v)) {
    return absl::InvalidArgumentError(absl::StrCat("export of \"", shard, "\": a cursor of ",
                                                   bytes.size(), " bytes (not from Export)"));
  }
  std::memcpy(&v, bytes.data(), sizeof(v));
  const uint64_t stripe = v >> 32;
  const bool on_disk = bytes.size() == 2 * sizeof(v);
  if (on_disk ? stripe != static_cast<uint64_t>(stripes) || static_cast<uint32_t>(v) != 0
              : stripe >= static_cast<uint64_t>(stripes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("export of \"", shard, "\": a malformed cursor (stripe ", stripe, ")"));
  }
  cursor.stripe = static_cast<int>(stripe);
  cursor.record = static_cast<uint32_t>(v);
  cursor.on_disk = on_disk;
  if (on_disk) std::memcpy(&cursor.disk_key, bytes.data() + sizeof(v), sizeof(cursor.disk_key));
  return cursor;
}

std::string ExportCursor::Encode() const {
  const uint64_t v = (uint64_t{static_cast<uint32_t>(stripe)} << 32) | record;
  std::string out(reinterpret_cast<const char*>(&v), sizeof(v));
  if (on_disk) out.append(reinterpret_cast<const char*>(&disk_key), sizeof(disk_key));
  return out;
}

}  // namespace pstrain
