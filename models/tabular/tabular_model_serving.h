// The tabular model's serving head (models/serving_head.h; the model: tabular_model.h): predicts
// from raw rows with the training transforms (without the label), an evaluation lookup of every
// key (unseen keys read the default row; tabular_lookup.h) and the net's forward pass on the CPU
// (a one-replica group of its own).
//
// The head is immutable once made; Predict is thread-safe.
#ifndef PSTRAIN_MODELS_TABULAR_TABULAR_MODEL_SERVING_H_
#define PSTRAIN_MODELS_TABULAR_TABULAR_MODEL_SERVING_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/serving_head.h"

namespace pstrain {

// The serving head of a trained tabular model from its serving config (the spec, the training
// split's statistics, the seed): it reads the spec's feature columns (not the label) and
// transforms them as training did; outputs "probability" (binary), "prediction" (regression, in
// the label's units) or "probability:<class>" per class (multiclass). Errors: kInvalidArgument
// for a malformed config.
absl::StatusOr<std::unique_ptr<ServingHead>> CreateTabularServingHead(
    const std::string& serving_config);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_TABULAR_TABULAR_MODEL_SERVING_H_
