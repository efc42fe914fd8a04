#include "models/tabular/tabular_lookup.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace tabular {

std::string TableName(const char* base, int64_t min_count) {
  return min_count == 0 ? std::string(base) : absl::StrCat(base, "_min", min_count);
}
std::string DeepWeightName(int l) { return absl::StrCat("tabular/deep/w", l + 1); }
std::string DeepBiasName(int l) { return absl::StrCat("tabular/deep/b", l + 1); }

int Outputs(const Spec& spec, const Stats& stats) {
  return spec.label.task == Task::kMulticlass ? static_cast<int>(stats.classes.size()) : 1;
}

std::vector<float> PriorLogits(Task task, const Stats& stats) {
  switch (task) {
    case Task::kBinary: {
      const double p = std::clamp(stats.label_mean, 1e-6, 1 - 1e-6);
      return {static_cast<float>(std::log(p / (1 - p)))};
    }
    case Task::kRegression:
      return {0.0f};  // the standardized mean
    case Task::kMulticlass: {
      std::vector<float> out;
      for (double r : stats.class_rates)
        out.push_back(static_cast<float>(std::log(std::max(r, 1e-9))));
      return out;
    }
  }
  return {0.0f};
}

TableGroups GroupTables(const Spec& spec, const ExampleLayout& layout) {
  TableGroups t;
  for (int f : layout.embedded) {
    const int64_t mc = spec.features[f].min_count;
    auto it = std::find(t.min_counts.begin(), t.min_counts.end(), mc);
    const int g = static_cast<int>(it - t.min_counts.begin());
    if (it == t.min_counts.end()) t.min_counts.push_back(mc);
    for (int s = 0; s < layout.slots[f]; ++s) t.slot_group.push_back(g);
  }
  return t;
}

TabularLookup::TabularLookup(const Spec& spec, const ExampleLayout& layout, const NetShape& shape,
                             const Stats& stats)
    : layout_(layout), shape_(shape), stats_(stats), groups_(GroupTables(spec, layout)) {}

absl::Status TabularLookup::Pull(PsConnection* ps, Batch& b, int64_t step, LookupMode mode,
                                 Pulled* p) const {
  DedupeKeys(b, p);
  LookupBatch lookup;
  lookup.set_step(step);
  RETURN_IF_ERROR(AddTableLookups(ps, mode, &lookup, p));
  RETURN_IF_ERROR(AddWeightLookups(ps, &lookup, p));
  RETURN_IF_ERROR(lookup.Run());
  PointNet(b, p);
  return absl::OkStatus();
}

absl::Status TabularLookup::PullTables(PsConnection* ps, const Batch& b, int64_t step,
                                       LookupMode mode, Pulled* p) const {
  DedupeKeys(b, p);
  LookupBatch lookup;
  lookup.set_step(step);
  RETURN_IF_ERROR(AddTableLookups(ps, mode, &lookup, p));
  return lookup.Run();
}

absl::Status TabularLookup::PullWeights(PsConnection* ps, const Batch& b, int64_t step,
                                        Pulled* p, DenseCache* cache) const {
  LookupBatch lookup;
  lookup.set_step(step);
  RETURN_IF_ERROR(AddWeightLookups(ps, &lookup, p, cache));
  RETURN_IF_ERROR(lookup.Run());
  PointNet(b, p);
  return absl::OkStatus();
}

void TabularLookup::DedupeKeys(const Batch& b, Pulled* p) const {
  const int S = layout_.num_slots;
  const size_t groups = groups_.min_counts.size();
  std::vector<absl::flat_hash_map<int64_t, int32_t>> index(groups);
  p->keys.assign(groups, {});
  p->slot_rows.assign(b.n * S, -1);
  std::vector<int32_t> local(b.n * S, -1);
  for (int64_t i = 0; i < b.n; ++i) {
    for (int s = 0; s < S; ++s) {
      const int64_t key = b.keys[i * S + s];
      if (key == kNoKey) continue;
      const int g = groups_.slot_group[s];
      auto [it, inserted] = index[g].try_emplace(key, static_cast<int32_t>(p->keys[g].size()));
      if (inserted) p->keys[g].push_back(key);
      local[i * S + s] = it->second;
    }
  }
  p->offset.assign(groups, 0);
  p->num_unique = 0;
  for (size_t g = 0; g < groups; ++g) {
    p->offset[g] = p->num_unique;
    p->num_unique += static_cast<int64_t>(p->keys[g].size());
  }
  for (int64_t i = 0; i < b.n * S; ++i) {
    if (local[i] >= 0) {
      p->slot_rows[i] = static_cast<int32_t>(p->offset[groups_.slot_group[i % S]] + local[i]);
    }
  }
}

