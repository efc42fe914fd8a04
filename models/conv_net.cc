#include "models/conv_net.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

// `count` floats of scratch on `device`.
absl::StatusOr<DeviceBuffer> Floats(Device* device, int64_t count) {
  return device->Allocate(count * static_cast<int64_t>(sizeof(float)));
}

// The largest buffer (floats) a network may have: far above any image model's, far below int64.
constexpr int64_t kMaxFloats = int64_t{1} << 40;

}  // namespace

absl::StatusOr<ConvNet> ConvNet::Create(const ConvNetShape& shape) {
  struct Field {
    const char* name;
    int64_t value;
  };
  for (const Field& f : {Field{"height", shape.height}, Field{"width", shape.width},
                         Field{"channels", shape.channels}, Field{"filters", shape.filters},
                         Field{"kernel", shape.kernel}, Field{"pool", shape.pool},
                         Field{"hidden", shape.hidden}, Field{"classes", shape.classes}}) {
    if (f.value < 1 || f.value > kMaxFloats) {
      return absl::InvalidArgumentError(
          absl::StrCat("conv_net: ", f.name, " is ", f.value, "; it must be in [1, 2^40]"));
    }
  }
  if (shape.kernel > shape.height || shape.kernel > shape.width) {
    return absl::InvalidArgumentError(absl::StrCat("conv_net: kernel ", shape.kernel,
                                                   " exceeds the ", shape.height, "x",
                                                   shape.width, " images"));
  }
  Window2D conv;
  conv.height = shape.height;
  conv.width = shape.width;
  conv.channels = shape.channels;
  conv.window_height = conv.window_width = shape.kernel;
  ASSIGN_OR_RETURN(Window2DOutput conv_out, ComputeWindow2DOutput(conv));
  if (shape.pool > conv_out.height || shape.pool > conv_out.width) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conv_net: pool ", shape.pool, " exceeds the convolution's ", conv_out.height, "x",
        conv_out.width, " output"));
  }
  Window2D pool;
  pool.height = conv_out.height;
  pool.width = conv_out.width;
  pool.channels = shape.filters;
  pool.window_height = pool.window_width = pool.stride_height = pool.stride_width = shape.pool;
  ASSIGN_OR_RETURN(Window2DOutput pool_out, ComputeWindow2DOutput(pool));
  // Every product below is at most a few of these sizes multiplied: check them in double.
  const double kernel_size =
      static_cast<double>(shape.kernel) * shape.kernel * shape.channels * shape.filters;
  const double flat = static_cast<double>(pool_out.height) * pool_out.width * shape.filters;
  const double params = kernel_size + shape.filters + flat * shape.hidden + shape.hidden +
                        static_cast<double>(shape.hidden) * shape.classes + shape.classes;
  const double image = static_cast<double>(conv_out.height) * conv_out.width * shape.filters;
  if (params > kMaxFloats || image > kMaxFloats) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conv_net: ", params, " parameters and ", image,
        " floats per image's convolution output are too many (at most 2^40)"));
  }
  return ConvNet(shape, conv, conv_out, pool, pool_out);
}

ConvNet::ConvNet(const ConvNetShape& shape, const Window2D& conv, const Window2DOutput& conv_out,
                 const Window2D& pool, const Window2DOutput& pool_out)
    : shape_(shape), conv_(conv), conv_out_(conv_out), pool_(pool), pool_out_(pool_out) {
  param_shapes_[kKernel] = {shape.kernel, shape.kernel, shape.channels, shape.filters};
  param_shapes_[kKernelBias] = {shape.filters};
  param_shapes_[kW1] = {flat(), shape.hidden};
  param_shapes_[kB1] = {shape.hidden};
  param_shapes_[kW2] = {shape.hidden, shape.classes};
  param_shapes_[kB2] = {shape.classes};
  offsets_[0] = 0;
  for (int p = 0; p < kNumParams; ++p) {
    int64_t size = 1;
    for (int64_t d : param_shapes_[p]) size *= d;
    offsets_[p + 1] = offsets_[p] + size;
  }
}

std::string ConvNet::ToString() const {
  return absl::StrCat("conv", shape_.filters, "x", shape_.kernel, "x", shape_.kernel, "-pool",
                      shape_.pool, "-", shape_.hidden, "-", shape_.classes, " on ", shape_.height,
                      "x", shape_.width, "x", shape_.channels);
}

Window2D ConvNet::ConvWindow(int64_t batch) const {
  Window2D w = conv_;
  w.batch = batch;
  return w;
}

Window2D ConvNet::PoolWindow(int64_t batch) const {
  Window2D w = pool_;
  w.batch = batch;
  return w;
}

