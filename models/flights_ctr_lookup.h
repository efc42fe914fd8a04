// What flights_ctr's training step, its evaluation and its serving head share (the model:
// flights_ctr.h): the names of its variables, how flights become table rows (CtrKeying), the
// variables as found on the ps tasks (FindCtrVariables), and the pull of a batch's rows and of
// every dense weight in one lookup request per ps task (PullCtrBatch).
//
// CtrKeying is immutable; the functions are stateless (thread-safe on different CtrPulled).
#ifndef PSTRAIN_MODELS_FLIGHTS_CTR_LOOKUP_H_
#define PSTRAIN_MODELS_FLIGHTS_CTR_LOOKUP_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/ctr_net.h"
#include "models/flights_data.h"
#include "ps/dense_cache.h"
#include "ps/sharded_variable.h"
#include "worker/device/device.h"
#include "worker/ps_connection.h"

namespace pstrain {

// Variable names.
inline constexpr char kCtrEmbedding[] = "ctr/embedding";
inline constexpr char kCtrLrWeights[] = "ctr/lr_weights";
inline constexpr char kCtrW1[] = "ctr/w1";
inline constexpr char kCtrB1[] = "ctr/b1";
inline constexpr char kCtrW2[] = "ctr/w2";
inline constexpr char kCtrB2[] = "ctr/b2";
inline constexpr char kCtrLrBias[] = "ctr/lr_bias";

// How flights become table rows and what the net looks like. Immutable.
class CtrKeying {
 public:
  CtrKeying(std::vector<int> features, int64_t hash_rows, bool dynamic, CtrNetShape shape);

  const std::vector<int>& features() const { return features_; }
  int64_t hash_rows() const { return hash_rows_; }
  // embedding=dynamic: the tables take the features' 64-bit keys.
  bool dynamic() const { return dynamic_; }
  // The rows' ids: 64-bit keys (dynamic) or hashed rows.
  void Ids(absl::Span<const Flight> flights, absl::Span<const int64_t> rows, int64_t* out) const;
  const CtrNetShape& shape() const { return shape_; }
  // 0, 1, 2, ...: the row ids of a whole dense variable.
  absl::Span<const int64_t> DenseIds(int64_t rows) const {
    return absl::MakeConstSpan(dense_ids_.data(), static_cast<size_t>(rows));
  }

 private:
  const std::vector<int> features_;
  const int64_t hash_rows_;
  const bool dynamic_;
  const CtrNetShape shape_;
  std::vector<int64_t> dense_ids_;
};

// The model's variables, found by name on the ps tasks: the two tables as fixed (hashed) variables
// or dynamic tables, and the dense weights.
struct CtrVariables {
  std::optional<ShardedVariable> emb, lr;
  std::optional<DynamicTable> emb_table, lr_table;
  ShardedVariable w1, b1, w2, b2, lr_bias;
};

// Errors: kNotFound for a variable or table not created (yet).
absl::StatusOr<CtrVariables> FindCtrVariables(PsConnection* ps, bool dynamic);

// The dense weights as pulled for one step.
struct CtrDenseWeights {
  std::vector<float> w1, b1, w2, b2, lr_bias;
  CtrDenseParams params() const {
    return {w1.data(), b1.data(), w2.data(), b2.data(), lr_bias.data()};
  }
};

// One batch's inputs: its flights' hashed rows deduplicated, and what the ps tasks hold for them.
struct CtrPulled {
  std::vector<int64_t> ids;     // [n, features]
  std::vector<int64_t> unique;  // the first num_unique entries are the distinct ids
  std::vector<int32_t> index;   // [n, features] into unique
  int64_t num_unique = 0;
  std::vector<float> emb, lr, labels;
  CtrDenseWeights dense;
  CtrBatch batch() const {
    return {static_cast<int64_t>(labels.size()), num_unique, index.data(), emb.data(), lr.data(),
            labels.data()};
  }
};

// Keys (or hashes) and dedupes flights[rows], then pulls their rows and every dense weight: one
// lookup request per ps. `step`: the global step of a training pull (dynamic tables store the keys
// they lack then), 0 for evaluation. The ids are deduplicated on `host` (a CPU device), where the
// pull needs them. Errors: the ps tasks' and the device's.
absl::Status PullCtrBatch(const CtrVariables& v, const CtrKeying& keying, Device* host,
                          absl::Span<const Flight> flights, absl::Span<const int64_t> rows,
                          int64_t step, CtrPulled* p);

// PullCtrBatch in two halves, for a training step that takes its turn at the dense part between
// them (worker/dense_turns.h): the flights' table rows, then the dense weights. Errors: as above.
absl::Status PullCtrRows(const CtrVariables& v, const CtrKeying& keying, Device* host,
                         absl::Span<const Flight> flights, absl::Span<const int64_t> rows,
                         int64_t step, CtrPulled* p);
// `step` goes with the weights' lookup (the ps notes a training read's step: ps/staleness.h);
// weights `cache` (may be null) holds come from it instead (ps/dense_cache.h).
absl::Status PullCtrWeights(const CtrVariables& v, const CtrKeying& keying, int64_t step,
                            CtrPulled* p, DenseCache* cache = nullptr);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_FLIGHTS_CTR_LOOKUP_H_
