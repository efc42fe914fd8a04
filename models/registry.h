// Every model this build has: its worker-side closures, and its coordinator side by name.
#ifndef PSTRAIN_MODELS_REGISTRY_H_
#define PSTRAIN_MODELS_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/devices.h"
#include "models/model.h"
#include "models/serving_head.h"
#include "worker/closure_registry.h"

namespace pstrain {

// Registers every model's closures and datasets (for worker servers). Their datasets take their
// replica groups from `replica_groups` (not null; the process's one, models/devices.h), and keep a
// reference to it.
absl::Status RegisterModelClosures(ClosureRegistry* registry,
                                   std::shared_ptr<ReplicaGroups> replica_groups);

// The built-in closures plus every model's: what a worker of a training job runs. Every registry
// of a process should get the same `replica_groups` (not null; models/devices.h).
absl::StatusOr<std::shared_ptr<const ClosureRegistry>> TrainingRegistry(
    std::shared_ptr<ReplicaGroups> replica_groups);

// The model called `name`. Errors: kInvalidArgument for an unknown name (listing the known ones)
// or bad options.
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const std::string& name,
                                                   const ModelOptions& options);

// The names CreateModel knows.
std::vector<std::string> ModelNames();

// The serving head (models/serving_head.h) of model `name` from its serving config
// (Model::ServingConfig, as checkpoints and exported models hold it). Errors: kUnimplemented for
// a model that can't be served yet, kInvalidArgument for an unknown name or a bad config.
absl::StatusOr<std::unique_ptr<ServingHead>> CreateServingHead(const std::string& name,
                                                             const std::string& serving_config);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_REGISTRY_H_
