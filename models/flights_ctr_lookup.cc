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

absl::Status PullCtrBatch(const CtrVariables& v, const CtrKeying& keying, Device* host,
                          absl::Span<const Flight> flights, absl::Span<const int64_t> rows,
                          int64_t step, CtrPulled* p) {
  const int64_t n = static_cast<int64_t>(rows.size());
  const CtrNetShape& shape = keying.shape();
  const int64_t f = shape.features;
  p->ids.resize(n * f);
  keying.Ids(flights, rows, p->ids.data());
  p->labels.resize(n);
  for (int64_t i = 0; i < n; ++i) p->labels[i] = flights[rows[i]].label;
  p->unique.resize(n * f);
  p->index.resize(n * f);
  ASSIGN_OR_RETURN(p->num_unique,
                   host->Unique(n * f, p->ids.data(), p->unique.data(), p->index.data()));
  const auto unique = absl::MakeConstSpan(p->unique.data(), static_cast<size_t>(p->num_unique));
  p->emb.resize(p->num_unique * shape.dim);
  p->lr.resize(p->num_unique);
  CtrDenseWeights& d = p->dense;
  d.w1.resize(shape.w1_size());
  d.b1.resize(shape.hidden);
  d.w2.resize(shape.hidden);
  d.b2.resize(1);
  d.lr_bias.resize(1);
  auto out = [](std::vector<float>& x) { return reinterpret_cast<char*>(x.data()); };
  LookupBatch lookup;
  if (v.emb_table.has_value()) {
    const LookupMode mode = step > 0 ? LookupMode::kTrain : LookupMode::kEval;
    lookup.set_step(step);
    RETURN_IF_ERROR(lookup.Add(*v.emb_table, unique, out(p->emb), mode));
    RETURN_IF_ERROR(lookup.Add(*v.lr_table, unique, out(p->lr), mode));
  } else {
    RETURN_IF_ERROR(lookup.Add(*v.emb, unique, out(p->emb)));
    RETURN_IF_ERROR(lookup.Add(*v.lr, unique, out(p->lr)));
  }
  RETURN_IF_ERROR(lookup.Add(v.w1, keying.DenseIds(shape.input()), out(d.w1)));
  RETURN_IF_ERROR(lookup.Add(v.b1, keying.DenseIds(1), out(d.b1)));
  RETURN_IF_ERROR(lookup.Add(v.w2, keying.DenseIds(shape.hidden), out(d.w2)));
  RETURN_IF_ERROR(lookup.Add(v.b2, keying.DenseIds(1), out(d.b2)));
  RETURN_IF_ERROR(lookup.Add(v.lr_bias, keying.DenseIds(1), out(d.lr_bias)));
  return lookup.Run();
}

}  // namespace pstrain
