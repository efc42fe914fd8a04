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
// over repeats, ready to send to a ps (or to apply locally). Runs on any Device (the CPU, a GPU).
#ifndef PSTRAIN_MODELS_CTR_NET_H_
#define PSTRAIN_MODELS_CTR_NET_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "worker/device/device.h"
#include "worker/device/replicas.h"

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

// Gradients, each the shape of its parameter, in ONE flat buffer (so that replicas combine them
// with one all-reduce), in this order: emb [num_unique, dim], lr [num_unique], w1, b1, w2, b2,
// lr_bias. The tables' rows (per distinct row) get gradients of the batch's SUMMED loss, so a row's
// server-side Adagrad sees the same per-example gradients whatever the batch size (a rare row's one
// example is not divided by the batch). The dense weights get gradients of the MEAN loss: every
// step touches them, and small gradients against Adagrad's initial accumulator damp their first
// steps, which keeps the burst of stale updates that asynchronous workers send at the start from
// wrecking the MLP.
struct CtrGradLayout {
  CtrGradLayout(const CtrNetShape& shape, int64_t num_unique);
  // Offsets in floats.
  int64_t emb = 0, lr = 0, w1 = 0, b1 = 0, w2 = 0, b2 = 0, lr_bias = 0;
  // Floats in all; the dense gradients are [w1, size).
  int64_t size = 0;
};

// Host copies of the gradients, split out of a flat host buffer (for tests and local training).
struct CtrGrads {
  std::vector<float> emb, lr, w1, b1, w2, b2, lr_bias;
  static CtrGrads Split(const float* flat, const CtrGradLayout& layout);
};

// Forward and backward passes on one Device, with their workspace (device memory, kept between
// calls). Not thread-safe: one per thread (or step). Every pointer in a CtrBatch and CtrDenseParams
// is the device's memory (host memory on the CPU).
class CtrNet {
 public:
  // `device` is not owned and must outlive the net.
  CtrNet(Device* device, CtrNetShape shape) : device_(device), shape_(shape) {}

  const CtrNetShape& shape() const { return shape_; }
  Device* device() const { return device_; }

  // The logits of the model and of the baseline for `batch` (labels unused), left in device
  // memory (CopyLogits). Errors: kInvalidArgument for an index outside [0, num_unique) or bad sizes.
  absl::Status Forward(const CtrBatch& batch, const CtrDenseParams& params);
  // The last Forward's logits, copied to the host.
  absl::Status CopyLogits(std::vector<float>* logits, std::vector<float>* lr_logits) const;

  // After Forward(batch, params): the batch's mean losses (model, baseline; host) and the gradients
  // into `grads` (device memory, CtrGradLayout(shape(), batch.num_unique).size floats, overwritten).
  // Errors: kInvalidArgument for labels outside [0, 1] or a batch other than Forward's.
  absl::Status Backward(const CtrBatch& batch, const CtrDenseParams& params, float* grads,
                        float* loss, float* lr_loss);

 private:
  // Workspace buffer `b` with room for `count` floats (grown, never shrunk).
  absl::StatusOr<float*> Scratch(DeviceBuffer* b, int64_t count);

  Device* const device_;
  const CtrNetShape shape_;
  int64_t forward_n_ = -1;
  // Workspace, reused across calls.
  DeviceBuffer x_;          // [n, input]
  DeviceBuffer h_;          // [n, hidden], after the ReLU
  DeviceBuffer logits_;     // [n]
  DeviceBuffer lr_rows_;    // [n, features]
  DeviceBuffer lr_logits_;  // [n]
  DeviceBuffer dlogits_, dh_, dx_, dlr_, dlr_rows_, losses_;
};

// The same on a ReplicaGroup, as MirroredStrategy: `batch` and `params` in HOST memory; each
// replica takes its slice of the examples (ReplicaGroup::Slice; with every distinct row of the
// batch), and ONE all-reduce of the flat gradient buffer sums them: the tables' rows (summed-loss
// gradients, zero where a replica's slice has none) as they are, the dense weights' (mean-loss)
// weighted by each replica's share. `grads` (host, resized to CtrGradLayout's size) gets the sum,
// *loss and *lr_loss the batch's mean losses: up to float rounding, what one device computes.
// Errors: as Forward and Backward.
absl::Status CtrReplicatedStep(ReplicaGroup* group, const CtrNetShape& shape,
                               const CtrBatch& batch, const CtrDenseParams& params,
                               std::vector<float>* grads, float* loss, float* lr_loss);
// The logits of the model and the baseline (host), the replicas each computing a slice.
absl::Status CtrReplicatedForward(ReplicaGroup* group, const CtrNetShape& shape,
                                  const CtrBatch& batch, const CtrDenseParams& params,
                                  std::vector<float>* logits, std::vector<float>* lr_logits);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_CTR_NET_H_