// Pooling before the bias and the ReLU: max over a window of (a + b) is (max over it of a) + b for
// a bias b of the window's channel, and relu commutes with max, so the result is Keras'
// relu(conv + bias) -> pool, with the bias and the ReLU (and their gradients) applied to the pooled
// tensor, a quarter of the convolution's output at pool 2.
absl::Status ConvNet::Forward(Device* device, const float* params, int64_t batch, const float* x,
                              const int32_t* labels, Activations* acts, float* loss) const {
  if (batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("conv_net: batch ", batch, " < 1"));
  }
  const int64_t filters = shape_.filters, hidden = shape_.hidden, classes = shape_.classes;
  const int64_t conv_rows = batch * conv_out_.height * conv_out_.width;
  const int64_t pooled_rows = batch * pool_out_.height * pool_out_.width;
  ASSIGN_OR_RETURN(acts->conv, Floats(device, conv_rows * filters));
  ASSIGN_OR_RETURN(acts->pooled, Floats(device, batch * flat()));
  ASSIGN_OR_RETURN(acts->argmax,
                   device->Allocate(batch * flat() * static_cast<int64_t>(sizeof(int32_t))));
  ASSIGN_OR_RETURN(acts->hidden, Floats(device, batch * hidden));
  ASSIGN_OR_RETURN(acts->probs, Floats(device, batch * classes));
  float* conv = acts->conv.as<float>();
  float* pooled = acts->pooled.as<float>();
  float* h = acts->hidden.as<float>();
  float* logits = acts->probs.as<float>();

  RETURN_IF_ERROR(
      device->Conv2D(ConvWindow(batch), filters, x, params + offsets_[kKernel], conv));
  RETURN_IF_ERROR(
      device->MaxPool2D(PoolWindow(batch), conv, pooled, acts->argmax.as<int32_t>()));
  RETURN_IF_ERROR(device->BiasAdd(pooled_rows, filters, params + offsets_[kKernelBias], pooled));
  RETURN_IF_ERROR(device->Relu(batch * flat(), pooled, pooled));
  RETURN_IF_ERROR(device->Gemm(/*trans_a=*/false, /*trans_b=*/false, batch, hidden, flat(),
                               /*alpha=*/1, pooled, flat(), params + offsets_[kW1], hidden,
                               /*beta=*/0, h, hidden));
  RETURN_IF_ERROR(device->BiasAdd(batch, hidden, params + offsets_[kB1], h));
  RETURN_IF_ERROR(device->Relu(batch * hidden, h, h));
  RETURN_IF_ERROR(device->Gemm(/*trans_a=*/false, /*trans_b=*/false, batch, classes, hidden,
                               /*alpha=*/1, h, hidden, params + offsets_[kW2], classes,
                               /*beta=*/0, logits, classes));
  RETURN_IF_ERROR(device->BiasAdd(batch, classes, params + offsets_[kB2], logits));
  ASSIGN_OR_RETURN(DeviceBuffer device_loss, Floats(device, 1));
  RETURN_IF_ERROR(device->SoftmaxCrossEntropy(batch, classes, logits, labels, logits,
                                              device_loss.as<float>()));
  return device->CopyToHost(device_loss.data(), loss, sizeof(float));  // waits for the layers
}

absl::StatusOr<float> ConvNet::ForwardBackward(Device* device, const float* params,
                                               int64_t batch, const float* x,
                                               const int32_t* labels, float* grads) const {
  Activations acts;
  float loss = 0;
  RETURN_IF_ERROR(Forward(device, params, batch, x, labels, &acts, &loss));
  const int64_t filters = shape_.filters, hidden = shape_.hidden, classes = shape_.classes;
  const int64_t pooled_rows = batch * pool_out_.height * pool_out_.width;
  const float* pooled = acts.pooled.as<const float>();
  const float* h = acts.hidden.as<const float>();
  float* dlogits = acts.probs.as<float>();  // in place: the probabilities are not needed again
  ASSIGN_OR_RETURN(DeviceBuffer dh_buffer, Floats(device, batch * hidden));
  ASSIGN_OR_RETURN(DeviceBuffer dp_buffer, Floats(device, batch * flat()));
  float* dh = dh_buffer.as<float>();
  float* dp = dp_buffer.as<float>();
  // The convolution's output is not needed either: its gradient goes there.
  float* dconv = acts.conv.as<float>();

  RETURN_IF_ERROR(device->SoftmaxCrossEntropyGrad(batch, classes, dlogits, labels, dlogits));
  // Output layer: dW2 = h^T dlogits, db2 = column sums, dh = dlogits W2^T through the ReLU.
  RETURN_IF_ERROR(device->Gemm(/*trans_a=*/true, /*trans_b=*/false, hidden, classes, batch,
                               /*alpha=*/1, h, hidden, dlogits, classes, /*beta=*/0,
                               grads + offsets_[kW2], classes));
  RETURN_IF_ERROR(device->BiasGrad(batch, classes, dlogits, grads + offsets_[kB2]));
  RETURN_IF_ERROR(device->Gemm(/*trans_a=*/false, /*trans_b=*/true, batch, hidden, classes,
                               /*alpha=*/1, dlogits, classes, params + offsets_[kW2], classes,
                               /*beta=*/0, dh, hidden));
  RETURN_IF_ERROR(device->ReluGrad(batch * hidden, h, dh, dh));
  // Hidden layer: dW1 = p^T dh, db1, dp = dh W1^T through the pooled ReLU.
  RETURN_IF_ERROR(device->Gemm(/*trans_a=*/true, /*trans_b=*/false, flat(), hidden, batch,
                               /*alpha=*/1, pooled, flat(), dh, hidden, /*beta=*/0,
                               grads + offsets_[kW1], hidden));
  RETURN_IF_ERROR(device->BiasGrad(batch, hidden, dh, grads + offsets_[kB1]));
  RETURN_IF_ERROR(device->Gemm(/*trans_a=*/false, /*trans_b=*/true, batch, flat(), hidden,
                               /*alpha=*/1, dh, hidden, params + offsets_[kW1], hidden,
                               /*beta=*/0, dp, flat()));
  RETURN_IF_ERROR(device->ReluGrad(batch * flat(), pooled, dp, dp));
  // Convolution: its bias's gradient on the pooled rows, then through the pooling to the kernel.
  RETURN_IF_ERROR(device->BiasGrad(pooled_rows, filters, dp, grads + offsets_[kKernelBias]));
  RETURN_IF_ERROR(
      device->MaxPool2DGrad(PoolWindow(batch), dp, acts.argmax.as<const int32_t>(), dconv));
  RETURN_IF_ERROR(device->Conv2DGrad(ConvWindow(batch), filters, x, /*filter=*/nullptr, dconv,
                                     /*d_input=*/nullptr, grads + offsets_[kKernel]));
  // The scratch is freed on return: on an accelerator, wait for the ops that still read it.
  RETURN_IF_ERROR(device->Synchronize());
  return loss;
}

