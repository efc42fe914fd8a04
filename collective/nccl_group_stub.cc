// The NCCL group in a build without CUDA (see nccl_group.h): no GPU, and a kFailedPrecondition
// that says so.
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "collective/group_membership.h"
#include "collective/nccl_group.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

constexpr char kNoCudaBuild[] = "NCCL collectives need a CUDA build (this one has none)";

}  // namespace

absl::StatusOr<std::unique_ptr<CollectiveGroup>> CreateNcclGroup(
    const CollectiveGroupOptions& options, int /*gpu*/) {
  // The options' errors first, as with CUDA (which checks `gpu` once it has found the GPUs).
  RETURN_IF_ERROR(ValidateGroupOptions(options));
  return absl::FailedPreconditionError(kNoCudaBuild);
}

int NcclGpuCount(std::string* why_none) {
  if (why_none != nullptr) {
    *why_none =
        "no CUDA in this build (the CUDA toolkit was not found when it was built; see "
        "third_party/cuda/cuda_configure.bzl)";
  }
  return 0;
}

bool NcclGroupAvailable() { return false; }

}  // namespace pstrain
