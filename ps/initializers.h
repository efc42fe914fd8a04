// Fills a shard's rows with their initial values: zeros, constant, uniform, normal, truncated
// normal. A value depends only on (seed, global element index), never on how the variable is
// sharded, so each ps initializes only its own rows and the whole table is the same however split.
#ifndef PSTRAIN_PS_INITIALIZERS_H_
#define PSTRAIN_PS_INITIALIZERS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/ps_service.pb.h"

namespace pstrain {

// Checks the initializer's parameters (e.g. uniform needs minval < maxval, normal needs
// stddev > 0). Errors: kInvalidArgument naming the parameter.
absl::Status ValidateInitializer(const InitializerDef& init);

// Writes `count` elements starting at global element index `first_element` (row_offset * width).
void InitializeFloat(const InitializerDef& init, int64_t first_element, int64_t count, float* out);
// A dynamic table's row for `key`: `count` floats drawn from (init.seed(), key, element), the same
// distributions as InitializeFloat, so a key's initial row never depends on where it is stored.
void InitializeFloatForKey(const InitializerDef& init, int64_t key, int64_t count, float* out);
// For int64 variables: ZEROS and CONSTANT only (random kinds are rejected by validation).
void InitializeInt64(const InitializerDef& init, int64_t first_element, int64_t count,
                     int64_t* out);

}  // namespace pstrain

#endif  // PSTRAIN_PS_INITIALIZERS_H_
