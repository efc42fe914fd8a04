#include "ps/dynamic_export.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace pstrain {

absl::StatusOr<ExportCursor> ExportCursor::Decode(absl::string_view bytes, int stripes,
                                                  absl::string_view shard) {
  ExportCursor cursor;
  if (bytes.empty()) return cursor;
  uint64_t v = 0;
  if (bytes.size() != sizeof(v)) {
    return absl::InvalidArgumentError(absl::StrCat("export of \"", shard, "\": a cursor of ",
                                                   bytes.size(), " bytes (not from Export)"));
  }
  std::memcpy(&v, bytes.data(), sizeof(v));
  const uint64_t stripe = v >> 32;
  if (stripe >= static_cast<uint64_t>(stripes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("export of \"", shard, "\": a malformed cursor (stripe ", stripe, ")"));
  }
  cursor.stripe = static_cast<int>(stripe);
  cursor.record = static_cast<uint32_t>(v);
  return cursor;
}

std::string ExportCursor::Encode() const {
  const uint64_t v = (uint64_t{static_cast<uint32_t>(stripe)} << 32) | record;
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}

}  // namespace pstrain
