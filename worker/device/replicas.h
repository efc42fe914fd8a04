// Replicas inside one worker, as TensorFlow's MirroredStrategy runs them: a worker with several
// GPUs runs one replica of the training step per GPU, each on its part of the batch, and combines
// the replicas' dense gradients with an all-reduce (NCCL across GPUs) before pushing them to the
// ps tasks, once. Embedding gradients stay sparse: the worker dedupes the whole batch's ids once
// (for the pull), every replica sums its examples' gradients into rows of that one [num_unique,
// dim] table (SegmentSum), and the same all-reduce adds the tables, which are small (the batch's
// distinct rows, not the embedding), before the one sparse push (see models/ctr_net.h). On the CPU
// the same interface runs any number of replicas on the CPU device and combines them with a plain
// sum, which is how the tests exercise it.
//
// A step with a ReplicaGroup:
//
//   group->Run([&](int r, Device* device) -> absl::Status {
//     BatchSlice part = group->Slice(batch, r);   // examples [part.begin, part.begin + part.size)
//     ... copy the part in, forward/backward on `device` into grads[r] (device memory) ...
//     // Weight by the replica's share, so the sum is the whole batch's mean-loss gradient:
//     return device->Scale(n, group->Weight(batch, r), grads[r]);
//   });
//   group->AllReduceSum(grads, n);   // every grads[r] now holds the batch's gradient
//   group->device(0)->CopyToHost(grads[0], host, n * 4);   // ... and push it
//
// Thread-safe apart from the usual rule that the caller must not run two steps into the same
// buffers at once; Run() may be called from several threads (the replica threads are shared).
#ifndef PSTRAIN_WORKER_DEVICE_REPLICAS_H_
#define PSTRAIN_WORKER_DEVICE_REPLICAS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/device/device.h"

namespace pstrain {

class ThreadPool;

namespace cuda_backend {
class CudaAllReducer;
}  // namespace cuda_backend

// What Create builds.
struct ReplicaGroupOptions {
  // Default kAuto: one replica per GPU when this build has CUDA and the machine GPUs, else the
  // CPU. kCuda: GPUs only (kFailedPrecondition without). kCpu: the CPU only.
  DeviceOptions::Kind kind = DeviceOptions::Kind::kAuto;
  // Default 0: one replica per GPU on GPUs, one on the CPU. On GPUs at most the number of GPUs
  // (replica i on GPU i); on the CPU any number >= 1, all sharing one CPU device.
  int num_replicas = 0;
  // For the CPU device (kCpu, and kAuto without a GPU).
  CpuDeviceOptions cpu;
};

// Where one replica's examples sit in the batch.
struct BatchSlice {
  int64_t begin = 0;
  int64_t size = 0;
};

class ReplicaGroup {
 public:
  // Errors: kInvalidArgument (num_replicas < 0; more replicas than GPUs), kFailedPrecondition
  // (kCuda without a CUDA build or a GPU), the devices' and NCCL's errors.
  static absl::StatusOr<std::unique_ptr<ReplicaGroup>> Create(
      const ReplicaGroupOptions& options = {});

  ~ReplicaGroup();
  ReplicaGroup(const ReplicaGroup&) = delete;
  ReplicaGroup& operator=(const ReplicaGroup&) = delete;

  int num_replicas() const { return static_cast<int>(devices_.size()); }
  // Replica r's device (for the CPU, the same device for every r). Owned by the group.
  Device* device(int r) const { return devices_[r]; }
  // True when the replicas run on GPUs.
  bool on_gpus() const { return gpu_; }
  // "cpu x 4 replicas", "cuda:0,cuda:1".
  std::string ToString() const;

  // Splits `batch` examples into `replicas` contiguous parts, the first batch % replicas one
  // example larger (as TF splits a batch across replicas); a part may be empty.
  static BatchSlice Split(int64_t batch, int replicas, int r);
  BatchSlice Slice(int64_t batch, int r) const { return Split(batch, num_replicas(), r); }
  // Replica r's share of the batch, Slice(batch, r).size / batch (0 for an empty batch): the
  // factor that turns its mean-loss gradient into its part of the whole batch's.
  double Weight(int64_t batch, int r) const;

  // Runs fn(r, device(r)) for every replica at once, replica 0 on the calling thread, and returns
  // when all have returned: OK, or the error of the lowest-numbered replica that failed.
  absl::Status Run(const std::function<absl::Status(int r, Device* device)>& fn);

  // One data-parallel step into a host buffer: runs step(r, device(r), replica_grads) for every
  // replica at once, replica_grads being n floats of device(r)'s memory (on a host-memory device,
  // replica 0 gets `grads` itself, saving a copy), which the step overwrites (each replica weighting
  // its part as it needs); then sums the buffers across replicas (AllReduceSum), leaves the sum in
  // `grads` (host memory, n floats) and waits for every device. Errors: the lowest-numbered failing
  // replica's, Allocate's, AllReduceSum's and the copy's.
  absl::Status RunAndSum(
      float* grads, int64_t n,
      const std::function<absl::Status(int r, Device* device, float* replica_grads)>& step);

  // Sums n floats across replicas: buffers[r] is replica r's (device(r)'s memory), and afterwards
  // every buffer holds the sum. GPUs: an NCCL all-reduce, enqueued after the work each device has
  // been given (wait with device(r)->Synchronize() or a CopyToHost()); CPU: a plain sum.
  // Errors: kInvalidArgument (not one buffer per replica, n < 0, overlapping or null buffers),
  // NCCL's errors.
  absl::Status AllReduceSum(absl::Span<float* const> buffers, int64_t n);

 private:
  ReplicaGroup(std::vector<std::unique_ptr<Device>> owned, std::vector<Device*> devices,
               std::unique_ptr<cuda_backend::CudaAllReducer> all_reducer, bool gpu);

  std::vector<std::unique_ptr<Device>> owned_;
  std::vector<Device*> devices_;
  std::unique_ptr<cuda_backend::CudaAllReducer> all_reducer_;  // GPUs, more than one
  const bool gpu_;
  std::unique_ptr<ThreadPool> pool_;  // num_replicas - 1 threads for Run
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DEVICE_REPLICAS_H_
