#include "ps/memory_budget.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pstrain {

absl::Status MemoryBudget::Reserve(int64_t bytes, absl::string_view what, int64_t headroom) {
  if (bytes <= 0) return absl::OkStatus();
  int64_t used = used_.load(std::memory_order_relaxed);
  const int64_t limit = limit_ - std::max<int64_t>(0, headroom);
  do {
    if (limit_ > 0 && (bytes > limit || used > limit - bytes)) {
      if (headroom > 0) {
        return absl::ResourceExhaustedError(absl::StrCat(
            what, ": ", bytes, " more bytes would leave less than ", headroom,
            " bytes of this ps's memory budget of ", limit_, " bytes (", used, " in use)"));
      }
      return absl::ResourceExhaustedError(absl::StrCat(
          what, ": ", bytes, " more bytes would pass this ps's memory budget of ", limit_,
          " bytes (", used, " in use)"));
    }
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return absl::OkStatus();
}

}  // namespace pstrain
