#include "common/byte_size.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pstrain {

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  absl::string_view digits = absl::StripAsciiWhitespace(text);
  int shift = 0;
  if (!digits.empty()) {
    switch (absl::ascii_toupper(digits.back())) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: break;
    }
    if (shift > 0) digits.remove_suffix(1);
  }
  int64_t value = 0;
  if (digits.empty() || !absl::SimpleAtoi(digits, &value) || value < 0 ||
      value > (int64_t{1} << (62 - shift))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text, "\" is not a size in bytes (a whole number, optionally with K, M, G or T)"));
  }
  return value << shift;
}

}  // namespace pstrain
