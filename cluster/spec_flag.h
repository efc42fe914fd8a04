// Where a binary's cluster spec comes from: its --cluster_spec flag, else TF_CONFIG. For *_main.cc
// files only (configuration from the environment is read in mains, nowhere else).
#ifndef PSTRAIN_CLUSTER_SPEC_FLAG_H_
#define PSTRAIN_CLUSTER_SPEC_FLAG_H_

#include <string>

#include "absl/status/statusor.h"

namespace pstrain {

// The cluster spec text: `flag_value` if not empty, else the TF_CONFIG environment variable.
// `source` says which ("--cluster_spec" or "TF_CONFIG"). Errors: kInvalidArgument if neither is set.
absl::StatusOr<std::string> ClusterSpecText(const std::string& flag_value, std::string* source);

}  // namespace pstrain

#endif  // PSTRAIN_CLUSTER_SPEC_FLAG_H_
