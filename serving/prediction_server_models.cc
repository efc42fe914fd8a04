#include "serving/prediction_server_models.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace pstrain {

const char* VersionStateName(VersionState state) {
  switch (state) {
    case VersionState::kLoading: return "LOADING";
    case VersionState::kAvailable: return "AVAILABLE";
    case VersionState::kUnloading: return "UNLOADING";
    case VersionState::kEnd: return "END";
    case VersionState::kFailed: return "FAILED";
  }
  return "UNKNOWN";
}

absl::StatusOr<std::vector<int64_t>> ListVersionDirs(const std::string& base) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::directory_iterator it(base, error);
  if (error) {
    return absl::NotFoundError(
        absl::StrCat("model base ", base, ": can't read the directory (", error.message(), ")"));
  }
  std::vector<int64_t> versions;
  for (; it != fs::directory_iterator(); it.increment(error)) {
    if (error) break;
    const std::string name = it->path().filename().string();
    if (name.empty() || name.size() > 18) continue;
    if (!std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isdigit(c); })) {
      continue;
    }
    std::error_code kind_error;
    if (!it->is_directory(kind_error) || kind_error) continue;
    int64_t v = 0;
    if (absl::SimpleAtoi(name, &v)) versions.push_back(v);
  }
  if (error) {
    return absl::NotFoundError(
        absl::StrCat("model base ", base, ": can't list the directory (", error.message(), ")"));
  }
  std::sort(versions.begin(), versions.end(), std::greater<int64_t>());
  versions.erase(std::unique(versions.begin(), versions.end()), versions.end());
  return versions;
}

namespace {

namespace fs = std::filesystem;

// What a version directory's files look like: their count, total size and newest time. A version
// that failed to load is tried again once this changes (a copy still in progress).
using Fingerprint = std::tuple<int64_t, int64_t, int64_t>;

Fingerprint FingerprintOf(const std::string& dir) {
  int64_t files = 0, bytes = 0, newest = 0;
  std::error_code error;
  fs::recursive_directory_iterator it(dir, error);
  for (; !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    std::error_code e;
    if (!it->is_regular_file(e) || e) continue;
    ++files;
    const uintmax_t size = it->file_size(e);
    if (!e) bytes += static_cast<int64_t>(size);
    const fs::file_time_type t = it->last_write_time(e);
    if (!e) newest = std::max<int64_t>(newest, t.time_since_epoch().count());
  }
  return {files, bytes, newest};
}

bool IsComplete(const std::string& dir) {
  std::error_code error;
  return fs::is_regular_file(fs::path(dir) / kModelManifestFile, error);
}

// Every version's state, shared with the loaded versions' deleters (which may run after the
// ModelVersions is gone, on whatever thread drops the last reference).
class StateBoard {
 public:
  void Set(int64_t version, VersionState state, absl::Status error = absl::OkStatus()) {
    absl::MutexLock lock(&mu_);
    VersionStatus& s = versions_[version];
    s.version = version;
    s.state = state;
    s.error = std::move(error);
  }
  std::vector<VersionStatus> All() const {
    absl::MutexLock lock(&mu_);
    std::vector<VersionStatus> out;
    for (const auto& [version, status] : versions_) out.push_back(status);
    return out;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<int64_t, VersionStatus, std::greater<int64_t>> versions_ ABSL_GUARDED_BY(mu_);
};

// Marks its version ended when freed.
class VersionToken {
 public:
  VersionToken(std::shared_ptr<StateBoard> board, int64_t version, std::string base)
      : board_(std::move(board)), version_(version), base_(std::move(base)) {}
  ~VersionToken() {
    board_->Set(version_, VersionState::kEnd);
    LOG(INFO) << "model base " << base_ << ": version " << version_ << " unloaded";
  }

 private:
  const std::shared_ptr<StateBoard> board_;
  const int64_t version_;
  const std::string base_;
};

class ModelVersionsImpl final : public ModelVersions {
 public:
  explicit ModelVersionsImpl(const ModelVersionsOptions& options)
      : options_(options), board_(std::make_shared<StateBoard>()) {}

  ~ModelVersionsImpl() override {
    {
      absl::MutexLock lock(&watch_mu_);
      stopping_ = true;
      watch_cv_.Signal();
    }
    if (watcher_.joinable()) watcher_.join();
  }

