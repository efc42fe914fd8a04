// Flight delays as a click-through problem: will a flight arrive more than 15 minutes late?
// Categorical features and their crosses (models/flights_data.h: origin, destination, route, hour,
// weekday, day of year, distance bucket, origin x hour, ...) each give a 64-bit key per value
// (FeatureKey). With embedding=dynamic (the default) every key goes straight into ONE dynamic
// table "ctr/embedding" (rows made on first sight, no modulo, no collisions; ps/dynamic_shard.h),
// one shard per ps task; with embedding=hashed the keys are reduced onto [0, hash_rows) of a fixed
// table [hash_rows, dim], split over the ps tasks by a MinSize or MaxSize partitioner (collisions
// share a row). Either way a server-side Adagrad trains it. An example's feature rows are concatenated into a small MLP
// (features * dim -> hidden -> 1, ReLU; models/ctr_net.h), whose dense weights are ps variables
// too.
//
// Test flights are all in June, so their day_of_year values never occur in training: the feature
// maps them to an "unknown day" row, which 1 in 16 training flights also use, so the model has
// learned what an unknown day means (models/flights_data.h, unknown_day_fraction).
//
// The baseline is logistic regression on the same keys (or hashed rows): a 1-wide table
// "ctr/lr_weights" (dynamic, or [hash_rows, 1]) plus "ctr/lr_bias", trained IN THE SAME CLOSURE on
// the same batch (its rows are the same ids, so it rides in the same requests at the cost of 4
// bytes per row).
//
// One training step is one closure: hash the batch's features, dedupe the rows (Device::Unique),
// pull the embedding and LR rows and all the dense weights in ONE lookup request per ps, run the
// forward and backward passes on the worker's replicas (ModelOptions::devices: one per GPU, or
// the CPU; each takes a slice of the examples and one all-reduce sums their gradients, the tables'
// still per distinct row), and push every gradient in ONE update request per ps.
//
// ModelOptions: data (default data/flights/flights.csv), epochs (default 1), batch_size (default
// 256), learning_rate (Adagrad's, for the two hashed tables; default 0.05), lr_schedule (relative to
// both rates, the tables' and dense_learning_rate), embedding_dim (default 16), seed (default 1: the shuffles and initializers). Extra options:
//   embedding        dynamic (default: the two tables keyed by the features' 64-bit keys) or hashed
//   min_count        dynamic: a key is stored once seen in this many training batches (default 0:
//                    at once); until then it reads zeros and its gradients are dropped
//   ttl_steps        dynamic: keys untouched for more steps are evicted (default 0: never)
//   max_keys         dynamic: the most keys per table, least recently used evicted (default 0: no
//                    limit)
//   row_format       dynamic: rows stored as float32 (default), float16, bfloat16 or int8
//   slot_format      dynamic: Adagrad's accumulators stored as float32 (default), float16 or
//                    bfloat16 (ps/row_format.h)
//   hash_rows        hashed: rows of the two hashed tables (default 4194304 = 2^22)
//   hidden           the MLP's hidden units (default 64)
//   dense_learning_rate  Adagrad's rate for the dense weights, which get mean-loss gradients
//                    (see CtrGradLayout; default 0.2)
//   features         which hashed features, by name, separated by '+' or ',' (default all; see
//                    FlightFeature)
//   partitioner      hashed: min_size (default) or max_size, for the two hashed tables
//   min_shard_bytes  min_size: the smallest shard (default 1 MiB)
//   max_shard_bytes  max_size: the largest shard (default 64 MiB)
//   max_shards       the most shards per table (default 0: the number of ps tasks for min_size,
//                    no limit for max_size)
//   init_stddev      the embedding rows' truncated-normal stddev (default 0.01)
//   test_from_month  flights of this month on test (default 6: train Jan-May, test June)
//   delay_threshold  minutes late that make a positive (default 15)
//
// Metrics: test_auc, test_logloss, baseline_lr_test_auc, baseline_lr_test_logloss (exact AUC over
// every test flight), and prior_test_logloss (always predicting the training positive rate);
// notes: train/test flights, positive rates, features, table shards.
//
// The coordinator side (this file's unit: the options, the variables, the Model); the worker side
// is flights_ctr_worker.h, the serving head flights_ctr_serving.h, and what the two share of the
// step (the variables' names, the keys, the pull) flights_ctr_lookup.h.
#ifndef PSTRAIN_MODELS_FLIGHTS_CTR_H_
#define PSTRAIN_MODELS_FLIGHTS_CTR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/variable_creator.h"
#include "models/ctr_net.h"
#include "models/devices.h"
#include "models/flights_ctr_lookup.h"  // the variables' names
#include "models/flights_data.h"
#include "models/model.h"
#include "ps/row_format.h"

namespace pstrain {

inline constexpr char kFlightsCtrModel[] = "flights_ctr";

// A run's settings, resolved from ModelOptions (defaults as the file comment lists).
struct FlightsCtrConfig {
  FlightsOptions flights;
  int epochs = 1;
  int64_t max_steps = 0;  // 0: no limit
  int64_t batch_size = 256;
  double learning_rate = 0.05;
  double dense_learning_rate = 0.2;
  RelativeSchedule lr_schedule;  // both rates' (ModelOptions::lr_schedule)
  std::vector<int> features;  // FlightFeature values; default all of them
  CtrNetShape shape;          // shape.features = features.size()
  int64_t hash_rows = int64_t{1} << 22;
  PartitionerKind partitioner = PartitionerKind::kMinSize;
  int64_t min_shard_bytes = int64_t{1} << 20;
  int64_t max_shard_bytes = int64_t{64} << 20;
  int max_shards = 0;
  double init_stddev = 0.01;
  uint64_t seed = 1;
  // embedding=dynamic: the two tables are dynamic tables keyed by FeatureKey.
  bool dynamic = true;
  int admit_min_count = 0;
  int64_t ttl_steps = 0;
  int64_t max_keys = 0;
  RowFormat row_format = ROW_FLOAT32;   // dynamic tables' rows
  RowFormat slot_format = ROW_FLOAT32;  // and their Adagrad slots
  // Where the workers compute (ModelOptions::devices).
  WorkerDevices devices;
  // Steps of one worker in the dense part at once (ModelOptions::dense_turns).
  int dense_turns = 1;
};

// Errors: kInvalidArgument naming a bad or unknown option.
absl::StatusOr<FlightsCtrConfig> FlightsCtrConfigFromOptions(const ModelOptions& options);

// The model's variables as the coordinator creates them (with `num_ps` ps tasks), in creation
// order: the two hashed tables (embedding=hashed only), then the dense weights.
// `train_positive_rate` sets the biases' initial value (its logit). A single-process trainer can
// build the same tables from these.
std::vector<VariableSpec> FlightsCtrVariables(const FlightsCtrConfig& config, int num_ps,
                                              double train_positive_rate);
// embedding=dynamic: the two dynamic tables (embedding, LR weights), created before the variables.
std::vector<TableSpec> FlightsCtrTables(const FlightsCtrConfig& config);

// The coordinator side. Errors: as FlightsCtrConfigFromOptions.
absl::StatusOr<std::unique_ptr<Model>> CreateFlightsCtr(const ModelOptions& options);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_FLIGHTS_CTR_H_
