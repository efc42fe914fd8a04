// Where a model's worker side computes. The run's --device and --replicas (ModelOptions::devices)
// travel to every worker as two arguments of the model's dataset; the worker then takes its
// replica group from the process's ReplicaGroups, built once per process and shared by every
// closure (and by every in-process worker: they share the machine's GPUs and cores).
//
// WorkerDevices, ParseDeviceKind and the argument helpers are stateless; ReplicaGroups is
// thread-safe.
#ifndef PSTRAIN_MODELS_DEVICES_H_
#define PSTRAIN_MODELS_DEVICES_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
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

// The replica groups of one process, one per WorkerDevices asked for: made on first use
// (ReplicaGroup::Create), then the same group for as long as this object lives. Every worker of a
// process shares ONE (in-process workers share the machine's GPUs and cores), so its owner makes
// one per process and hands it to everything there that builds a worker's ClosureRegistry:
//
//   worker binary (trainer/worker_main.cc)   its main, for its one worker server
//   coordinator binary (coordinator_main.cc) its main, for the in-process cluster, the sidecar
//                                            evaluator's private cluster and the synchronous
//                                            strategies' workers alike (EvaluatorOptions and
//                                            MirroredOptions::replica_groups)
//   tests, benchmarks                        each its own
//
// The models' registration (models/registry.h, each model's Register*) takes it as a shared_ptr
// and its dataset functions keep that reference, so it outlives every closure and dataset of the
// registries it went into, however those are shared (a registry is itself a shared_ptr, held by
// worker servers, in-process clusters and their threads). The in-process cluster (coordinator/)
// needs no part in it: its workers share the one registry they are given, and with it the groups.
//
// It lives here, in models/, beside WorkerDevices, its key: every owner sits in a room above
// models (trainer/'s binaries, tests/, bench/), so none needs it lower down.
//
// Thread-safe. Get() holds the lock while it creates a group (a GPU group takes a while), so
// concurrent first uses of one WorkerDevices make one group.
class ReplicaGroups {
 public:
  ReplicaGroups() = default;
  ReplicaGroups(const ReplicaGroups&) = delete;
  ReplicaGroups& operator=(const ReplicaGroups&) = delete;

  // The group for `devices` (owned by this object). Errors: ReplicaGroup::Create's (e.g.
  // kFailedPrecondition for cuda on a machine without a GPU); a failure is not remembered, so the
  // next call tries again.
  absl::StatusOr<ReplicaGroup*> Get(const WorkerDevices& devices);
  // The CPU device of Get({kCpu, 1 replica}): for a step's host-side work (deduplicating ids, a
  // step too small for a GPU). Errors: as Get.
  absl::StatusOr<Device*> Cpu();

 private:
  absl::Mutex mu_;
  // Below: guarded by mu_. Keyed by (kind, replicas).
  std::map<std::pair<DeviceOptions::Kind, int>, std::unique_ptr<ReplicaGroup>> groups_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_DEVICES_H_
