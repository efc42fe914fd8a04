#include "models/flights_ctr_serving.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_parse.h"
#include "common/status_macros.h"
#include "models/ctr_net.h"
#include "models/flights_ctr_lookup.h"
#include "models/flights_data.h"
#include "nlohmann/json.hpp"
#include "worker/device/replicas.h"

namespace pstrain {
namespace {

// Predicts from the flights' fields: the training step's keys and lookups (an evaluation lookup:
// unseen keys read the default row), its forward pass on one CPU replica (its own group).
class FlightsServingHead final : public ServingHead {
 public:
  FlightsServingHead(CtrKeying keying, std::vector<bool> known_days,
                     std::unique_ptr<ReplicaGroup> replicas)
      : keying_(std::move(keying)),
        known_days_(std::move(known_days)),
        replicas_(std::move(replicas)) {}

  std::vector<std::string> columns() const override {
    return {"date", "distance", "origin", "destination"};
  }
  std::vector<std::string> outputs() const override { return {"probability"}; }

  absl::Status Predict(const RawExamples& examples, PsConnection* ps,
                       std::vector<float>* out) const override {
    int at[4];
    const std::vector<std::string> wanted = columns();
    for (int c = 0; c < 4; ++c) {
      auto it = std::find(examples.columns.begin(), examples.columns.end(), wanted[c]);
      if (it == examples.columns.end()) {
        return absl::InvalidArgumentError(absl::StrCat("flights_ctr: no column ", wanted[c],
                                                       " (it needs date, distance, origin, "
                                                       "destination)"));
      }
      at[c] = static_cast<int>(it - examples.columns.begin());
    }
    const int64_t n = static_cast<int64_t>(examples.rows.size());
    std::vector<Flight> flights;
    flights.reserve(n);
    static const std::string kEmpty;
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<std::string>& row = examples.rows[i];
      auto field = [&](int c) -> const std::string& {
        return at[c] < static_cast<int>(row.size()) ? row[at[c]] : kEmpty;
      };
      absl::StatusOr<Flight> f = ParseFlight(field(0), field(1), field(2), field(3));
      if (!f.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("flights_ctr: row ", i, ": ", f.status().message()));
      }
      f->day_known = known_days_[f->day_of_year];
      flights.push_back(*f);
    }
    out->clear();
    if (n == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(CtrVariables v, FindCtrVariables(ps, keying_.dynamic()));
    std::vector<int64_t> rows(n);
    std::iota(rows.begin(), rows.end(), int64_t{0});
    CtrPulled p;
    RETURN_IF_ERROR(PullCtrBatch(v, keying_, replicas_->device(0), flights, rows, /*step=*/0, &p));
    std::vector<float> logits, lr_logits;
    RETURN_IF_ERROR(CtrReplicatedForward(replicas_.get(), keying_.shape(), p.batch(),
                                         p.dense.params(), &logits, &lr_logits));
    out->resize(n);
    for (int64_t i = 0; i < n; ++i) (*out)[i] = 1.0f / (1.0f + std::exp(-logits[i]));
    return absl::OkStatus();
  }

 private:
  const CtrKeying keying_;
  const std::vector<bool> known_days_;
  const std::unique_ptr<ReplicaGroup> replicas_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ServingHead>> CreateFlightsCtrServingHead(
    const std::string& serving_config) {
  auto bad = [](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("flights_ctr serving config: ", why));
  };
  absl::StatusOr<nlohmann::json> parsed = ParseJson(serving_config);
  if (!parsed.ok()) return bad(parsed.status().message());
  const nlohmann::json& j = *parsed;
  if (!j.is_object() || !j.value("features", nlohmann::json()).is_string() ||
      !j.value("dynamic", nlohmann::json()).is_boolean() ||
      !j.value("hash_rows", nlohmann::json()).is_number_integer() ||
      !j.value("dim", nlohmann::json()).is_number_integer() ||
      !j.value("hidden", nlohmann::json()).is_number_integer() ||
      !j.value("known_days", nlohmann::json()).is_array()) {
    return bad("expected features, dynamic, hash_rows, dim, hidden and known_days");
  }
  ASSIGN_OR_RETURN(std::vector<int> features,
                   ParseFlightFeatures(j["features"].get<std::string>()));
  CtrNetShape shape;
  shape.features = static_cast<int64_t>(features.size());
  shape.dim = j["dim"].get<int64_t>();
  shape.hidden = j["hidden"].get<int64_t>();
  const int64_t hash_rows = j["hash_rows"].get<int64_t>();
  if (shape.dim < 1 || shape.hidden < 1 || hash_rows < 1) {
    return bad("dim, hidden and hash_rows must be >= 1");
  }
  std::vector<bool> known(367);
  for (const nlohmann::json& d : j["known_days"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > 366) {
      return bad(absl::StrCat("known day ", d.dump(), " is not in [1, 366]"));
    }
    known[d.get<int64_t>()] = true;
  }
  ReplicaGroupOptions cpu;
  cpu.kind = DeviceOptions::Kind::kCpu;
  cpu.num_replicas = 1;
  ASSIGN_OR_RETURN(std::unique_ptr<ReplicaGroup> replicas, ReplicaGroup::Create(cpu));
  return std::unique_ptr<ServingHead>(new FlightsServingHead(
      CtrKeying(std::move(features), hash_rows, j["dynamic"].get<bool>(), shape), std::move(known),
      std::move(replicas)));
}

}  // namespace pstrain
