#include "models/flights_ctr_lookup.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "common/status_macros.h"

namespace pstrain {

CtrKeying::CtrKeying(std::vector<int> features, int64_t hash_rows, bool dynamic,
                     CtrNetShape shape)
    : features_(std::move(features)),
      hash_rows_(hash_rows),
      dynamic_(dynamic),
      shape_(shape),
      dense_ids_(std::max(shape.input(), shape.hidden)) {
  std::iota(dense_ids_.begin(), dense_ids_.end(), int64_t{0});
}

void CtrKeying::Ids(absl::Span<const Flight> flights, absl::Span<const int64_t> rows,
                    int64_t* out) const {
  if (dynamic_) {
    KeyFlights(flights, rows, features_, out);
  } else {
    HashFlights(flights, rows, features_, hash_rows_, out);
  }
}

absl::StatusOr<CtrVariables> FindCtrVariables(PsConnection* ps, bool dynamic) {
  ASSIGN_OR_RETURN(ShardedVariable w1, ps->Variable(kCtrW1));
  ASSIGN_OR_RETURN(ShardedVariable b1, ps->Variable(kCtrB1));
  ASSIGN_OR_RETURN(ShardedVariable w2, ps->Variable(kCtrW2));
  ASSIGN_OR_RETURN(ShardedVariable b2, ps->Variable(kCtrB2));
  ASSIGN_OR_RETURN(ShardedVariable lr_bias, ps->Variable(kCtrLrBias));
  CtrVariables v{std::nullopt, std::nullopt, std::nullopt, std::nullopt, w1, b1, w2, b2, lr_bias};
  if (dynamic) {
    ASSIGN_OR_RETURN(v.emb_table, ps->Table(kCtrEmbedding));
    ASSIGN_OR_RETURN(v.lr_table, ps->Table(kCtrLrWeights));
  } else {
    ASSIGN_OR_RETURN(v.emb, ps->Variable(kCtrEmbedding));
    ASSIGN_OR_RETURN(v.lr, ps->Variable(kCtrLrWeights));
  }
  return v;
}

namespace {

// Adds the rows of p->unique to `lookup` (sized in p).
absl::Status AddRows(const CtrVariables& v, const CtrKeying& keying, int64_t step, CtrPulled* p,
                     LookupBatch* lookup) {
  const auto unique = absl::MakeConstSpan(p->unique.data(), static_cast<size_t>(p->num_unique));
  p->emb.resize(p->num_unique * keying.shape().dim);
  p->lr.resize(p->num_unique);
  auto out = [](std::vector<float>& x) { return reinterpret_cast<char*>(x.data()); };
  if (v.emb_table.has_value()) {
    const LookupMode mode = step > 0 ? LookupMode::kTrain : LookupMode::kEval;
    lookup->set_step(step);
    RETURN_IF_ERROR(lookup->Add(*v.emb_table, unique, out(p->emb), mode));
    RETURN_IF_ERROR(lookup->Add(*v.lr_table, unique, out(p->lr), mode));
  } else {
    RETURN_IF_ERROR(lookup->Add(*v.emb, unique, out(p->emb)));
    RETURN_IF_ERROR(lookup->Add(*v.lr, unique, out(p->lr)));
  }
  return absl::OkStatus();
}

// Adds every dense weight to `lookup` (sized in p), but those `cache` (may be null) holds: they
// are copied from it.
absl::Status AddWeights(const CtrVariables& v, const CtrKeying& keying, CtrPulled* p,
                        LookupBatch* lookup, DenseCache* cache = nullptr) {
  const CtrNetShape& shape = keying.shape();
  CtrDenseWeights& d = p->dense;
  d.w1.resize(shape.w1_size());
  d.b1.resize(shape.hidden);
  d.w2.resize(shape.hidden);
  d.b2.resize(1);
  d.lr_bias.resize(1);
  auto add = [&](const ShardedVariable& var, std::vector<float>& x) {
    char* out = reinterpret_cast<char*>(x.data());
    if (cache != nullptr && cache->Read(var, out)) return absl::OkStatus();
    return lookup->Add(var, keying.DenseIds(var.num_rows()), out);
  };
  RETURN_IF_ERROR(add(v.w1, d.w1));
  RETURN_IF_ERROR(add(v.b1, d.b1));
  RETURN_IF_ERROR(add(v.w2, d.w2));
  RETURN_IF_ERROR(add(v.b2, d.b2));
  return add(v.lr_bias, d.lr_bias);
}

// Keys and dedupes flights[rows] into p.
absl::Status KeyRows(const CtrKeying& keying, Device* host, absl::Span<const Flight> flights,
                     absl::Span<const int64_t> rows, CtrPulled* p) {
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t f = keying.shape().features;
  p->ids.resize(n * f);
  keying.Ids(flights, rows, p->ids.data());
  p->labels.resize(n);
  for (int64_t i = 0; i < n; ++i) p->labels[i] = flights[rows[i]].label;
  p->unique.resize(n * f);
  p->index.resize(n * f);
  ASSIGN_OR_RETURN(p->num_unique,
                   host->Unique(n * f, p->ids.data(), p->unique.data(), p->index.data()));
  return absl::OkStatus();
}

}  // namespace

absl::Status PullCtrBatch(const CtrVariables& v, const CtrKeying& keying, Device* host,
                          absl::Span<const Flight> flights, absl::Span<const int64_t> rows,
                          int64_t step, CtrPulled* p) {
  RETURN_IF_ERROR(KeyRows(keying, host, flights, rows, p));
  LookupBatch lookup;
  RETURN_IF_ERROR(AddRows(v, keying, step, p, &lookup));
  RETURN_IF_ERROR(AddWeights(v, keying, p, &lookup));
  return lookup.Run();
}

absl::Status PullCtrRows(const CtrVariables& v, const CtrKeying& keying, Device* host,
                         absl::Span<const Flight> flights, absl::Span<const int64_t> rows,
                         int64_t step, CtrPulled* p) {
  RETURN_IF_ERROR(KeyRows(keying, host, flights, rows, p));
  LookupBatch lookup;
  RETURN_IF_ERROR(AddRows(v, keying, step, p, &lookup));
  return lookup.Run();
}

absl::Status PullCtrWeights(const CtrVariables& v, const CtrKeying& keying, int64_t step,
                            CtrPulled* p, DenseCache* cache) {
  LookupBatch lookup;
  lookup.set_step(step);
  RETURN_IF_ERROR(AddWeights(v, keying, p, &lookup, cache));
  return lookup.Run();
}

}  // namespace pstrain
