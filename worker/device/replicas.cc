// ReplicaGroup: devices for the replicas, a thread per replica for Run, and the all-reduce (NCCL
// through the CUDA backend on several GPUs, the CPU device's sum otherwise).
#include "worker/device/replicas.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "worker/device/cuda_device.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<ReplicaGroup>> ReplicaGroup::Create(
    const ReplicaGroupOptions& options) {
  if (options.num_replicas < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReplicaGroup: num_replicas must be >= 0 (0: one per GPU), got ", options.num_replicas));
  }
  std::string why_no_gpu = "the CPU was asked for";
  const int gpus = options.kind == DeviceOptions::Kind::kCpu
                       ? 0
                       : cuda_backend::CudaDeviceCount(&why_no_gpu);
  if (options.kind == DeviceOptions::Kind::kCuda && gpus == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("ReplicaGroup: GPUs asked for, but ", why_no_gpu));
  }
  std::vector<std::unique_ptr<Device>> owned;
  std::vector<Device*> devices;
  std::unique_ptr<cuda_backend::CudaAllReducer> all_reducer;
  const bool gpu = gpus > 0;
  if (gpu) {
    const int n = options.num_replicas == 0 ? gpus : options.num_replicas;
    if (n > gpus) {
      return absl::InvalidArgumentError(absl::StrCat("ReplicaGroup: ", n,
                                                     " replicas asked for, but the machine has ",
                                                     gpus, " GPU(s) (one replica per GPU)"));
    }
    for (int i = 0; i < n; ++i) {
      ASSIGN_OR_RETURN(std::unique_ptr<Device> device, cuda_backend::CreateCudaDevice(i));
      devices.push_back(device.get());
      owned.push_back(std::move(device));
    }
    if (n > 1) {
      ASSIGN_OR_RETURN(all_reducer, cuda_backend::CreateCudaAllReducer(devices));
    }
  } else {
    const int n = options.num_replicas == 0 ? 1 : options.num_replicas;
    ASSIGN_OR_RETURN(std::unique_ptr<Device> cpu, CreateCpuDevice(options.cpu));
    devices.assign(n, cpu.get());  // the CPU device is stateless and thread-safe: one for all
    owned.push_back(std::move(cpu));
  }
  return std::unique_ptr<ReplicaGroup>(
      new ReplicaGroup(std::move(owned), std::move(devices), std::move(all_reducer), gpu));
}

ReplicaGroup::ReplicaGroup(std::vector<std::unique_ptr<Device>> owned,
                           std::vector<Device*> devices,
                           std::unique_ptr<cuda_backend::CudaAllReducer> all_reducer, bool gpu)
    : owned_(std::move(owned)),
      devices_(std::move(devices)),
      all_reducer_(std::move(all_reducer)),
      gpu_(gpu) {
  if (devices_.size() > 1) pool_ = std::make_unique<ThreadPool>(devices_.size() - 1);
}

ReplicaGroup::~ReplicaGroup() {
  pool_.reset();         // no Run in flight (the caller's duty); joins the threads
  all_reducer_.reset();  // before the devices whose streams it uses
}

std::string ReplicaGroup::ToString() const {
  if (!gpu_) return absl::StrCat("cpu x ", devices_.size(), " replicas");
  return absl::StrJoin(devices_, ",",
                       [](std::string* out, const Device* d) { out->append(d->name()); });
}

BatchSlice ReplicaGroup::Split(int64_t batch, int replicas, int r) {
  BatchSlice slice;
  if (batch <= 0 || replicas <= 0 || r < 0 || r >= replicas) return slice;
  const int64_t base = batch / replicas, extra = batch % replicas;
  slice.begin = r * base + std::min<int64_t>(r, extra);
  slice.size = base + (r < extra ? 1 : 0);
  return slice;
}

double ReplicaGroup::Weight(int64_t batch, int r) const {
  if (batch <= 0) return 0;
  return static_cast<double>(Slice(batch, r).size) / static_cast<double>(batch);
}

absl::Status ReplicaGroup::Run(const std::function<absl::Status(int r, Device* device)>& fn) {
  const int n = num_replicas();
  if (n == 1) return fn(0, devices_[0]);
  std::vector<absl::Status> results(n);
  absl::BlockingCounter done(n - 1);
  for (int r = 1; r < n; ++r) {
    pool_->Schedule([&, r] {
      results[r] = fn(r, devices_[r]);
      done.DecrementCount();
    });
  }
  results[0] = fn(0, devices_[0]);
  done.Wait();
  for (const absl::Status& status : results) RETURN_IF_ERROR(status);
  return absl::OkStatus();
}

absl::Status ReplicaGroup::RunAndSum(
    float* grads, int64_t n,
    const std::function<absl::Status(int r, Device* device, float* replica_grads)>& step) {
  const int replicas = num_replicas();
  std::vector<DeviceBuffer> owned(replicas);  // the buffers that are not `grads` itself
  std::vector<float*> replica_grads(replicas);
  RETURN_IF_ERROR(Run([&](int r, Device* device) -> absl::Status {
    if (r == 0 && device->host_memory()) {
      replica_grads[r] = grads;
    } else {
      ASSIGN_OR_RETURN(owned[r], device->Allocate(n * static_cast<int64_t>(sizeof(float))));
      replica_grads[r] = owned[r].as<float>();
    }
    return step(r, device, replica_grads[r]);
  }));
  if (replicas > 1) RETURN_IF_ERROR(AllReduceSum(replica_grads, n));
  if (replica_grads[0] != grads) {
    RETURN_IF_ERROR(device(0)->CopyToHost(replica_grads[0], grads, n * sizeof(float)));
  }
  for (int r = 0; r < replicas; ++r) RETURN_IF_ERROR(device(r)->Synchronize());
  return absl::OkStatus();
}

absl::Status ReplicaGroup::AllReduceSum(absl::Span<float* const> buffers, int64_t n) {
  if (buffers.size() != devices_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ReplicaGroup::AllReduceSum: ",
                                                   buffers.size(), " buffers for ",
                                                   devices_.size(), " replicas"));
  }
  if (all_reducer_ == nullptr) return devices_[0]->AllReduceSum(buffers, n);
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReplicaGroup::AllReduceSum: n must be >= 0, got ", n));
  }
  for (size_t r = 0; r < buffers.size(); ++r) {
    if (buffers[r] == nullptr && n > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ReplicaGroup::AllReduceSum: buffers[", r, "] is null"));
    }
  }
  return all_reducer_->AllReduceSum(buffers, n);
}

}  // namespace pstrain
