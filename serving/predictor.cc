#include "serving/predictor.h"

#include <utility>

#include "common/status_macros.h"
#include "models/registry.h"
#include "serving/store_ps_client.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::Load(const std::string& model_dir,
                                                           const PredictorOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<ModelStore> store, ModelStore::Open(model_dir, options.store));
  return FromStore(std::move(store));
}

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::FromStore(
    std::shared_ptr<const ModelStore> store) {
  std::unique_ptr<Predictor> p(new Predictor);
  p->store_ = std::move(store);
  std::vector<std::unique_ptr<PsClient>> clients;
  clients.push_back(NewStorePsClient(p->store_.get()));
  p->ps_ = std::make_unique<PsConnection>(std::move(clients));
  ASSIGN_OR_RETURN(p->head_, CreateServingHead(p->store_->manifest().model,
                                               p->store_->manifest().serving_config));
  p->columns_ = p->head_->columns();
  p->outputs_ = p->head_->outputs();
  return p;
}

absl::Status Predictor::Predict(const RawExamples& examples, std::vector<float>* out) const {
  return head_->Predict(examples, ps_.get(), out);
}

}  // namespace pstrain
