#include "models/movielens_mf_worker.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "models/batches.h"
#include "models/ratings_data.h"
#include "ps/sharded_variable.h"
#include "worker/device/device.h"

namespace pstrain {
namespace {

// Everything a worker needs to train and evaluate: the data and the hyperparameters. Read-only
// after creation, so closures share it.
class RatingsResource : public Dataset {
 public:
  RatingsResource(RatingsData data, Device* device, int64_t batch_size, uint64_t seed, double l2,
                  double bias_l2, double reg_power, int64_t dim, bool dynamic)
      : data_(std::move(data)),
        device_(device),
        batches_(static_cast<int64_t>(data_.train.size()), batch_size, seed),
        l2_(l2),
        bias_l2_(bias_l2),
        reg_power_(reg_power),
        dim_(dim),
        dynamic_(dynamic) {
    user_count_.assign(data_.num_users, 0);
    item_count_.assign(data_.num_items, 0);
    for (size_t k = 0; k < data_.train.size(); ++k) {
      ++user_count_[data_.train.user[k]];
      ++item_count_[data_.train.item[k]];
    }
  }

  // The training examples in epoch order, one batch per element: users, items, ratings.
  absl::StatusOr<bool> Next(std::vector<Tensor>* element) override {
    absl::MutexLock lock(&mu_);
    if (next_step_ >= batches_.steps_per_epoch()) return false;
    std::vector<int64_t> users, items;
    std::vector<float> ratings;
    for (int64_t k : batches_.Batch(next_step_++)) {
      users.push_back(data_.train.user[k]);
      items.push_back(data_.train.item[k]);
      ratings.push_back(data_.train.rating[k]);
    }
    *element = {Tensor::FromVector(users), Tensor::FromVector(items), Tensor::FromVector(ratings)};
    return true;
  }
  bool shared() const override { return true; }

  const RatingsData& data() const { return data_; }
  // The CPU, where the steps compute.
  Device* device() const { return device_; }
  // tables=dynamic: the tables are keyed by the raw ids' keys.
  bool dynamic() const { return dynamic_; }
  EpochBatches& batches() { return batches_; }
  double l2() const { return l2_; }
  double bias_l2() const { return bias_l2_; }
  double reg_power() const { return reg_power_; }
  int64_t dim() const { return dim_; }
  double Clip(double p) const {
    return std::clamp<double>(p, data_.min_rating, data_.max_rating);
  }
  // Training ratings of each user and item.
  int64_t user_count(int64_t u) const { return user_count_[u]; }
  int64_t item_count(int64_t i) const { return item_count_[i]; }

