// A small convolutional network on a Device, Keras' classic image classifier:
//
//   x [batch, height, width, channels]          (NHWC, float)
//   c = relu(Conv2D(x, K) + k)                   K [kernel, kernel, channels, filters] (HWIO),
//                                                stride 1, 'valid' padding
//   p = MaxPool2D(c)                             pool x pool windows, stride pool, 'valid'
//   h = relu(flatten(p) W1 + b1)                 flatten in (row, column, channel) order, as Keras'
//                                                Flatten over channels-last images
//   logits = h W2 + b2                           [batch, classes]
//   loss = mean over the batch of -log softmax(logits)[label]
//
// Its parameters are one flat float buffer, in this order, each row-major as the ps variable of
// the same shape holds it:
//
//   K [kernel, kernel, channels, filters]  k [filters]  W1 [flat, hidden]  b1 [hidden]
//   W2 [hidden, classes]  b2 [classes]
//
// Immutable after creation; safe to use from many threads at once (each call has its own scratch).
// As DenseMlp, it runs on one Device (every pointer that device's memory, the activations
// allocated on it) or on a ReplicaGroup (host buffers, the batch split across the replicas and
// their gradients all-reduced into the whole batch's).
#ifndef PSTRAIN_MODELS_CONV_NET_H_
#define PSTRAIN_MODELS_CONV_NET_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/device/device.h"
#include "worker/device/replicas.h"

namespace pstrain {

// The network's sizes. Defaults: the seed model on 28x28 grey images, 10 classes.
struct ConvNetShape {
  int64_t height = 28;   // input rows
  int64_t width = 28;    // input columns
  int64_t channels = 1;  // input channels
  int64_t filters = 32;  // the convolution's output channels
  int64_t kernel = 3;    // the convolution's window: kernel x kernel
  int64_t pool = 2;      // the max pooling's window and stride: pool x pool
  int64_t hidden = 64;   // units of the hidden dense layer
  int64_t classes = 10;
};

// Loss sum and correct count over a batch.
struct ConvNetEvalSums {
  double loss_sum = 0;  // sum over the examples of the cross-entropy
  int64_t correct = 0;  // examples whose largest logit is their label's (ties: the lowest class)
};

class ConvNet {
 public:
  // The six parameter tensors, in buffer order.
  enum Param { kKernel = 0, kKernelBias, kW1, kB1, kW2, kB2, kNumParams };

  // Errors: kInvalidArgument naming the field (a size < 1, a kernel larger than the image, a pool
  // larger than the convolution's output, or sizes too large).
  static absl::StatusOr<ConvNet> Create(const ConvNetShape& shape);

  const ConvNetShape& shape() const { return shape_; }
  // Floats per input image (height * width * channels) and per flattened pooled image.
  int64_t inputs() const { return shape_.height * shape_.width * shape_.channels; }
  int64_t flat() const { return pool_out_.height * pool_out_.width * shape_.filters; }
  int64_t classes() const { return shape_.classes; }
  // Each parameter's shape, its offset in the buffer, and the buffer's size in floats.
  const std::vector<int64_t>& param_shape(Param p) const { return param_shapes_[p]; }
  int64_t param_offset(Param p) const { return offsets_[p]; }
  int64_t param_size(Param p) const { return offsets_[p + 1] - offsets_[p]; }
  int64_t num_params() const { return offsets_[kNumParams]; }
  // "conv32x3x3-pool2-64-10 on 28x28x1".
  std::string ToString() const;

  // The batch's mean loss; writes its gradient with respect to every parameter into `grads`
  // (num_params() floats, overwritten). `x` is [batch, inputs()], labels in [0, classes()). All
  // pointers are `device`'s memory. Errors: kInvalidArgument (batch < 1, a label out of range),
  // and the device's (kResourceExhausted for the activations).
  absl::StatusOr<float> ForwardBackward(Device* device, const float* params, int64_t batch,
                                        const float* x, const int32_t* labels,
                                        float* grads) const;
  // Loss sum and correct count over the batch (forward only). Errors: as ForwardBackward.
  absl::StatusOr<ConvNetEvalSums> Evaluate(Device* device, const float* params, int64_t batch,
                                           const float* x, const int32_t* labels) const;

  // The same on a replica group, every pointer in HOST memory: each replica takes its slice of the
  // batch, its gradient weighted by its share, and the group's all-reduce sums them, so `grads` is
  // the whole batch's mean-loss gradient. Errors: as above.
  absl::StatusOr<float> ForwardBackward(ReplicaGroup* group, const float* params, int64_t batch,
                                        const float* x, const int32_t* labels,
                                        float* grads) const;
  absl::StatusOr<ConvNetEvalSums> Evaluate(ReplicaGroup* group, const float* params,
                                           int64_t batch, const float* x,
                                           const int32_t* labels) const;

 private:
  // The activations of one forward pass, device memory.
  struct Activations {
    DeviceBuffer conv;    // c [batch * conv rows * conv columns, filters], after the ReLU
    DeviceBuffer pooled;  // p [batch, flat()]
    DeviceBuffer argmax;  // the pooling's argmax, int32, p's shape
    DeviceBuffer hidden;  // h [batch, hidden], after the ReLU
    DeviceBuffer probs;   // softmax(logits) [batch, classes]
  };

  ConvNet(const ConvNetShape& shape, const Window2D& conv, const Window2DOutput& conv_out,
          const Window2D& pool, const Window2DOutput& pool_out);
  // The window geometry of a batch of `batch` images.
  Window2D ConvWindow(int64_t batch) const;
  Window2D PoolWindow(int64_t batch) const;
  // Runs the layers into `acts`; *loss (host) = the mean loss.
  absl::Status Forward(Device* device, const float* params, int64_t batch, const float* x,
                       const int32_t* labels, Activations* acts, float* loss) const;

  ConvNetShape shape_;
  Window2D conv_;  // batch 0: set per call
  Window2DOutput conv_out_;
  Window2D pool_;
  Window2DOutput pool_out_;
  std::array<std::vector<int64_t>, kNumParams> param_shapes_;
  std::array<int64_t, kNumParams + 1> offsets_;
};

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_CONV_NET_H_
