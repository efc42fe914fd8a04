#include "common/utf8.h"

#include <cstdint>

namespace pstrain {

bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    const uint8_t b = static_cast<uint8_t>(text[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    int more = 0;
    uint8_t low = 0x80, high = 0xbf;  // the range of the byte after the first
    if (b >= 0xc2 && b <= 0xdf) {
      more = 1;
    } else if (b >= 0xe0 && b <= 0xef) {
      more = 2;
      if (b == 0xe0) low = 0xa0;   // overlong
      if (b == 0xed) high = 0x9f;  // surrogates
    } else if (b >= 0xf0 && b <= 0xf4) {
      more = 3;
      if (b == 0xf0) low = 0x90;   // overlong
      if (b == 0xf4) high = 0x8f;  // past U+10FFFF
    } else {
      return false;  // a continuation byte first, an overlong 2-byte lead, or past U+10FFFF
    }
    if (n - i <= static_cast<size_t>(more)) return false;
    const uint8_t second = static_cast<uint8_t>(text[i + 1]);
    if (second < low || second > high) return false;
    for (int k = 2; k <= more; ++k) {
      const uint8_t c = static_cast<uint8_t>(text[i + k]);
      if (c < 0x80 || c > 0xbf) return false;
    }
    i += more + 1;
  }
  return true;
}

}  // namespace pstrain
