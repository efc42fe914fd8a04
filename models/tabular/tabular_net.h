// The math of the tabular model, apart from where its parameters live:
//
//   deep      x = concat(pooled embedding of each embedded feature [F x dim], the dense inputs [D],
//                        with interaction "dot": the pairwise dot products of the F embeddings)
//             deep = MLP(x): hidden layers with ReLU, then a linear layer to the K outputs
//   wide      wide = bias + sum over embedded features of their (pooled) K-wide weight rows
//                    + dense inputs x K-wide dense weights
//   logits    deep, wide, or deep + wide (wide & deep), per the spec's model type
//   baseline  a separate wide part trained beside the model on the same keys (for deep and
//             wide & deep models): the printed baseline
//
// Losses: binary cross-entropy (K = 1), softmax cross-entropy (K classes), squared error on the
// standardized target (regression; K = 1). A multi-valued feature's rows are pooled by sum or
// mean (mean over the values it has; none: zeros).
//
// The sparse half (pooling, interaction, the wide parts, the losses) runs on the host; the MLP's
// matrix products on the worker's Device (the CPU, or a GPU). The tables get gradients of the
// batch's summed loss (per distinct row, as models/ctr_net.h explains), the dense weights of its
// mean loss.
#ifndef PSTRAIN_MODELS_TABULAR_TABULAR_NET_H_
#define PSTRAIN_MODELS_TABULAR_TABULAR_NET_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "models/tabular/feature_spec.h"
#include "models/tabular/transforms.h"
#include "worker/device/device.h"

namespace pstrain {
namespace tabular {

struct NetShape {
  int features = 0;   // embedded features (F)
  int64_t dim = 16;   // embedding width
  int dense = 0;      // dense inputs (D)
  bool dot = false;   // the pairwise dot interaction
  std::vector<int64_t> hidden;
  int outputs = 1;    // K
  bool deep = true, wide = false, baseline = true;
  Task task = Task::kBinary;

  NetShape() = default;
  NetShape(const Spec& spec, const ExampleLayout& layout, int outputs);
  int64_t input() const;
  // The MLP's widths: input, the hidden layers, outputs.
  std::vector<int64_t> widths() const;
};

// The parameters of one step, in host memory.
struct NetParams {
  std::vector<const float*> w, b;   // deep: per layer [in, out] and [out]
  const float* wide_dense = nullptr;  // [D, K]
  const float* wide_bias = nullptr;   // [K]
  const float* base_dense = nullptr;
  const float* base_bias = nullptr;
};

// One batch: its examples' rows among the batch's distinct keys.
struct NetBatch {
  int64_t n = 0;
  int64_t num_unique = 0;
  const int32_t* slot_rows = nullptr;  // [n, slots]: a distinct row, or -1 (no key)
  const float* emb = nullptr;          // [num_unique, dim]
  const float* wide = nullptr;         // [num_unique, K] (wide parts)
  const float* base = nullptr;         // [num_unique, K] (the baseline)
  const float* dense = nullptr;        // [n, D]
  const float* labels = nullptr;       // [n]
};

// Gradients, host memory, shaped as their parameters.
struct NetGrads {
  std::vector<float> emb, wide, base;          // [num_unique, dim or K]: summed loss
  std::vector<std::vector<float>> w, b;        // mean loss
  std::vector<float> wide_dense, wide_bias, base_dense, base_bias;  // mean loss
};

struct NetOutput {
  std::vector<float> logits, base_logits;  // [n, K]
  double loss = 0, base_loss = 0;          // mean over the batch (with labels)
};

// Not thread-safe: one per thread (its device workspace is reused across calls).
class TabularNet {
 public:
  // `device` and `layout` must outlive the net; `spec` gives each feature's pooling.
  TabularNet(Device* device, const Spec& spec, const ExampleLayout& layout, NetShape shape);

  const NetShape& shape() const { return shape_; }

  // The logits (and with `grads`, the losses and gradients against batch.labels).
  // Errors: the device's; kInvalidArgument for a slot row outside [0, num_unique).
  absl::Status Run(const NetBatch& batch, const NetParams& params, NetOutput* out,
                   NetGrads* grads);

  // Each row's loss for `logits` against `labels` (K per row), summed; `dlogits` (may be null)
  // gets the per-row gradient (not divided by n).
  static double Loss(Task task, int64_t n, int k, const float* logits, const float* labels,
                     float* dlogits);

 private:
  absl::StatusOr<float*> Scratch(DeviceBuffer* b, int64_t count);

  // Run's steps. `inv_count` is InverseCounts(batch); `x` DeepInput's; the wide parts' (and the
  // baseline's) rows, dense weights and bias are passed in.
  // Errors: kInvalidArgument for a slot row outside [-1, num_unique).
  absl::Status CheckSlotRows(const NetBatch& batch) const;
  // Per example and embedded feature: 1 / its values (mean pooling; 0 for none), else 1.
  std::vector<float> InverseCounts(const NetBatch& batch) const;
  // The deep part's input: the pooled embeddings, the dense inputs, the dot interactions.
  std::vector<float> DeepInput(const NetBatch& batch, const std::vector<float>& inv_count) const;
  // The MLP's forward pass on the device into `logits` (n x K, host), keeping the activations.
  absl::Status DeepForward(const std::vector<float>& x, int64_t n, const NetParams& params,
                           float* logits);
  // Adds a wide part's logits: bias + pooled K-wide rows + dense inputs x weights.
  void WideForward(const NetBatch& batch, const std::vector<float>& inv_count, const float* rows,
                   const float* dense_w, const float* bias, float* logits) const;
  // A wide part's gradients from the summed loss's per-row `gr`: rows (summed loss), dense
  // weights and bias (mean loss).
  void WideBackward(const NetBatch& batch, const std::vector<float>& inv_count, float inv_n,
                    const std::vector<float>& gr, std::vector<float>* rows,
                    std::vector<float>* dense_w, std::vector<float>* bias) const;
  // Backward through the MLP (after DeepForward) with the mean loss's gradients: grads->w and
  // grads->b, and the gradient of the deep part's input (n x input, host).
  absl::StatusOr<std::vector<float>> DeepBackward(int64_t n, const std::vector<float>& g,
                                                  float inv_n, NetGrads* grads);
  // The embedding rows' gradients (summed loss) from the input's `dx` (through the dot
  // interactions, which it adds into `dx`) into `emb`.
  void EmbeddingGrads(const NetBatch& batch, const std::vector<float>& inv_count,
                      const std::vector<float>& x, std::vector<float>* dx,
                      std::vector<float>* emb) const;

  Device* const device_;
  const ExampleLayout& layout_;
  const NetShape shape_;
  std::vector<int> slot_first_, slot_count_;  // per embedded feature (layout order)
  std::vector<bool> mean_;                    // per embedded feature
  // Device workspace: the layers' activations and gradients.
  std::vector<DeviceBuffer> act_, grad_;
  DeviceBuffer params_;
  std::vector<DeviceBuffer> dparams_;
};

}  // namespace tabular
}  // namespace pstrain

#endif  // PSTRAIN_MODELS_TABULAR_TABULAR_NET_H_