 private:
  const RatingsData data_;
  Device* const device_;
  EpochBatches batches_;
  const double l2_;
  const double bias_l2_;
  const double reg_power_;
  const int64_t dim_;
  const bool dynamic_;
  std::vector<int64_t> user_count_, item_count_;
  absl::Mutex mu_;
  int64_t next_step_ ABSL_GUARDED_BY(mu_) = 0;
};

// One of the model's four tables: a fixed variable indexed by the dense ids, or a dynamic table
// keyed by the raw ids' keys.
struct MfTable {
  std::optional<ShardedVariable> fixed;
  std::optional<DynamicTable> dynamic;
};

// The model's four tables, found by name on the ps tasks.
struct Tables {
  MfTable user_emb, item_emb, user_bias, item_bias;
};

absl::StatusOr<Tables> FindTables(PsConnection* ps, bool dynamic) {
  Tables t;
  for (auto [table, name] : {std::pair{&t.user_emb, kMfUserEmbedding}, std::pair{&t.item_emb, kMfItemEmbedding},
                             std::pair{&t.user_bias, kMfUserBias}, std::pair{&t.item_bias, kMfItemBias}}) {
    if (dynamic) {
      ASSIGN_OR_RETURN(table->dynamic, ps->Table(name));
    } else {
      ASSIGN_OR_RETURN(table->fixed, ps->Variable(name));
    }
  }
  return t;
}

// The ids a table takes for examples `rows` of `ratings`: users' (or items') keys or dense ids.
void Ids(const Ratings& ratings, absl::Span<const int64_t> rows, bool dynamic, bool users,
         std::vector<int64_t>* out) {
  out->resize(rows.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    const int64_t r = rows[k];
    (*out)[k] = dynamic ? (users ? ratings.user_key[r] : ratings.item_key[r])
                        : (users ? ratings.user[r] : ratings.item[r]);
  }
}

absl::Status AddLookup(LookupBatch& batch, const MfTable& t, absl::Span<const int64_t> ids,
                       float* out, LookupMode mode) {
  if (t.dynamic.has_value()) {
    return batch.Add(*t.dynamic, ids, reinterpret_cast<char*>(out), mode);
  }
  return batch.Add(*t.fixed, ids, reinterpret_cast<char*>(out));
}

absl::Status AddGradients(UpdateBatch& batch, const MfTable& t, absl::Span<const int64_t> ids,
                          const std::vector<float>& grads) {
  const char* g = reinterpret_cast<const char*>(grads.data());
  if (t.dynamic.has_value()) return batch.AddSparse(*t.dynamic, UpdateOp::APPLY_GRADIENT, ids, g);
  return batch.AddSparse(*t.fixed, UpdateOp::APPLY_GRADIENT, ids, g);
}

// Predictions for examples `rows` of `ratings`, with the rows pulled from the ps; keeps the pulled
// rows in `pulled` for the backward pass.
struct Forward {
  std::vector<int64_t> users, items;
  std::vector<float> pu, qi, bu, bi, dot, pred;
};

// `step` > 0: a training step's pull (dynamic tables store the ids they lack); 0: evaluation.
absl::Status RunForward(const Tables& t, const Ratings& ratings, absl::Span<const int64_t> rows,
                        int64_t dim, double mean, bool dynamic, int64_t step, Device* device,
                        Forward* f) {
  const int64_t n = static_cast<int64_t>(rows.size());
  Ids(ratings, rows, dynamic, /*users=*/true, &f->users);
  Ids(ratings, rows, dynamic, /*users=*/false, &f->items);
  f->pu.resize(n * dim);
  f->qi.resize(n * dim);
  f->bu.resize(n);
  f->bi.resize(n);
  const LookupMode mode = step > 0 ? LookupMode::kTrain : LookupMode::kEval;
  LookupBatch lookup;
  lookup.set_step(step);
  RETURN_IF_ERROR(AddLookup(lookup, t.user_emb, f->users, f->pu.data(), mode));
  RETURN_IF_ERROR(AddLookup(lookup, t.item_emb, f->items, f->qi.data(), mode));
  RETURN_IF_ERROR(AddLookup(lookup, t.user_bias, f->users, f->bu.data(), mode));
  RETURN_IF_ERROR(AddLookup(lookup, t.item_bias, f->items, f->bi.data(), mode));
  RETURN_IF_ERROR(lookup.Run());
  f->dot.resize(n);
  RETURN_IF_ERROR(device->RowDot(n, dim, f->pu.data(), f->qi.data(), f->dot.data()));
  f->pred.resize(n);
  for (int64_t k = 0; k < n; ++k) {
    f->pred[k] = static_cast<float>(mean) + f->bu[k] + f->bi[k] + f->dot[k];
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> TrainStep(ClosureContext& ctx, absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t step, IntArg(args, 0, kMfTrain));
  if (ctx.datasets.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(kMfTrain, " takes the ", kMfData, " resource"));
  }
  auto* res = dynamic_cast<RatingsResource*>(ctx.datasets[0]);
  if (res == nullptr) return absl::InvalidArgumentError(absl::StrCat(kMfTrain, " needs ", kMfData));
  ASSIGN_OR_RETURN(Tables t, FindTables(ctx.ps, res->dynamic()));
  const int64_t dim = res->dim();
  const std::vector<int64_t> rows =
      ReplicaShare(res->batches().Batch(step), ctx.replica_index, ctx.num_replicas);
  const Ratings& train = res->data().train;
  Device* device = res->device();
  Forward f;
  const int64_t global_step = step + 1;  // 1-based: 0 means "no step" to a dynamic table
  RETURN_IF_ERROR(RunForward(t, train, rows, dim, res->data().train_mean, res->dynamic(),
                             global_step, device, &f));

  // Squared error plus L2 on the rows used; gradients per example (the ps sums repeated ids).
  const int64_t n = static_cast<int64_t>(rows.size());
  const float l2 = static_cast<float>(res->l2());
  const float bias_l2 = static_cast<float>(res->bias_l2());
  std::vector<float> err(n);
  double loss = 0;
  for (int64_t k = 0; k < n; ++k) {
    err[k] = f.pred[k] - train.rating[rows[k]];
    loss += static_cast<double>(err[k]) * err[k];
  }
  std::vector<float> dout(n), gp(n * dim), gq(n * dim), gbu(n), gbi(n);
  for (int64_t k = 0; k < n; ++k) dout[k] = 2 * err[k];
  RETURN_IF_ERROR(device->RowDotGrad(n, dim, f.pu.data(), f.qi.data(), dout.data(), gp.data(),
                                     gq.data()));
  // L2 per occurrence, l2 / count^reg_power: with reg_power 0 every rating of a user adds the same
  // pull towards 0 (frequent users are held hardest); with 1 each user's total pull is the same.
  const double power = res->reg_power();
  for (int64_t k = 0; k < n; ++k) {
    const float ru =
        static_cast<float>(2 * l2 / std::pow(res->user_count(train.user[rows[k]]), power));
    const float ri =
        static_cast<float>(2 * l2 / std::pow(res->item_count(train.item[rows[k]]), power));
    RETURN_IF_ERROR(device->Axpy(dim, ru, &f.pu[k * dim], &gp[k * dim]));
    RETURN_IF_ERROR(device->Axpy(dim, ri, &f.qi[k * dim], &gq[k * dim]));
  }
  for (int64_t k = 0; k < n; ++k) {
    gbu[k] = dout[k] + 2 * bias_l2 * f.bu[k];
    gbi[k] = dout[k] + 2 * bias_l2 * f.bi[k];
  }
  UpdateBatch update;
  update.set_step(global_step);
  RETURN_IF_ERROR(AddGradients(update, t.user_emb, f.users, gp));
  RETURN_IF_ERROR(AddGradients(update, t.item_emb, f.items, gq));
  RETURN_IF_ERROR(AddGradients(update, t.user_bias, f.users, gbu));
  RETURN_IF_ERROR(AddGradients(update, t.item_bias, f.items, gbi));
  RETURN_IF_ERROR(update.Run());
  return std::vector<Tensor>{Tensor::Scalar<float>(static_cast<float>(loss / std::max<int64_t>(n, 1))),
                             Tensor::Scalar<int64_t>(n)};
}

// Sum of squared errors (clipped predictions) over examples [begin, end) of the test set (split 0),
// the training set (split 1) or the validation set (split 2).
absl::StatusOr<std::vector<Tensor>> EvalChunk(ClosureContext& ctx, absl::Span<const Tensor> args) {
  ASSIGN_OR_RETURN(int64_t split, IntArg(args, 0, kMfEval));
  ASSIGN_OR_RETURN(int64_t begin, IntArg(args, 1, kMfEval));
  ASSIGN_OR_RETURN(int64_t end, IntArg(args, 2, kMfEval));
  auto* res = ctx.datasets.size() == 1 ? dynamic_cast<RatingsResource*>(ctx.datasets[0]) : nullptr;
  if (res == nullptr) return absl::InvalidArgumentError(absl::StrCat(kMfEval, " needs ", kMfData));
  if (split < 0 || split > 2) {
    return absl::InvalidArgumentError(absl::StrCat(kMfEval, ": split ", split, " is not 0, 1 or 2"));
  }
  const Ratings& ratings = split == 0   ? res->data().test
                           : split == 1 ? res->data().train
                                        : res->data().validation;
  if (begin < 0 || end < begin || end > static_cast<int64_t>(ratings.size())) {
    return absl::InvalidArgumentError(absl::StrCat(kMfEval, ": rows [", begin, ", ", end,
                                                   ") outside the ", ratings.size(), " examples"));
  }
  ASSIGN_OR_RETURN(Tables t, FindTables(ctx.ps, res->dynamic()));
  std::vector<int64_t> rows(end - begin);
  for (int64_t k = begin; k < end; ++k) rows[k - begin] = k;
  Forward f;
  RETURN_IF_ERROR(RunForward(t, ratings, rows, res->dim(), res->data().train_mean, res->dynamic(),
                             /*step=*/0, res->device(), &f));
  double sse = 0;
  for (int64_t k = 0; k < end - begin; ++k) {
    const double e = res->Clip(f.pred[k]) - ratings.rating[begin + k];
    sse += e * e;
  }
  return std::vector<Tensor>{Tensor::Scalar<float>(static_cast<float>(sse)),
                             Tensor::Scalar<int64_t>(end - begin)};
}

}  // namespace

absl::Status RegisterMatrixFactorization(ClosureRegistry* registry,
                                         std::shared_ptr<ReplicaGroups> replica_groups) {
  RETURN_IF_ERROR(registry->RegisterClosure(kMfTrain, TrainStep));
  RETURN_IF_ERROR(registry->RegisterClosure(kMfEval, EvalChunk));
  return registry->RegisterDataset(
      kMfData,
      [replica_groups](int /*worker_index*/, int /*num_workers*/,
                       absl::Span<const Tensor> args) -> absl::StatusOr<std::unique_ptr<Dataset>> {
        RatingsOptions options;
        ASSIGN_OR_RETURN(options.path, StringArg(args, 0, kMfData));
        ASSIGN_OR_RETURN(options.user_col, StringArg(args, 1, kMfData));
        ASSIGN_OR_RETURN(options.item_col, StringArg(args, 2, kMfData));
        ASSIGN_OR_RETURN(options.rating_col, StringArg(args, 3, kMfData));
        ASSIGN_OR_RETURN(int64_t seed, IntArg(args, 4, kMfData));
        options.seed = static_cast<uint64_t>(seed);
        ASSIGN_OR_RETURN(int64_t batch_size, IntArg(args, 5, kMfData));
        ASSIGN_OR_RETURN(double l2, FloatArg(args, 6, kMfData));
        ASSIGN_OR_RETURN(double bias_l2, FloatArg(args, 7, kMfData));
        ASSIGN_OR_RETURN(double reg_power, FloatArg(args, 8, kMfData));
        ASSIGN_OR_RETURN(int64_t dim, IntArg(args, 9, kMfData));
        ASSIGN_OR_RETURN(int64_t dynamic, IntArg(args, 10, kMfData));
        ASSIGN_OR_RETURN(options.validation_fraction, FloatArg(args, 11, kMfData));
        ASSIGN_OR_RETURN(options.validation_path, StringArg(args, 12, kMfData));
        ASSIGN_OR_RETURN(RatingsData data, LoadRatings(options));
        ASSIGN_OR_RETURN(Device * device, replica_groups->Cpu());
        return std::unique_ptr<Dataset>(new RatingsResource(std::move(data), device, batch_size,
                                                            options.seed, l2, bias_l2, reg_power,
                                                            dim, dynamic != 0));
      });
}

}  // namespace pstrain