absl::StatusOr<ConvNetEvalSums> ConvNet::Evaluate(Device* device, const float* params,
                                                  int64_t batch, const float* x,
                                                  const int32_t* labels) const {
  Activations acts;
  float loss = 0;
  RETURN_IF_ERROR(Forward(device, params, batch, x, labels, &acts, &loss));
  ConvNetEvalSums sums;
  sums.loss_sum = static_cast<double>(loss) * static_cast<double>(batch);
  const int64_t c = classes();
  std::vector<float> probs(batch * c);
  std::vector<int32_t> host_labels(batch);
  RETURN_IF_ERROR(device->CopyToHost(acts.probs.data(), probs.data(), batch * c * 4));
  RETURN_IF_ERROR(device->CopyToHost(labels, host_labels.data(), batch * 4));
  for (int64_t r = 0; r < batch; ++r) {
    const float* row = probs.data() + r * c;
    if (std::max_element(row, row + c) - row == host_labels[r]) ++sums.correct;
  }
  return sums;
}

absl::StatusOr<float> ConvNet::ForwardBackward(ReplicaGroup* group, const float* params,
                                               int64_t batch, const float* x,
                                               const int32_t* labels, float* grads) const {
  if (batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("conv_net: batch ", batch, " < 1"));
  }
  const int replicas = group->num_replicas();
  const int64_t n = num_params();
  std::vector<double> losses(replicas, 0.0);
  auto step = [&](int r, Device* device, float* replica_grads) -> absl::Status {
    const BatchSlice part = group->Slice(batch, r);
    if (part.size == 0) return device->Zero(replica_grads, n * 4);
    HostInputs in(device);
    ASSIGN_OR_RETURN(const float* p, in.Put(params, n));
    ASSIGN_OR_RETURN(const float* xs, in.Put(x + part.begin * inputs(), part.size * inputs()));
    ASSIGN_OR_RETURN(const int32_t* ys, in.Put(labels + part.begin, part.size));
    ASSIGN_OR_RETURN(float loss, ForwardBackward(device, p, part.size, xs, ys, replica_grads));
    const double weight = group->Weight(batch, r);
    losses[r] = weight * loss;
    if (replicas == 1) return absl::OkStatus();
    return device->Scale(n, static_cast<float>(weight), replica_grads);
  };
  RETURN_IF_ERROR(group->RunAndSum(grads, n, step));
  double loss = 0;
  for (double l : losses) loss += l;
  return static_cast<float>(loss);
}

absl::StatusOr<ConvNetEvalSums> ConvNet::Evaluate(ReplicaGroup* group, const float* params,
                                                  int64_t batch, const float* x,
                                                  const int32_t* labels) const {
  if (batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("conv_net: batch ", batch, " < 1"));
  }
  std::vector<ConvNetEvalSums> parts(group->num_replicas());
  RETURN_IF_ERROR(group->Run([&](int r, Device* device) -> absl::Status {
    const BatchSlice part = group->Slice(batch, r);
    if (part.size == 0) return absl::OkStatus();
    HostInputs in(device);
    ASSIGN_OR_RETURN(const float* p, in.Put(params, num_params()));
    ASSIGN_OR_RETURN(const float* xs, in.Put(x + part.begin * inputs(), part.size * inputs()));
    ASSIGN_OR_RETURN(const int32_t* ys, in.Put(labels + part.begin, part.size));
    ASSIGN_OR_RETURN(parts[r], Evaluate(device, p, part.size, xs, ys));
    return absl::OkStatus();
  }));
  ConvNetEvalSums sums;
  for (const ConvNetEvalSums& part : parts) {
    sums.loss_sum += part.loss_sum;
    sums.correct += part.correct;
  }
  return sums;
}

}  // namespace pstrain