absl::Status TabularLookup::AddTableLookups(PsConnection* ps, LookupMode mode,
                                            LookupBatch* lookup, Pulled* p) const {
  const int64_t d = shape_.dim, K = shape_.outputs;
  auto out = [](std::vector<float>& v, int64_t at) {
    return reinterpret_cast<char*>(v.data() + at);
  };
  p->emb.assign(shape_.deep ? p->num_unique * d : 0, 0.0f);
  p->wide.assign(shape_.wide ? p->num_unique * K : 0, 0.0f);
  p->base.assign(shape_.baseline ? p->num_unique * K : 0, 0.0f);
  p->emb_t.clear();
  p->wide_t.clear();
  p->base_t.clear();
  for (size_t g = 0; g < groups_.min_counts.size(); ++g) {
    const int64_t mc = groups_.min_counts[g];
    if (shape_.deep) {
      ASSIGN_OR_RETURN(DynamicTable t, ps->Table(TableName(kEmbeddingTables, mc)));
      p->emb_t.push_back(t);
      if (!p->keys[g].empty()) {
        RETURN_IF_ERROR(
            lookup->Add(p->emb_t.back(), p->keys[g], out(p->emb, p->offset[g] * d), mode));
      }
    }
    if (shape_.wide) {
      ASSIGN_OR_RETURN(DynamicTable t, ps->Table(TableName(kWideTables, mc)));
      p->wide_t.push_back(t);
      if (!p->keys[g].empty()) {
        RETURN_IF_ERROR(
            lookup->Add(p->wide_t.back(), p->keys[g], out(p->wide, p->offset[g] * K), mode));
      }
    }
    if (shape_.baseline) {
      ASSIGN_OR_RETURN(DynamicTable t, ps->Table(TableName(kBaselineTables, mc)));
      p->base_t.push_back(t);
      if (!p->keys[g].empty()) {
        RETURN_IF_ERROR(
            lookup->Add(p->base_t.back(), p->keys[g], out(p->base, p->offset[g] * K), mode));
      }
    }
  }
  return absl::OkStatus();
}

// Every row of each weight.
absl::Status TabularLookup::AddWeightLookups(PsConnection* ps, LookupBatch* lookup,
                                             Pulled* p, DenseCache* cache) const {
  static const std::vector<int64_t>* const kRowIds = [] {
    auto* ids = new std::vector<int64_t>(1 << 20);
    std::iota(ids->begin(), ids->end(), 0);
    return ids;
  }();
  auto dense = [&](const std::string& name, std::vector<float>* values,
                   std::optional<ShardedVariable>* handle) -> absl::Status {
    ASSIGN_OR_RETURN(ShardedVariable v, ps->Variable(name));
    *handle = v;
    const int64_t rows = v.num_rows();
    if (rows > static_cast<int64_t>(kRowIds->size())) {
      return absl::InvalidArgumentError(absl::StrCat(name, " has over 2^20 rows"));
    }
    values->assign(rows * (v.row_bytes() / 4), 0.0f);
    char* out = reinterpret_cast<char*>(values->data());
    if (cache != nullptr && cache->Read(v, out)) return absl::OkStatus();
    return lookup->Add(**handle, absl::MakeConstSpan(kRowIds->data(), rows), out);
  };
  const std::vector<int64_t> widths = shape_.widths();
  const int layers = static_cast<int>(widths.size()) - 1;
  p->w.assign(shape_.deep ? layers : 0, {});
  p->b.assign(shape_.deep ? layers : 0, {});
  p->w_v.clear();
  p->b_v.clear();
  if (shape_.deep) {
    for (int l = 0; l < layers; ++l) {
      std::optional<ShardedVariable> w, bias;
      RETURN_IF_ERROR(dense(DeepWeightName(l), &p->w[l], &w));
      RETURN_IF_ERROR(dense(DeepBiasName(l), &p->b[l], &bias));
      p->w_v.push_back(*w);
      p->b_v.push_back(*bias);
    }
  }
  if (shape_.wide) {
    if (shape_.dense > 0) RETURN_IF_ERROR(dense(kWideDense, &p->wide_dense, &p->wide_dense_v));
    RETURN_IF_ERROR(dense(kWideBias, &p->wide_bias, &p->wide_bias_v));
  }
  if (shape_.baseline) {
    if (shape_.dense > 0) RETURN_IF_ERROR(dense(kBaseDense, &p->base_dense, &p->base_dense_v));
    RETURN_IF_ERROR(dense(kBaseBias, &p->base_bias, &p->base_bias_v));
  }
  return absl::OkStatus();
}

// The net's view. Regression learns the standardized target.
void TabularLookup::PointNet(const Batch& b, Pulled* p) const {
  p->labels = b.labels;
  if (shape_.task == Task::kRegression) {
    const double sd = stats_.label_stddev > 0 ? stats_.label_stddev : 1;
    for (float& y : p->labels) y = static_cast<float>((y - stats_.label_mean) / sd);
  }
  NetBatch& nb = p->batch;
  nb.n = b.n;
  nb.num_unique = p->num_unique;
  nb.slot_rows = p->slot_rows.data();
  nb.emb = p->emb.data();
  nb.wide = p->wide.data();
  nb.base = p->base.data();
  nb.dense = b.dense.data();
  nb.labels = p->labels.data();
  NetParams& np = p->params;
  np.w.clear();
  np.b.clear();
  for (int l = 0; l < static_cast<int>(p->w.size()); ++l) {
    np.w.push_back(p->w[l].data());
    np.b.push_back(p->b[l].data());
  }
  np.wide_dense = p->wide_dense.data();
  np.wide_bias = p->wide_bias.data();
  np.base_dense = p->base_dense.data();
  np.base_bias = p->base_bias.data();
}

}  // namespace tabular
}  // namespace pstrain
