#include "common/id_index.h"

#include <algorithm>

namespace pstrain {

void IdIndex::Reset(int64_t max_ids) {
  // At most half full: short probe sequences.
  uint64_t size = 16;
  while (size < 2 * static_cast<uint64_t>(max_ids > 0 ? max_ids : 0)) size <<= 1;
  if (size > slots_.size()) {
    slots_.assign(size, Slot{});
    generation_ = 0;
  }
  mask_ = size - 1;
  // Slots of a smaller earlier table beyond `size` are simply not probed; the generation makes every
  // slot within it free. After 2^32 - 1 batches the generations wrap: start the slots afresh.
  if (++generation_ == 0) {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    generation_ = 1;
  }
}

IdIndex& ThreadIdIndex() {
  thread_local IdIndex index;
  return index;
}

}  // namespace pstrain
