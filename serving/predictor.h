// A trained model outside the cluster: loads an exported model directory (serving/export.h) and
// predicts batches of raw examples with the same parsing and feature transforms as training (the
// model's ServingHead, models/serving_head.h), reading its variables from the export's RocksDB
// database through a bounded cache (serving/model_store.h). No cluster, no ps task; CPU.
//
//   auto predictor = Predictor::Load("models/flights/1");
//   RawExamples batch{{"date", "distance", "origin", "destination"}, {{...}, ...}};
//   std::vector<float> out;  // outputs().size() per example
//   predictor->Predict(batch, &out);
#ifndef PSTRAIN_SERVING_PREDICTOR_H_
#define PSTRAIN_SERVING_PREDICTOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/serving_head.h"
#include "serving/model_store.h"
#include "worker/ps_connection.h"

namespace pstrain {

struct PredictorOptions {
  // The model store's options: the cache of table rows (default 256 MiB; -1: every row in memory).
  ModelStoreOptions store;
};

// Thread-safe: Predict may run on many threads at once.
class Predictor {
 public:
  // Errors: as ModelStore::Open (kNotFound, kDataLoss naming the file), and the model's head's
  // (kUnimplemented for a model that can't be served; kInvalidArgument for a bad serving config).
  static absl::StatusOr<std::unique_ptr<Predictor>> Load(const std::string& model_dir,
                                                         const PredictorOptions& options = {});
  // Over a store already open (a version that follows training, serving/model_follower.h).
  // Errors: the head's, as Load.
  static absl::StatusOr<std::unique_ptr<Predictor>> FromStore(
      std::shared_ptr<const ModelStore> store);

  const std::string& model() const { return store_->manifest().model; }
  const ModelManifest& manifest() const { return store_->manifest(); }
  // The columns an example needs, and the outputs per example.
  const std::vector<std::string>& columns() const { return columns_; }
  const std::vector<std::string>& outputs() const { return outputs_; }

  // Predicts every row of `examples` into `out` (outputs().size() floats per row). Errors: the
  // head's kInvalidArgument naming a missing column or a row's bad value; kDataLoss from the store.
  absl::Status Predict(const RawExamples& examples, std::vector<float>* out) const;

  CacheStats cache_stats() const { return store_->cache_stats(); }
  const std::shared_ptr<const ModelStore>& store() const { return store_; }

 private:
  Predictor() = default;
  std::shared_ptr<const ModelStore> store_;
  std::unique_ptr<PsConnection> ps_;
  std::unique_ptr<ServingHead> head_;
  std::vector<std::string> columns_, outputs_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVING_PREDICTOR_H_
