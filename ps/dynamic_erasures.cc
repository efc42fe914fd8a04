#include "ps/dynamic_erasures.h"

#include <algorithm>

namespace pstrain {

void ErasureLog::ForgetThrough(uint32_t through) {
  erased_.erase(std::remove_if(erased_.begin(), erased_.end(),
                               [through](const std::pair<int64_t, uint32_t>& e) {
                                 return e.second <= through;
                               }),
                erased_.end());
}

}  // namespace pstrain
