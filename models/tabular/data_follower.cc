#include "models/tabular/data_follower.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/json_parse.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace pstrain {
namespace tabular {

DataFollower::DataFollower(const Spec& spec, Options options, std::shared_ptr<SplitLedger> ledger)
    : spec_(spec), options_(std::move(options)), ledger_(std::move(ledger)) {}

absl::Status DataFollower::Take(const std::string& path) {
  FileInfo file;
  file.path = path;
  const int number = options_.first_number + static_cast<int>(followed_.size());
  int64_t bad = 0;
  ASSIGN_OR_RETURN(std::vector<Range> ranges,
                   ScanArrival(spec_, options_.scan, number, &file, &bad));
  std::vector<int64_t> rows;
  std::vector<std::string> descriptors;
  for (const Range& r : ranges) {
    rows.push_back(r.train_rows);
    descriptors.push_back(FollowedSplitDescriptor(file, r));
  }
  RETURN_IF_ERROR(ledger_->Append(rows, descriptors));
  followed_.push_back(path);
  files_.fetch_add(1);
  rows_.fetch_add(file.train_rows);
  bad_rows_.fetch_add(bad);
  return absl::OkStatus();
}

absl::Status DataFollower::Poll(bool now) {
  const absl::Time t = absl::Now();
  if (!now && t - last_poll_ < options_.poll) return absl::OkStatus();
  last_poll_ = t;
  absl::StatusOr<std::vector<std::string>> listed = ResolveFiles(options_.dir);
  if (!listed.ok()) {
    // An empty directory lists nothing: not an error while following.
    if (absl::IsNotFound(listed.status())) return absl::OkStatus();
    return listed.status();
  }
  // (A copy: Take appends to followed_.)
  const std::string last = followed_.empty() ? options_.first_file : followed_.back();
  for (const std::string& path : *listed) {
    if (path <= last) {
      if (path != options_.first_file && path < last && out_of_order_.insert(path).second &&
          !std::binary_search(followed_.begin(), followed_.end(), path)) {
        LOG(WARNING) << "following " << options_.dir << ": " << path
                     << " sorts before files already read (" << last
                     << "); it is not read (name files in arrival order)";
      }
      continue;
    }
    RETURN_IF_ERROR(Take(path));
    LOG(INFO) << "following " << options_.dir << ": read " << path;
  }
  return absl::OkStatus();
}

std::string DataFollower::State() const {
  nlohmann::json j;
  j["dir"] = options_.dir;
  j["first_file"] = options_.first_file;
  j["files"] = followed_;
  return j.dump();
}

absl::Status DataFollower::Restore(const std::string& state) {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("followed files' state: ", what));
  };
  absl::StatusOr<nlohmann::json> parsed = ParseJson(state);
  if (!parsed.ok()) return bad(std::string(parsed.status().message()));
  const nlohmann::json& j = *parsed;
  if (!j.is_object() || !j.value("files", nlohmann::json()).is_array() ||
      !j.value("first_file", nlohmann::json()).is_string()) {
    return bad("malformed");
  }
  if (j["first_file"].get<std::string>() != options_.first_file) {
    return bad(absl::StrCat("the checkpoint's job began with ", j["first_file"].get<std::string>(),
                            ", this one with ", options_.first_file,
                            " (another directory, or its first file changed)"));
  }
  if (!followed_.empty()) return absl::FailedPreconditionError("followed files: already following");
  for (const nlohmann::json& f : j["files"]) {
    if (!f.is_string()) return bad("malformed");
    RETURN_IF_ERROR(Take(f.get<std::string>()));
  }
  return absl::OkStatus();
}

}  // namespace tabular
}  // namespace pstrain
