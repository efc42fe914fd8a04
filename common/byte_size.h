// Sizes in bytes as people write them in flags: "1048576", "512K", "64M", "20G", "1T" (binary
// multiples: K = 1024), or "0".
#ifndef PSTRAIN_COMMON_BYTE_SIZE_H_
#define PSTRAIN_COMMON_BYTE_SIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {

// Errors: kInvalidArgument naming the text (not a number, a negative one, an unknown suffix, or
// more than 2^62 bytes).
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_BYTE_SIZE_H_
