// Internal to worker/device: the CUDA backend's entry points. A build with CUDA (see
// third_party/cuda/cuda_configure.bzl) compiles cuda_device.cc, one without compiles
// cuda_device_stub.cc; this header is the same for both, so no code outside the backend needs an
// #if. Code outside worker/device uses CreateDevice (device.h) and ReplicaGroup (replicas.h).
#ifndef PSTRAIN_WORKER_DEVICE_CUDA_DEVICE_H_
#define PSTRAIN_WORKER_DEVICE_CUDA_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace pstrain {

class Device;

namespace cuda_backend {

// True when this binary was built with CUDA (whether or not the machine has a GPU).
bool CudaBuild();

// The number of GPUs this process can use: 0 when the build has no CUDA, or the machine no GPU or
// no driver (cudaGetDeviceCount's error is taken as "no GPU", never as a failure). When it is 0 and
// `why_none` is not null, *why_none says why, for messages and test skips.
int CudaDeviceCount(std::string* why_none = nullptr);

// GPU `ordinal` as a Device ("cuda:<ordinal>"): its own stream and cuBLAS handle; device
// pointers are GPU memory (host_memory() is false). Data-dependent errors (an index or label out
// of range) are reported by the next Synchronize(), CopyToHost() or Unique() (see
// cuda_kernels.h). AllReduceSum sums buffers that are all on this GPU; across GPUs, use
// CudaAllReducer (ReplicaGroup does).
// Errors: kInvalidArgument (ordinal < 0), kFailedPrecondition (no CUDA build, no GPU, or no GPU
// `ordinal`; the message says which and contains "no CUDA" in the first two cases), kInternal
// (a CUDA or cuBLAS call failed at setup).
absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int ordinal);

// Sums float buffers across GPUs with NCCL: one communicator per GPU, each collective enqueued on
// that GPU's device stream (so it follows the work already given to each device). Thread-safe:
// calls are serialized, so every GPU sees the collectives in the same order.
class CudaAllReducer {
 public:
  virtual ~CudaAllReducer() = default;
  // buffers[i] (n floats, device memory of devices[i] as given to CreateCudaAllReducer) all hold
  // the sum afterwards. Asynchronous: each device's Synchronize() waits for it.
  // Errors: kInvalidArgument (a buffer count other than the device count), kInternal (NCCL).
  virtual absl::Status AllReduceSum(absl::Span<float* const> buffers, int64_t n) = 0;
};

// `devices`: made by CreateCudaDevice, each on a different GPU, outliving the reducer.
// Errors: kInvalidArgument (empty, a device that is not a CUDA device, a GPU twice),
// kFailedPrecondition (no CUDA build), kInternal (NCCL's initialization failed).
absl::StatusOr<std::unique_ptr<CudaAllReducer>> CreateCudaAllReducer(
    absl::Span<Device* const> devices);

}  // namespace cuda_backend
}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DEVICE_CUDA_DEVICE_H_
