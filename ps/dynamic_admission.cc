#include "ps/dynamic_admission.h"

#include <algorithm>

#include "common/status_macros.h"
#include "partitioners/key_routing.h"

namespace pstrain {
namespace {

// A uniform draw in [0, 1) from (a, b, c).
double Draw(uint64_t a, uint64_t b, uint64_t c) {
  const uint64_t bits = MixKey(static_cast<int64_t>(
      MixKey(static_cast<int64_t>(a ^ MixKey(static_cast<int64_t>(b)))) ^ c));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace

absl::Status AdmissionSketch::Start(const AdmissionOptions& options, MemoryBudget* budget,
                                    const std::string& who) {
  options_ = options;
  reservation_ = BudgetReservation(budget);
  counters_.clear();
  width_ = 0;
  if (options.min_count <= 1 && !(options.probability > 0)) return absl::OkStatus();
  int64_t bytes = options.sketch_bytes > 0 ? options.sketch_bytes : kDefaultBytes;
  bytes = std::max<int64_t>(kRows, bytes / kRows * kRows);
  RETURN_IF_ERROR(reservation_.Add(bytes, who));
  counters_.assign(static_cast<size_t>(bytes), 0);
  width_ = static_cast<uint64_t>(bytes / kRows);
  return absl::OkStatus();
}

uint64_t AdmissionSketch::At(int64_t key, int row) const {
  return row * width_ +
         MixKey(key ^ static_cast<int64_t>(0x51afd7ed558ccd00ULL * (row + 1))) % width_;
}

uint32_t AdmissionSketch::Count(int64_t key) const {
  if (!on()) return 0;
  uint32_t least = 255;
  for (int row = 0; row < kRows; ++row) least = std::min<uint32_t>(least, counters_[At(key, row)]);
  return least;
}

void AdmissionSketch::Add(int64_t key, uint32_t n) {
  if (!on()) return;
  // Conservative update: only the counters at the key's least count grow.
  const uint32_t to = std::min<uint32_t>(255, Count(key) + n);
  for (int row = 0; row < kRows; ++row) {
    uint8_t& c = counters_[At(key, row)];
    if (c < to) c = static_cast<uint8_t>(to);
  }
}

bool AdmissionSketch::Admits(int64_t key, uint32_t occurrences) const {
  if (!on()) return true;
  const uint32_t before = Count(key);
  if (options_.min_count > 1 && before + occurrences >= static_cast<uint64_t>(options_.min_count)) {
    return true;
  }
  if (options_.probability > 0) {
    for (uint32_t k = 1; k <= occurrences; ++k) {
      if (Draw(options_.seed, static_cast<uint64_t>(key), before + k) < options_.probability) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace pstrain
