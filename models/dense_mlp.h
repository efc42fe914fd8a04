// A dense multilayer perceptron on a Device: fully connected layers with ReLU between them and a
// softmax cross-entropy head. Its parameters are one flat float buffer, layer by layer:
//
//   W_0 [widths[0], widths[1]]  b_0 [widths[1]]  W_1 [widths[1], widths[2]]  b_1 ...
//
// (row-major, so each W_l is also what a ps variable of shape [fan_in, fan_out] holds row by row).
//
//   h_0 = x [batch, widths[0]]
//   h_{l+1} = relu(h_l W_l + b_l)        for the hidden layers
//   logits  = h_{L-1} W_{L-1} + b_{L-1}  [batch, widths[L]]
//   loss    = mean over the batch of -log softmax(logits)[label]
//
// Immutable after creation; safe to use from many threads at once (each call has its own scratch).
//
// Two ways to run it:
//   - on one Device: every pointer is that device's memory (host memory on the CPU), the scratch is
//     allocated on the device, and only the loss (and, for Evaluate, the probabilities) come back;
//   - on a ReplicaGroup (one replica per GPU, or several on the CPU), as TF's MirroredStrategy: host
//     buffers in and out, the batch split across the replicas, and their gradients combined by the
//     group's all-reduce (NCCL across GPUs) into the whole batch's gradient.
#ifndef PSTRAIN_MODELS_DENSE_MLP_H_
#define PSTRAIN_MODELS_DENSE_MLP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/device/device.h"
#include "worker/device/replicas.h"

namespace pstrain {

// The sums Evaluate returns over a batch.
struct MlpEvalSums {
  double loss_sum = 0;  // sum over the examples of the cross-entropy
  int64_t correct = 0;  // examples whose largest logit is their label's (ties: the lowest class)
};

class DenseMlp {
 public:
  // `widths`: inputs, each hidden layer's units, classes (at least 2 entries, each >= 1).
  // Errors: kInvalidArgument naming the bad width.
  static absl::StatusOr<DenseMlp> Create(std::vector<int64_t> widths);

  const std::vector<int64_t>& widths() const { return widths_; }
  int num_layers() const { return static_cast<int>(widths_.size()) - 1; }
  int64_t inputs() const { return widths_.front(); }
  int64_t classes() const { return widths_.back(); }
  // Floats in the parameter (and gradient) buffer.
  int64_t num_params() const { return offsets_.back(); }
  // Where layer l's weights and bias start in the buffer.
  int64_t weight_offset(int l) const { return offsets_[2 * l]; }
  int64_t bias_offset(int l) const { return offsets_[2 * l + 1]; }
  // "784-256-128-10".
  std::string ToString() const;

  // The batch's mean loss; writes its gradient with respect to every parameter into `grads`
  // (num_params() floats, overwritten). `x` is [batch, inputs()], labels in [0, classes()). All
  // pointers are `device`'s memory. Errors: kInvalidArgument (batch < 1, a label out of range),
  // and the device's (kResourceExhausted for the scratch).
  absl::StatusOr<float> ForwardBackward(Device* device, const float* params, int64_t batch,
                                        const float* x, const int32_t* labels,
                                        float* grads) const;

  // Loss sum and correct count over the batch (forward only). Errors: as ForwardBackward.
  absl::StatusOr<MlpEvalSums> Evaluate(Device* device, const float* params, int64_t batch,
                                       const float* x, const int32_t* labels) const;

  // The same on a replica group, every pointer in HOST memory: each replica takes its slice of the
  // batch (ReplicaGroup::Slice; a slice may be empty), computes its gradient weighted by its share,
  // and the group's all-reduce sums them, so `grads` is the whole batch's mean-loss gradient and the
  // result its mean loss (up to float rounding, what one device computes). Errors: as above.
  absl::StatusOr<float> ForwardBackward(ReplicaGroup* group, const float* params, int64_t batch,
                                        const float* x, const int32_t* labels,
                                        float* grads) const;
  absl::StatusOr<MlpEvalSums> Evaluate(ReplicaGroup* group, const float* params, int64_t batch,
                                       const float* x, const int32_t* labels) const;

 private:
  explicit DenseMlp(std::vector<int64_t> widths);
  // Runs the layers: acts[l] = h_l for l >= 1 (acts[0] unused: x), the last being the softmax
  // probabilities, all device memory; *loss (host) = the mean loss.
  absl::Status Forward(Device* device, const float* params, int64_t batch, const float* x,
                       const int32_t* labels, std::vector<DeviceBuffer>* acts, float* loss) const;

  std::vector<int64_t> widths_;
  std::vector<int64_t> offsets_;  // 2 * num_layers() + 1 entries: W_0, b_0, W_1, ..., the end
};

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_DENSE_MLP_H_
