// What the tabular model's training step, its evaluation and its serving head share (the model:
// tabular_model.h): the names of its tables and weights on the ps tasks, its outputs and prior,
// its table sets, and the pull of a batch: its keys deduplicated per table set, every row and
// weight in one lookup request per ps task, and the net's view of them (tabular_net.h).
//
// The functions are stateless; a TabularLookup is immutable and thread-safe.
#ifndef PSTRAIN_MODELS_TABULAR_TABULAR_LOOKUP_H_
#define PSTRAIN_MODELS_TABULAR_TABULAR_LOOKUP_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "models/tabular/example_stream.h"
#include "models/tabular/feature_spec.h"
#include "models/tabular/tabular_net.h"
#include "models/tabular/transforms.h"
#include "ps/dense_cache.h"
#include "ps/sharded_variable.h"
#include "worker/ps_connection.h"

namespace pstrain {
namespace tabular {

// The tables: one set per distinct min_count (admission is a table's), each named by its base and
// the min_count: "tabular/embedding", "tabular/embedding_min5".
inline constexpr char kEmbeddingTables[] = "tabular/embedding";
inline constexpr char kWideTables[] = "tabular/wide";
inline constexpr char kBaselineTables[] = "tabular/baseline";
std::string TableName(const char* base, int64_t min_count);
// The weights: the deep part's per layer (0-based l: "tabular/deep/w<l+1>", ".../b<l+1>"), the
// wide part's and the baseline's.
std::string DeepWeightName(int l);
std::string DeepBiasName(int l);
inline constexpr char kWideDense[] = "tabular/wide/dense";
inline constexpr char kWideBias[] = "tabular/wide/bias";
inline constexpr char kBaseDense[] = "tabular/baseline/dense";
inline constexpr char kBaseBias[] = "tabular/baseline/bias";

// The outputs per example: one, or one per class.
int Outputs(const Spec& spec, const Stats& stats);

// The prior's logits: what always predicting the training split's label distribution scores.
std::vector<float> PriorLogits(Task task, const Stats& stats);

// The table sets: one per distinct min_count of the embedded features, in the order the layout
// first meets them; and each slot's set.
struct TableGroups {
  std::vector<int64_t> min_counts;  // of each set
  std::vector<int> slot_group;      // per slot
};
TableGroups GroupTables(const Spec& spec, const ExampleLayout& layout);

// One step's rows and weights, pulled from the ps tasks, and the handles to push to.
struct Pulled {
  std::vector<int32_t> slot_rows;
  std::vector<std::vector<int64_t>> keys;  // per table set, its distinct keys
  std::vector<int64_t> offset;             // per table set, its first row
  int64_t num_unique = 0;
  std::vector<float> emb, wide, base, labels;
  std::vector<std::vector<float>> w, b;
  std::vector<float> wide_dense, wide_bias, base_dense, base_bias;
  std::vector<DynamicTable> emb_t, wide_t, base_t;  // per table set
  std::vector<ShardedVariable> w_v, b_v;
  std::optional<ShardedVariable> wide_dense_v, wide_bias_v, base_dense_v, base_bias_v;
  NetBatch batch;
  NetParams params;
};

// The pull of a batch, for a worker's dataset or a serving head. Immutable; thread-safe.
class TabularLookup {
 public:
  // `layout` and `stats` must outlive the lookup.
  TabularLookup(const Spec& spec, const ExampleLayout& layout, const NetShape& shape,
                const Stats& stats);

  const TableGroups& groups() const { return groups_; }

  // Deduplicates the batch's keys, pulls every row and weight in one lookup request per ps, and
  // points the net's batch and params at them. `step` (1-based; 0 for evaluation) goes with it.
  // Errors: the ps tasks' (kNotFound for a table or weight not created), kInvalidArgument for a
  // weight of over 2^20 rows.
  absl::Status Pull(PsConnection* ps, Batch& b, int64_t step, LookupMode mode, Pulled* p) const;

  // Pull in two halves, for a training step that takes its turn at the dense part between them
  // (worker/dense_turns.h): the batch's table rows, then the weights (which also points the
  // net's batch and params at what came back), each from `cache` (may be null) where it holds
  // them, else from the ps. Errors: as Pull's.
  absl::Status PullTables(PsConnection* ps, const Batch& b, int64_t step, LookupMode mode,
                          Pulled* p) const;
  absl::Status PullWeights(PsConnection* ps, const Batch& b, int64_t step, Pulled* p,
                           DenseCache* cache = nullptr) const;

 private:
  // Pull's steps: the keys of each table set and each slot's row; the tables' lookups; the
  // weights' lookups; the net's view of what came back.
  void DedupeKeys(const Batch& b, Pulled* p) const;
  absl::Status AddTableLookups(PsConnection* ps, LookupMode mode, LookupBatch* lookup,
                               Pulled* p) const;
  absl::Status AddWeightLookups(PsConnection* ps, LookupBatch* lookup, Pulled* p,
                                DenseCache* cache = nullptr) const;
  void PointNet(const Batch& b, Pulled* p) const;

  const ExampleLayout& layout_;
  const NetShape shape_;
  const Stats& stats_;
  const TableGroups groups_;
};

}  // namespace tabular
}  // namespace pstrain

#endif  // PSTRAIN_MODELS_TABULAR_TABULAR_LOOKUP_H_