  absl::Status Init() {
    absl::StatusOr<std::vector<int64_t>> versions = ListVersionDirs(options_.base);
    if (!versions.ok()) return versions.status();
    absl::Status newest_error;
    int64_t newest = -1;
    {
      absl::MutexLock check(&check_mu_);
      for (int64_t v : *versions) {
        const std::string dir = DirOf(v);
        if (!IsComplete(dir)) continue;
        if (newest < 0) newest = v;
        absl::Status s = LoadLocked(v, dir);
        if (s.ok()) break;
        if (newest_error.ok()) newest_error = s;
      }
    }
    if (newest < 0) {
      return absl::NotFoundError(absl::StrCat(
          "model base ", options_.base, ": no complete version (expected ", options_.base,
          "/<version>/", kModelManifestFile, ", as serving/export writes)"));
    }
    if (Current() == nullptr) {
      return absl::Status(newest_error.code(),
                          absl::StrCat("model base ", options_.base, ": no version loads; version ",
                                       newest, ": ", newest_error.message()));
    }
    if (options_.poll_period > absl::ZeroDuration()) {
      watcher_ = std::thread([this] { Watch(); });
    }
    return absl::OkStatus();
  }

  std::shared_ptr<const LoadedVersion> Current() const override {
    absl::MutexLock lock(&mu_);
    return current_;
  }

  std::vector<VersionStatus> Versions() const override { return board_->All(); }

  int64_t CheckNow() override {
    absl::MutexLock check(&check_mu_);
    const int64_t served = CheckVersionsLocked();
    if (follower_ != nullptr) FollowLocked();
    return served;
  }

  FollowStats Following() const override {
    absl::MutexLock check(&check_mu_);
    if (follower_ != nullptr) return follower_->stats();
    FollowStats stats;
    std::shared_ptr<const LoadedVersion> current = Current();
    stats.step = current->manifest().step;
    stats.checkpoint = current->manifest().checkpoint;
    return stats;
  }

 private:
  // CheckNow's look for a newer version directory; returns the version served after.
  int64_t CheckVersionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(check_mu_) {
    const int64_t served = ServedVersion();
    absl::StatusOr<std::vector<int64_t>> versions = ListVersionDirs(options_.base);
    if (!versions.ok()) {
      LOG(WARNING) << versions.status().message() << "; still serving version " << served;
      return served;
    }
    for (int64_t v : *versions) {
      if (v <= served) break;
      const std::string dir = DirOf(v);
      if (!IsComplete(dir)) continue;  // still being written
      auto failed = failed_.find(v);
      if (failed != failed_.end() && failed->second == FingerprintOf(dir)) continue;
      if (LoadLocked(v, dir).ok()) break;
    }
    return ServedVersion();
  }

  // The version served, brought up to the newest checkpoint its follower can apply.
  void FollowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(check_mu_) {
    absl::StatusOr<std::optional<std::shared_ptr<const ModelStore>>> store = follower_->Poll();
    if (!store.ok()) {
      if (absl::Now() - last_follow_warning_ >= absl::Minutes(1)) {  // each poll would repeat it
        last_follow_warning_ = absl::Now();
        LOG(WARNING) << "model base " << options_.base << ": following "
                     << options_.follow_checkpoints << ": " << store.status();
      }
      return;
    }
    if (!store->has_value()) return;
    absl::StatusOr<std::unique_ptr<Predictor>> predictor = Predictor::FromStore(**store);
    if (!predictor.ok()) {
      LOG(ERROR) << "model base " << options_.base << ": following " << options_.follow_checkpoints
                 << ": " << predictor.status();
      return;
    }
    std::shared_ptr<const LoadedVersion> current = Current();
    std::shared_ptr<VersionToken> token = token_;
    std::shared_ptr<const LoadedVersion> next(
        new LoadedVersion(current->version(), current->dir(), *std::move(predictor)),
        [token](const LoadedVersion* v) { delete v; });
    absl::MutexLock lock(&mu_);
    current_ = std::move(next);
  }

 public:
  bool WaitForVersion(int64_t version, absl::Duration timeout) const override {
    absl::MutexLock lock(&mu_);
    auto served = [this, version]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return current_ != nullptr && current_->version() >= version;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&served), timeout);
  }

 private:
  std::string DirOf(int64_t version) const {
    return (fs::path(options_.base) / std::to_string(version)).string();
  }

