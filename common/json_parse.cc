#include "common/json_parse.h"

#include "absl/strings/str_cat.h"

namespace pstrain {

absl::StatusOr<nlohmann::json> ParseJson(absl::string_view text, bool ignore_comments) {
  try {
    return nlohmann::json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                                 /*allow_exceptions=*/true, ignore_comments);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", e.what()));
  }
}

}  // namespace pstrain
