// The math of the hashed-feature click-through model (models/flights_ctr.h), apart from where its
// parameters live, so that the ps-trained model and a single-process baseline run the same code:
//
//   model     x = concat over features f of emb[row(f)]           [n, features * dim]
//             h = relu(x W1 + b1)                                  [n, hidden]
//             logit = h w2 + b2                                    [n]
//   baseline  lr_logit = lr_bias + sum over features f of lr[row(f)]   (logistic regression on the
//             same hashed rows, in a 1-wide table of its own)
//
// both trained on the binary cross-entropy of sigmoid(logit) against the label. A batch comes with
// its rows already deduplicated (Device::Unique): `index` points each (example, feature) at one of
// the batch's distinct rows, and the gradients of the tables come back per distinct row, summed
// over repeats, ready to send to a ps (or to apply locally).
#ifndef PSTRAIN_MODELS_CTR_NET_H_
#define PSTRAIN_MODELS_CTR_NET_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "worker/device/device.h"

namespace pstrain {

struct CtrNetShape {
  // Hashed features per example. Default 14 (the flights features).
  int64_t features = 14;
  // Embedding width. Default 16.
  int64_t dim = 16;
  // Hidden units of the MLP. Default 64.
  int64_t hidden = 64;
  int64_t input() const { return features * dim; }
  // Floats of each dense parameter.
  int64_t w1_size() const { return input() * hidden; }
};

// The dense parameters (device memory; host memory on the CPU).
struct CtrDenseParams {
  const float* w1 = nullptr;       // [input, hidden], row-major
  const float* b1 = nullptr;       // [hidden]
  const float* w2 = nullptr;       // [hidden] (a [hidden, 1] matrix)
  const float* b2 = nullptr;       // [1]
  const float* lr_bias = nullptr;  // [1]
};

// One batch, its table rows deduplicated.
struct CtrBatch {
  int64_t n = 0;                  // examples
  int64_t num_unique = 0;         // distinct table rows in the batch
  const int32_t* index = nullptr; // [n, features]: each into [0, num_unique)
  const float* emb = nullptr;     // [num_unique, dim]: the embedding rows
  const float* lr = nullptr;      // [num_unique]: the logistic-regression weights
  const float* labels = nullptr;  // [n], 0 or 1; only Backward reads them
};

// Gradients, each the shape of its parameter. The tables' rows (per distinct row) get gradients of
// the batch's SUMMED loss, so a row's server-side Adagrad sees the same per-example gradients
// whatever the batch size (a rare row's one example is not divided by the batch). The dense
// weights get gradients of the MEAN loss: every step touches them, and small gradients against
// Adagrad's initial accumulator damp their first steps, which keeps the burst of stale updates that
// asynchronous workers send at the start from wrecking the MLP.
struct CtrGrads {
  std::vector<float> emb;  // [num_unique, dim]
  std::vector<float> lr;   // [num_unique]
  std::vector<float> w1, b1, w2, b2, lr_bias;
};

// Forward and backward passes, with their workspace. Not thread-safe: one per thread (or step).
class CtrNet {
 public:
  // `device` is not owned and must outlive the net; its ops must take host pointers
  // (host_memory()), as the tables and gradients here are host vectors.
  CtrNet(Device* device, CtrNetShape shape) : device_(device), shape_(shape) {}

  const CtrNetShape& shape() const { return shape_; }

  // The logits of the model and of the baseline for `batch` (labels unused).
  // Errors: kInvalidArgument for an index outside [0, num_unique) or bad sizes.
  absl::Status Forward(const CtrBatch& batch, const CtrDenseParams& params);
  const std::vector<float>& logits() const { return logits_; }
  const std::vector<float>& lr_logits() const { return lr_logits_; }

  // After Forward(batch, params): the batch's mean losses (model, baseline) and the gradients
  // (see CtrGrads) into `grads` (resized here). Errors: kInvalidArgument for labels outside
  // [0, 1] or a batch other than Forward's.
  absl::Status Backward(const CtrBatch& batch, const CtrDenseParams& params, CtrGrads* grads,
                        float* loss, float* lr_loss);

 private:
  Device* const device_;
  const CtrNetShape shape_;
  int64_t forward_n_ = -1;
  // Workspace, reused across calls.
  std::vector<float> x_;          // [n, input]
  std::vector<float> h_;          // [n, hidden], after the ReLU
  std::vector<float> logits_;     // [n]
  std::vector<float> lr_rows_;    // [n, features]
  std::vector<float> lr_logits_;  // [n]
  std::vector<float> dlogits_, dh_, dx_, dlr_, dlr_rows_;
};

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_CTR_NET_H_
