// UTF-8 validity as protobuf checks its `string` fields: a text from outside that ends up in one
// (a TensorBoard tag, a name) is checked first, so a bad byte is a clear error instead of a
// message protobuf refuses to read back.
#ifndef PSTRAIN_COMMON_UTF8_H_
#define PSTRAIN_COMMON_UTF8_H_

#include "absl/strings/string_view.h"

namespace pstrain {

// Whether `text` is well-formed UTF-8: no overlong forms, no surrogates (U+D800..U+DFFF), nothing
// past U+10FFFF, no sequence cut short.
bool IsValidUtf8(absl::string_view text);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_UTF8_H_
