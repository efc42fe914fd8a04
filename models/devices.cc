#include "models/devices.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/batches.h"

namespace pstrain {

absl::StatusOr<DeviceOptions::Kind> ParseDeviceKind(absl::string_view text) {
  if (text == "auto") return DeviceOptions::Kind::kAuto;
  if (text == "cpu") return DeviceOptions::Kind::kCpu;
  if (text == "cuda") return DeviceOptions::Kind::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("device \"", text, "\" is not one of auto, cpu, cuda"));
}

std::string DeviceKindName(DeviceOptions::Kind kind) {
  switch (kind) {
    case DeviceOptions::Kind::kAuto:
      return "auto";
    case DeviceOptions::Kind::kCpu:
      return "cpu";
    case DeviceOptions::Kind::kCuda:
      return "cuda";
  }
  return "unknown";
}

std::vector<Tensor> DeviceArgs(const WorkerDevices& devices) {
  return {Tensor::Scalar<int64_t>(static_cast<int64_t>(devices.kind)),
          Tensor::Scalar<int64_t>(devices.replicas)};
}

absl::StatusOr<WorkerDevices> DevicesFromArgs(absl::Span<const Tensor> args, size_t first,
                                              const char* closure) {
  ASSIGN_OR_RETURN(int64_t kind, IntArg(args, first, closure));
  ASSIGN_OR_RETURN(int64_t replicas, IntArg(args, first + 1, closure));
  if (kind < static_cast<int64_t>(DeviceOptions::Kind::kAuto) ||
      kind > static_cast<int64_t>(DeviceOptions::Kind::kCuda)) {
    return absl::InvalidArgumentError(
        absl::StrCat(closure, ": argument ", first, ": device kind ", kind, " is unknown"));
  }
  if (replicas < 0 || replicas > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(closure, ": argument ", first + 1, ": replicas ",
                                                   replicas, " is not in [0, 1024]"));
  }
  WorkerDevices devices;
  devices.kind = static_cast<DeviceOptions::Kind>(kind);
  devices.replicas = static_cast<int>(replicas);
  return devices;
}

absl::StatusOr<ReplicaGroup*> ReplicaGroups::Get(const WorkerDevices& devices) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<ReplicaGroup>& group = groups_[{devices.kind, devices.replicas}];
  if (group == nullptr) {
    ReplicaGroupOptions options;
    options.kind = devices.kind;
    options.num_replicas = devices.replicas;
    ASSIGN_OR_RETURN(group, ReplicaGroup::Create(options));
  }
  return group.get();
}

absl::StatusOr<Device*> ReplicaGroups::Cpu() {
  WorkerDevices cpu;
  cpu.kind = DeviceOptions::Kind::kCpu;
  cpu.replicas = 1;
  ASSIGN_OR_RETURN(ReplicaGroup * group, Get(cpu));
  return group->device(0);
}

}  // namespace pstrain
