// Parsing JSON text from outside (cluster specs, feature specs, the jobs the coordinator ships to
// workers) without letting nlohmann::json throw: even with allow_exceptions=false its parser throws
// out_of_range for a number that overflows a double ("1e999"), which would end the process.
#ifndef PSTRAIN_COMMON_JSON_PARSE_H_
#define PSTRAIN_COMMON_JSON_PARSE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace pstrain {

// The parsed value. `ignore_comments`: allow // and /* */ comments.
// Errors: kInvalidArgument "not valid JSON: <the parser's message, with its position>".
absl::StatusOr<nlohmann::json> ParseJson(absl::string_view text, bool ignore_comments = false);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JSON_PARSE_H_
