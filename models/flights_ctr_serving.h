// flights_ctr's serving head (models/serving_head.h; the model: flights_ctr.h): predicts from the
// flights' raw fields with the training step's keys and lookups (an evaluation lookup: unseen keys
// read the default row) and its forward pass on one CPU replica of its own.
//
// The head is immutable once made; Predict is thread-safe.
#ifndef PSTRAIN_MODELS_FLIGHTS_CTR_SERVING_H_
#define PSTRAIN_MODELS_FLIGHTS_CTR_SERVING_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/serving_head.h"

namespace pstrain {

// The serving head of a trained flights_ctr from its serving config (Model::ServingConfig):
// columns date, distance, origin, destination (as the training CSV has them); output
// "probability" (of a delay over the threshold). A flight on a day of year no training flight had
// reads the day as unknown, as the test flights do. Errors: kInvalidArgument for a malformed
// config.
absl::StatusOr<std::unique_ptr<ServingHead>> CreateFlightsCtrServingHead(
    const std::string& serving_config);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_FLIGHTS_CTR_SERVING_H_
