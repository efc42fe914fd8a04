// The CUDA backend's entry points in a build without CUDA (see cuda_device.h): no GPU, and a
// kFailedPrecondition that says so wherever one is asked for.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/device/cuda_device.h"
#include "worker/device/device.h"

namespace pstrain {
namespace cuda_backend {
namespace {

constexpr char kNoCudaBuild[] =
    "this build has no CUDA support (the CUDA toolkit was not found when it was built; see "
    "third_party/cuda/cuda_configure.bzl)";

}  // namespace

bool CudaBuild() { return false; }

int CudaDeviceCount(std::string* why_none) {
  if (why_none != nullptr) *why_none = kNoCudaBuild;
  return 0;
}

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int ordinal) {
  if (ordinal < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CreateDevice: gpu_ordinal must be >= 0, got ", ordinal));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("CreateDevice: cuda:", ordinal, " asked for, but ", kNoCudaBuild));
}

absl::StatusOr<std::unique_ptr<CudaAllReducer>> CreateCudaAllReducer(
    absl::Span<Device* const> devices) {
  return absl::FailedPreconditionError(
      absl::StrCat("CreateCudaAllReducer: ", devices.size(), " GPUs asked for, but ",
                   kNoCudaBuild));
}

}  // namespace cuda_backend
}  // namespace pstrain
