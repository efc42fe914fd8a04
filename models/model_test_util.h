// Helpers for the models' tests.
#ifndef PSTRAIN_MODELS_MODEL_TEST_UTIL_H_
#define PSTRAIN_MODELS_MODEL_TEST_UTIL_H_

#include <map>
#include <string>
#include <utility>

#include "models/model.h"

namespace pstrain {

// Default ModelOptions with these model-specific options (ModelOptions::extra).
inline ModelOptions WithExtra(std::map<std::string, std::string> extra) {
  ModelOptions options;
  options.extra = std::move(extra);
  return options;
}

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_MODEL_TEST_UTIL_H_
