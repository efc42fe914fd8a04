#include "models/registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/fashion_mnist_cnn.h"
#include "models/fashion_mnist_cnn_worker.h"
#include "models/fashion_mnist_mlp.h"
#include "models/fashion_mnist_mlp_worker.h"
#include "models/flights_ctr.h"
#include "models/flights_ctr_serving.h"
#include "models/flights_ctr_worker.h"
#include "models/movielens_mf.h"
#include "models/movielens_mf_worker.h"
#include "models/tabular/tabular_model.h"
#include "models/tabular/tabular_model_serving.h"
#include "models/tabular/tabular_model_worker.h"

namespace pstrain {

absl::Status RegisterModelClosures(ClosureRegistry* registry,
                                   std::shared_ptr<ReplicaGroups> replica_groups) {
  RETURN_IF_ERROR(RegisterMatrixFactorization(registry, replica_groups));
  RETURN_IF_ERROR(RegisterFashionMnistMlp(registry, replica_groups));
  RETURN_IF_ERROR(RegisterFashionMnistCnn(registry, replica_groups));
  RETURN_IF_ERROR(RegisterFlightsCtr(registry, replica_groups));
  RETURN_IF_ERROR(RegisterTabular(registry, std::move(replica_groups)));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const ClosureRegistry>> TrainingRegistry(
    std::shared_ptr<ReplicaGroups> replica_groups) {
  auto registry = std::make_shared<ClosureRegistry>();
  RETURN_IF_ERROR(RegisterBuiltinClosures(registry.get()));
  RETURN_IF_ERROR(RegisterModelClosures(registry.get(), std::move(replica_groups)));
  return std::shared_ptr<const ClosureRegistry>(std::move(registry));
}

std::vector<std::string> ModelNames() {
  return {kMatrixFactorizationModel, kFashionMnistMlpModel, kFashionMnistCnnModel,
          kFlightsCtrModel, kTabularModel};
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const std::string& name,
                                                   const ModelOptions& options) {
  if (name == kMatrixFactorizationModel) return CreateMatrixFactorization(options);
  if (name == kFashionMnistMlpModel) return CreateFashionMnistMlp(options);
  if (name == kFashionMnistCnnModel) return CreateFashionMnistCnn(options);
  if (name == kFlightsCtrModel) return CreateFlightsCtr(options);
  if (name == kTabularModel) return CreateTabular(options);
  return absl::InvalidArgumentError(absl::StrCat("unknown model \"", name, "\" (models: ",
                                                 absl::StrJoin(ModelNames(), ", "), ")"));
}

absl::StatusOr<std::unique_ptr<ServingHead>> CreateServingHead(const std::string& name,
                                                             const std::string& serving_config) {
  if (name == kFlightsCtrModel) return CreateFlightsCtrServingHead(serving_config);
  if (name == kTabularModel) return CreateTabularServingHead(serving_config);
  const std::vector<std::string> names = ModelNames();
  if (std::find(names.begin(), names.end(), name) != names.end()) {
    return absl::UnimplementedError(absl::StrCat(
        "model \"", name, "\" can't be served outside the cluster yet (flights_ctr and tabular can)"));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown model \"", name, "\" (models: ",
                                                 absl::StrJoin(ModelNames(), ", "), ")"));
}

}  // namespace pstrain