  int64_t ServedVersion() const {
    absl::MutexLock lock(&mu_);
    return current_ == nullptr ? -1 : current_->version();
  }

  // Loads `version` from `dir` and serves it (it is newer than the one served). On an error,
  // logs it and remembers the directory's fingerprint, and the served version goes on.
  absl::Status LoadLocked(int64_t version, const std::string& dir)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(check_mu_) {
    const int64_t served = ServedVersion();
    board_->Set(version, VersionState::kLoading);
    LOG(INFO) << "model base " << options_.base << ": loading version " << version;
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<Predictor>> predictor = Predictor::Load(dir, options_.predictor);
    if (!predictor.ok()) {
      failed_[version] = FingerprintOf(dir);
      LOG(ERROR) << "model base " << options_.base << ": version " << version
                 << " failed to load, skipped: " << predictor.status()
                 << (served >= 0 ? absl::StrCat("; still serving version ", served) : "");
      board_->Set(version, VersionState::kFailed, predictor.status());
      return predictor.status();
    }
    failed_.erase(version);
    // The instances of this version (the one loaded, then those following the training job's
    // checkpoints) share one token: the version ends when the last of them is freed.
    auto token = std::make_shared<VersionToken>(board_, version, options_.base);
    std::shared_ptr<const LoadedVersion> loaded(
        new LoadedVersion(version, dir, *std::move(predictor)),
        [token](const LoadedVersion* v) { delete v; });
    token_ = token;
    follower_.reset();
    if (!options_.follow_checkpoints.empty()) {
      follower_ = std::make_unique<ModelFollower>(loaded->predictor().store(),
                                                  options_.follow_checkpoints);
    }
    const std::string model = loaded->manifest().model;
    board_->Set(version, VersionState::kAvailable);
    std::shared_ptr<const LoadedVersion> old;
    {
      absl::MutexLock lock(&mu_);
      old = std::move(current_);
      current_ = std::move(loaded);
    }
    LOG(INFO) << "model base " << options_.base << ": serving version " << version << " ("
              << model << ", loaded in "
              << absl::FormatDuration(absl::Now() - start) << ")"
              << (old != nullptr ? absl::StrCat("; version ", old->version(),
                                                " unloads after its last batch")
                                 : "");
    if (old != nullptr) board_->Set(old->version(), VersionState::kUnloading);
    old.reset();  // the in-flight batches hold it until they are done
    return absl::OkStatus();
  }

  void Watch() {
    absl::MutexLock lock(&watch_mu_);
    absl::Time next = absl::Now() + options_.poll_period;
    while (!stopping_) {
      // Woken early only to stop (or spuriously: then wait on to the same time).
      if (!watch_cv_.WaitWithDeadline(&watch_mu_, next)) continue;
      if (stopping_) break;
      watch_mu_.Unlock();
      CheckNow();
      watch_mu_.Lock();
      next = absl::Now() + options_.poll_period;
    }
  }

  const ModelVersionsOptions options_;
  const std::shared_ptr<StateBoard> board_;
  std::thread watcher_;

  // Held while looking for and loading a version: one load at a time.
  mutable absl::Mutex check_mu_;
  std::map<int64_t, Fingerprint> failed_ ABSL_GUARDED_BY(check_mu_);
  // The version served: its token, and its follower (with follow_checkpoints).
  std::shared_ptr<VersionToken> token_ ABSL_GUARDED_BY(check_mu_);
  std::unique_ptr<ModelFollower> follower_ ABSL_GUARDED_BY(check_mu_);
  absl::Time last_follow_warning_ ABSL_GUARDED_BY(check_mu_) = absl::InfinitePast();

  mutable absl::Mutex mu_;
  // Below: guarded by mu_.
  std::shared_ptr<const LoadedVersion> current_ ABSL_GUARDED_BY(mu_);

  absl::Mutex watch_mu_;
  absl::CondVar watch_cv_;
  // Below: guarded by watch_mu_.
  bool stopping_ ABSL_GUARDED_BY(watch_mu_) = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ModelVersions>> ModelVersions::Start(
    const ModelVersionsOptions& options) {
  if (options.base.empty()) return absl::InvalidArgumentError("model base: empty path");
  auto versions = std::make_unique<ModelVersionsImpl>(options);
  absl::Status s = versions->Init();
  if (!s.ok()) return s;
  return std::unique_ptr<ModelVersions>(std::move(versions));
}

}  // namespace pstrain
