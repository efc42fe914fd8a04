// The versions of one exported model that the prediction server (serving/prediction_server.h)
// serves, in TF Serving's layout:
//
//   <base>/1/MANIFEST.json, <base>/1/db/...     each a model directory serving/export.h writes
//   <base>/2/...                                 (export writes <dir>.tmp-<pid> and renames it)
//
// Only directories named by a whole number count; one is complete when its MANIFEST.json is
// there. The newest complete version that loads is served. A watcher looks for a newer one every
// poll_period (waiting on a CondVar with that timeout, not sleeping): it loads it beside the
// served one, switches new batches to it at once, and the old one is freed when the last batch
// (and answer) holding it is done, so no request fails or waits during a reload. Two versions
// are in memory for that while: each with its own row cache (PredictorOptions).
//
// A newer version that fails to load (a corrupt or half-copied directory: DATA_LOSS naming the
// file) is logged and skipped, the served one goes on, and it is tried again once its files
// change (their count, sizes or times). Versions are only ever replaced by newer ones: removing
// the served version's directory does not go back to an older one.
//
// Each version's state (ModelStatus reports them):
//
//   (a newer complete directory) --> kLoading --ok--> kAvailable --(a newer one kAvailable)-->
//       kUnloading --(its last batch done)--> kEnd
//                                        \--error--> kFailed (tried again if its files change)
#ifndef PSTRAIN_SERVING_PREDICTION_SERVER_MODELS_H_
#define PSTRAIN_SERVING_PREDICTION_SERVER_MODELS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "serving/model_follower.h"
#include "serving/prediction_server_batcher.h"
#include "serving/predictor.h"

namespace pstrain {

struct ModelVersionsOptions {
  // The base directory holding the version directories. Required.
  std::string base;
  // How each version is loaded (its row cache: default 256 MiB).
  PredictorOptions predictor;
  // How often the watcher looks for a newer version. Zero or less: no watcher (CheckNow only).
  // Default 1 s.
  absl::Duration poll_period = absl::Seconds(1);
  // The training job's checkpoint directory, to follow (serving/model_follower.h): each poll,
  // the version served is brought up to the job's newest checkpoint, as a new instance of the same
  // version number (its manifest's step and checkpoint are the checkpoint's). A newer exported
  // version replaces it as always, and is followed from its own checkpoint. Default "": none.
  std::string follow_checkpoints;
};

enum class VersionState { kLoading, kAvailable, kUnloading, kEnd, kFailed };
// "LOADING", "AVAILABLE", "UNLOADING", "END", "FAILED" (TF Serving's names).
const char* VersionStateName(VersionState state);

struct VersionStatus {
  int64_t version = 0;
  VersionState state = VersionState::kLoading;
  absl::Status error;  // kFailed: why
};

// One loaded version: a Predictor over <base>/<version>. Thread-safe.
class LoadedVersion final : public ServableModel {
 public:
  LoadedVersion(int64_t version, std::string dir, std::unique_ptr<Predictor> predictor)
      : version_(version), dir_(std::move(dir)), predictor_(std::move(predictor)) {}

  int64_t version() const override { return version_; }
  const std::vector<std::string>& columns() const override { return predictor_->columns(); }
  const std::vector<std::string>& outputs() const override { return predictor_->outputs(); }
  absl::Status Predict(const RawExamples& examples, std::vector<float>* out) const override {
    return predictor_->Predict(examples, out);
  }
  const std::string& dir() const { return dir_; }
  const ModelManifest& manifest() const { return predictor_->manifest(); }
  const Predictor& predictor() const { return *predictor_; }

 private:
  const int64_t version_;
  const std::string dir_;
  const std::unique_ptr<Predictor> predictor_;
};

// Thread-safe. The destructor stops the watcher (a load in progress finishes first).
class ModelVersions {
 public:
  // Loads the newest complete version that loads, and starts the watcher. Errors: kNotFound for a
  // base directory that isn't there or holds no complete version; when none loads, the newest
  // one's error (e.g. kDataLoss naming the file), saying so.
  static absl::StatusOr<std::unique_ptr<ModelVersions>> Start(const ModelVersionsOptions& options);
  virtual ~ModelVersions() = default;

  // The version new requests go to; never null.
  virtual std::shared_ptr<const LoadedVersion> Current() const = 0;
  // Current() as the batcher's source (valid while this object lives).
  ModelSource Source() const {
    return [this] { return std::shared_ptr<const ServableModel>(Current()); };
  }

  // Every version seen since the start, newest first.
  virtual std::vector<VersionStatus> Versions() const = 0;

  // Looks for a newer complete version now (as the watcher does each period) and switches to it
  // once it has loaded. Returns the version served after.
  virtual int64_t CheckNow() = 0;

  // Waits until `version` or a newer one is served, at most `timeout`. Returns whether it is.
  virtual bool WaitForVersion(int64_t version, absl::Duration timeout) const = 0;

  // With follow_checkpoints: how the version served follows them (its follower's figures; a new
  // export starts them afresh). Without: step and checkpoint are the export's, the rest zero.
  virtual FollowStats Following() const = 0;
};

// The version numbers under `base` (its subdirectories named by a whole number, complete or not),
// newest first. Errors: kNotFound naming `base` when it is not a directory that can be read.
absl::StatusOr<std::vector<int64_t>> ListVersionDirs(const std::string& base);

}  // namespace pstrain

#endif  // PSTRAIN_SERVING_PREDICTION_SERVER_MODELS_H_
