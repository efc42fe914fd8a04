#include "models/tabular/tabular_model_serving.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_parse.h"
#include "common/status_macros.h"
#include "models/tabular/feature_spec.h"
#include "models/tabular/tabular_lookup.h"
#include "models/tabular/tabular_net.h"
#include "models/tabular/transforms.h"
#include "nlohmann/json.hpp"
#include "worker/device/replicas.h"

namespace pstrain {
namespace {

using tabular::Batch;
using tabular::ExampleLayout;
using tabular::NetOutput;
using tabular::NetShape;
using tabular::Outputs;
using tabular::Pulled;
using tabular::Spec;
using tabular::TabularLookup;
using tabular::TabularNet;
using tabular::Task;

// Predicts from raw rows: the training transforms (without the label), an evaluation lookup of
// every key (unseen keys read the default row), the net's forward pass on the CPU (its own
// one-replica group).
class TabularServingHead final : public ServingHead {
 public:
  static absl::StatusOr<std::unique_ptr<TabularServingHead>> Create(const nlohmann::json& j) {
    std::unique_ptr<TabularServingHead> h(new TabularServingHead);
    ASSIGN_OR_RETURN(h->spec_, tabular::ParseSpec(j["spec"].get<std::string>(),
                                                  j["spec_path"].get<std::string>()));
    h->spec_.model.embedding_dim = j.value("embedding_dim", h->spec_.model.embedding_dim);
    ASSIGN_OR_RETURN(h->stats_, tabular::Stats::FromJson(j["stats"], h->spec_.features.size()));
    h->transformer_ =
        std::make_unique<tabular::Transformer>(h->spec_, h->stats_, j.value("seed", uint64_t{1}));
    const ExampleLayout& layout = h->layout();
    h->shape_ = NetShape(h->spec_, layout, Outputs(h->spec_, h->stats_));
    h->lookup_ = std::make_unique<TabularLookup>(h->spec_, layout, h->shape_, h->stats_);
    ReplicaGroupOptions cpu;
    cpu.kind = DeviceOptions::Kind::kCpu;
    cpu.num_replicas = 1;
    ASSIGN_OR_RETURN(h->group_, ReplicaGroup::Create(cpu));
    h->device_ = h->group_->device(0);
    return h;
  }

  const ExampleLayout& layout() const { return transformer_->layout(); }

  std::vector<std::string> columns() const override {
    std::vector<std::string> out;
    for (const tabular::FeatureSpec& f : spec_.features) {
      if (f.type == tabular::FeatureType::kCross) continue;
      if (std::find(out.begin(), out.end(), f.column) == out.end()) out.push_back(f.column);
    }
    return out;
  }
  std::vector<std::string> outputs() const override {
    switch (shape_.task) {
      case Task::kBinary: return {"probability"};
      case Task::kRegression: return {"prediction"};
      case Task::kMulticlass: {
        std::vector<std::string> out;
        for (const std::string& c : stats_.classes) out.push_back("probability:" + c);
        return out;
      }
    }
    return {};
  }

  absl::Status Predict(const RawExamples& examples, PsConnection* ps,
                       std::vector<float>* out) const override {
    ASSIGN_OR_RETURN(
        tabular::ColumnMap columns,
        transformer_->MapColumns(examples.columns, "the request", /*with_label=*/false));
    const ExampleLayout& l = layout();
    const int64_t n = static_cast<int64_t>(examples.rows.size());
    out->clear();
    if (n == 0) return absl::OkStatus();
    Batch batch;
    batch.Resize(n, l);
    std::vector<absl::string_view> fields(examples.columns.size());
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<std::string>& row = examples.rows[i];
      for (size_t c = 0; c < fields.size(); ++c) {
        fields[c] = c < row.size() ? absl::string_view(row[c]) : absl::string_view();
      }
      absl::Status s = transformer_->Transform(fields, columns, /*training=*/false,
                                               /*row_hash=*/0, batch.At(i, l));
      if (!s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("tabular: row ", i, ": ", s.message()));
      }
    }
    Pulled p;
    RETURN_IF_ERROR(lookup_->Pull(ps, batch, /*step=*/0, LookupMode::kEval, &p));
    TabularNet net(device_, spec_, l, shape_);
    NetOutput result;
    RETURN_IF_ERROR(net.Run(p.batch, p.params, &result, nullptr));
    const int K = static_cast<int>(shape_.outputs);
    out->resize(n * K);
    const double sd = stats_.label_stddev > 0 ? stats_.label_stddev : 1;
    for (int64_t i = 0; i < n; ++i) {
      const float* z = result.logits.data() + i * K;
      float* o = out->data() + i * K;
      switch (shape_.task) {
        case Task::kBinary:
          o[0] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(z[0]))));
          break;
        case Task::kRegression:
          o[0] = static_cast<float>(z[0] * sd + stats_.label_mean);
          break;
        case Task::kMulticlass: {
          const float top = *std::max_element(z, z + K);
          double sum = 0;
          for (int k = 0; k < K; ++k) sum += std::exp(static_cast<double>(z[k] - top));
          for (int k = 0; k < K; ++k) {
            o[k] = static_cast<float>(std::exp(static_cast<double>(z[k] - top)) / sum);
          }
          break;
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  TabularServingHead() = default;
  Spec spec_;
  tabular::Stats stats_;
  std::unique_ptr<tabular::Transformer> transformer_;
  NetShape shape_;
  std::unique_ptr<const TabularLookup> lookup_;
  std::unique_ptr<ReplicaGroup> group_;
  Device* device_ = nullptr;  // group_'s
};

}  // namespace

absl::StatusOr<std::unique_ptr<ServingHead>> CreateTabularServingHead(
    const std::string& serving_config) {
  absl::StatusOr<nlohmann::json> j = ParseJson(serving_config);
  if (!j.ok() || !j->is_object() || !j->value("spec", nlohmann::json()).is_string() ||
      !j->value("spec_path", nlohmann::json()).is_string() || !j->contains("stats")) {
    return absl::InvalidArgumentError(
        "tabular serving config: expected spec, spec_path and stats");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TabularServingHead> head, TabularServingHead::Create(*j));
  return std::unique_ptr<ServingHead>(std::move(head));
}

}  // namespace pstrain
