// `--model=tabular`: any table in CSV files, trained from a JSON feature spec (feature_spec.h), no
// C++ to write:
//
//   bazel run -c opt //coordinator -- --model=tabular --data=DIR_OR_FILE_OR_GLOB \
//       --feature_spec=spec.json [--validation_data=...] [--bad_rows=skip]
//
// Setup scans the data once (data_plan.h: splits, the training split's statistics, bad rows,
// each worker's share), creates the tables and weights on the ps tasks, and ships the spec and
// the plan to every worker, which then streams its share (example_stream.h): no worker holds the
// data. Per step, one closure: the next batch of the worker's stream, its keys deduplicated, ONE
// lookup request per ps (the embedding, wide and baseline tables' rows and every dense weight),
// the net (tabular_net.h), ONE update request per ps.
//
// Tables (dynamic, keyed by FeatureKey; one set per distinct min_count, as admission is a table's):
//   tabular/embedding[_min<N>]  embedding_dim wide (deep models), the spec's "embeddings" optimizer
//   tabular/wide[_min<N>]       K wide (wide models), the "wide" optimizer
//   tabular/baseline[_min<N>]   K wide: the baseline (deep and wide & deep models), "wide" too
// Weights: tabular/deep/w<l>, tabular/deep/b<l> ("dense"); tabular/wide/dense, tabular/wide/bias,
// tabular/baseline/dense, tabular/baseline/bias ("wide").
//
// ModelOptions: data (required), epochs (default 5), batch_size (256), learning_rate (when > 0:
// the embeddings' and wide parts' rate), lr_schedule (each part without a schedule in the spec),
// embedding_dim (when > 0: the spec's), validation_fraction / validation_data, seed, devices (one
// replica: the CPU or a GPU). Extra options:
//   feature_spec     the spec's path (required; --feature_spec)
//   bad_rows         error (default: the first bad row stops the job, naming its file, line and
//                    column) or skip (bad rows are skipped and counted in the summary)
//   shuffle_memory   bytes of each worker's shuffle buffer (default 256M: about 2.3 million
//                    examples of 14 keys); a share that fits is read once and drawn from memory
//                    in a fresh permutation every epoch (example_stream.h)
//   shuffle_buffer   examples in it instead (default 0: shuffle_memory's worth)
//   interleave       ranges (of about 64 KiB) each worker reads at once (default 64)
//   follow           true: data is a directory followed for new files, each trained once as it
//                    arrives until the job is stopped (--follow; data_follower.h, docs/online.md)
//   follow_poll_seconds  how often a followed directory is listed (default 1)
//   progressive_window   following: the last examples progressive validation scores (100000)
//
// Metrics, by task (test_ and val_; the baseline is the separately trained wide part, absent for
// wide models; the prior predicts the training split's label distribution):
//   binary       auc, logloss, baseline_auc, baseline_logloss, prior_logloss
//   regression   rmse, baseline_rmse, prior_rmse
//   multiclass   accuracy, logloss, baseline_accuracy, baseline_logloss, prior_accuracy,
//                prior_logloss
// A job that follows its data adds progressive validation's (each example scored before it is
// trained on, over the last progressive_window examples): progressive_auc, progressive_logloss,
// progressive_rmse or progressive_accuracy, by task, and progressive_examples.
// AUC comes from 8192-bin histograms of the predicted probability (its error is far below 1e-3).
//
// The coordinator side (this file's unit: the options, the scan, the variables, the Model); the
// worker side is tabular_model_worker.h, the serving head tabular_model_serving.h, and what the
// two share of a step (the names, the table sets, the pull) tabular_lookup.h.
#ifndef PSTRAIN_MODELS_TABULAR_TABULAR_MODEL_H_
#define PSTRAIN_MODELS_TABULAR_TABULAR_MODEL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "models/model.h"

namespace pstrain {

inline constexpr char kTabularModel[] = "tabular";

// The coordinator side. Errors: kInvalidArgument for bad options or spec, kNotFound for a missing
// spec file.
absl::StatusOr<std::unique_ptr<Model>> CreateTabular(const ModelOptions& options);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_TABULAR_TABULAR_MODEL_H_
