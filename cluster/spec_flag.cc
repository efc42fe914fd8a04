#include "cluster/spec_flag.h"

#include <cstdlib>

namespace pstrain {

absl::StatusOr<std::string> ClusterSpecText(const std::string& flag_value, std::string* source) {
  if (!flag_value.empty()) {
    *source = "--cluster_spec";
    return flag_value;
  }
  const char* env = std::getenv("TF_CONFIG");
  if (env == nullptr || *env == '\0') {
    return absl::InvalidArgumentError(
        "no cluster spec: pass --cluster_spec=FILE_OR_JSON or set TF_CONFIG");
  }
  *source = "TF_CONFIG";
  return std::string(env);
}

}  // namespace pstrain
