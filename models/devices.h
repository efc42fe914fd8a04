// Where a model's worker side computes. The run's --device and --replicas (ModelOptions::devices)
// travel to every worker as two arguments of the model's dataset; the worker then takes its
// replica group from WorkerReplicaGroup, built once per process and shared by every closure (and
// by every in-process worker: they share the machine's GPUs and cores).
#ifndef PSTRAIN_MODELS_DEVICES_H_
#define PSTRAIN_MODELS_DEVICES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "worker/device/device.h"
#include "worker/device/replicas.h"

namespace pstrain {

struct WorkerDevices {
  // auto (default): one replica per GPU when the worker's build has CUDA and its machine GPUs,
  // else the CPU; cpu; cuda (an error on a worker without).
  DeviceOptions::Kind kind = DeviceOptions::Kind::kAuto;
  // Replicas per worker: 0 (default) one per GPU, or one on the CPU; on GPUs at most the number of
  // GPUs; on the CPU any number (they split the batch and sum their gradients, as on GPUs).
  int replicas = 0;
};

// "auto", "cpu", "cuda". Errors: kInvalidArgument naming the text and the choices.
absl::StatusOr<DeviceOptions::Kind> ParseDeviceKind(absl::string_view text);
std::string DeviceKindName(DeviceOptions::Kind kind);

// The two dataset arguments that carry `devices` (int64 kind, int64 replicas), and their reading
// back from args[first], args[first + 1]. Errors: kInvalidArgument naming `closure`.
std::vector<Tensor> DeviceArgs(const WorkerDevices& devices);
absl::StatusOr<WorkerDevices> DevicesFromArgs(absl::Span<const Tensor> args, size_t first,
                                              const char* closure);

// This process's replica group for `devices`: made on first use (ReplicaGroup::Create), then the
// same group for the life of the process. Thread-safe. Errors: ReplicaGroup::Create's (e.g.
// kFailedPrecondition for cuda on a machine without a GPU).
absl::StatusOr<ReplicaGroup*> WorkerReplicaGroup(const WorkerDevices& devices);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_DEVICES_H_
