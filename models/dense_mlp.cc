#include "models/dense_mlp.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace pstrain {

absl::StatusOr<DenseMlp> DenseMlp::Create(std::vector<int64_t> widths) {
  if (widths.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mlp: needs at least 2 widths (inputs and classes), got ", widths.size()));
  }
  for (size_t i = 0; i < widths.size(); ++i) {
    if (widths[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("mlp: width ", i, " is ", widths[i], "; widths must be >= 1"));
    }
  }
  return DenseMlp(std::move(widths));
}

DenseMlp::DenseMlp(std::vector<int64_t> widths) : widths_(std::move(widths)) {
  int64_t offset = 0;
  for (int l = 0; l < num_layers(); ++l) {
    offsets_.push_back(offset);
    offset += widths_[l] * widths_[l + 1];
    offsets_.push_back(offset);
    offset += widths_[l + 1];
  }
  offsets_.push_back(offset);
}

std::string DenseMlp::ToString() const { return absl::StrJoin(widths_, "-"); }

namespace {

// `count` floats of scratch on `device`.
absl::StatusOr<DeviceBuffer> Floats(Device* device, int64_t count) {
  return device->Allocate(count * static_cast<int64_t>(sizeof(float)));
}

}  // namespace

absl::Status DenseMlp::Forward(Device* device, const float* params, int64_t batch, const float* x,
                               const int32_t* labels, std::vector<DeviceBuffer>* acts,
                               float* loss) const {
  if (batch < 1) return absl::InvalidArgumentError(absl::StrCat("mlp: batch ", batch, " < 1"));
  acts->clear();
  acts->resize(widths_.size());
  for (int l = 0; l < num_layers(); ++l) {
    const float* in = l == 0 ? x : (*acts)[l].as<const float>();
    ASSIGN_OR_RETURN((*acts)[l + 1], Floats(device, batch * widths_[l + 1]));
    float* out = (*acts)[l + 1].as<float>();
    RETURN_IF_ERROR(device->Gemm(/*trans_a=*/false, /*trans_b=*/false, batch, widths_[l + 1],
                                 widths_[l], /*alpha=*/1, in, widths_[l],
                                 params + weight_offset(l), widths_[l + 1], /*beta=*/0, out,
                                 widths_[l + 1]));
    RETURN_IF_ERROR(device->BiasAdd(batch, widths_[l + 1], params + bias_offset(l), out));
    if (l + 1 < num_layers()) {
      RETURN_IF_ERROR(device->Relu(batch * widths_[l + 1], out, out));
    }
  }
  float* logits = acts->back().as<float>();
  ASSIGN_OR_RETURN(DeviceBuffer device_loss, Floats(device, 1));
  RETURN_IF_ERROR(device->SoftmaxCrossEntropy(batch, classes(), logits, labels, logits,
                                              device_loss.as<float>()));
  return device->CopyToHost(device_loss.data(), loss, sizeof(float));  // waits for the layers
}

absl::StatusOr<float> DenseMlp::ForwardBackward(Device* device, const float* params,
                                                int64_t batch, const float* x,
                                                const int32_t* labels, float* grads) const {
  std::vector<DeviceBuffer> acts;
  float loss = 0;
  RETURN_IF_ERROR(Forward(device, params, batch, x, labels, &acts, &loss));
  // dy: the loss's gradient with respect to layer l's output (before its ReLU), [batch, w[l+1]];
  // dx: the next one down. Sized for the widest layer, so they swap without reallocating.
  int64_t widest = 0;
  for (int64_t w : widths_) widest = std::max(widest, w);
  ASSIGN_OR_RETURN(DeviceBuffer dy_buffer, Floats(device, batch * widest));
  ASSIGN_OR_RETURN(DeviceBuffer dx_buffer, Floats(device, batch * widest));
  float* dy = dy_buffer.as<float>();
  float* dx = dx_buffer.as<float>();
  RETURN_IF_ERROR(
      device->SoftmaxCrossEntropyGrad(batch, classes(), acts.back().as<float>(), labels, dy));
  for (int l = num_layers() - 1; l >= 0; --l) {
    const int64_t fan_in = widths_[l], fan_out = widths_[l + 1];
    const float* in = l == 0 ? x : acts[l].as<const float>();
    // dW = in^T dy, db = column sums of dy.
    RETURN_IF_ERROR(device->Gemm(/*trans_a=*/true, /*trans_b=*/false, fan_in, fan_out, batch,
                                 /*alpha=*/1, in, fan_in, dy, fan_out, /*beta=*/0,
                                 grads + weight_offset(l), fan_out));
    RETURN_IF_ERROR(device->BiasGrad(batch, fan_out, dy, grads + bias_offset(l)));
    if (l == 0) break;
    // dx = dy W^T, through the ReLU of h_l.
    RETURN_IF_ERROR(device->Gemm(/*trans_a=*/false, /*trans_b=*/true, batch, fan_in, fan_out,
                                 /*alpha=*/1, dy, fan_out, params + weight_offset(l), fan_out,
                                 /*beta=*/0, dx, fan_in));
    RETURN_IF_ERROR(device->ReluGrad(batch * fan_in, acts[l].as<const float>(), dx, dx));
    std::swap(dy, dx);
  }
  // The scratch is freed on return: on an accelerator, wait for the ops that still read it.
  RETURN_IF_ERROR(device->Synchronize());
  return loss;
}

absl::StatusOr<MlpEvalSums> DenseMlp::Evaluate(Device* device, const float* params,
                                               int64_t batch, const float* x,
                                               const int32_t* labels) const {
  std::vector<DeviceBuffer> acts;
  float loss = 0;
  RETURN_IF_ERROR(Forward(device, params, batch, x, labels, &acts, &loss));
  MlpEvalSums sums;
  sums.loss_sum = static_cast<double>(loss) * static_cast<double>(batch);
  const int64_t c = classes();
  std::vector<float> probs(batch * c);
  std::vector<int32_t> host_labels(batch);
  RETURN_IF_ERROR(device->CopyToHost(acts.back().data(), probs.data(), batch * c * 4));
  RETURN_IF_ERROR(device->CopyToHost(labels, host_labels.data(), batch * 4));
  for (int64_t r = 0; r < batch; ++r) {
    const float* row = probs.data() + r * c;
    if (std::max_element(row, row + c) - row == host_labels[r]) ++sums.correct;
  }
  return sums;
}

absl::StatusOr<float> DenseMlp::ForwardBackward(ReplicaGroup* group, const float* params,
                                                int64_t batch, const float* x,
                                                const int32_t* labels, float* grads) const {
  if (batch < 1) return absl::InvalidArgumentError(absl::StrCat("mlp: batch ", batch, " < 1"));
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

absl::StatusOr<MlpEvalSums> DenseMlp::Evaluate(ReplicaGroup* group, const float* params,
                                               int64_t batch, const float* x,
                                               const int32_t* labels) const {
  if (batch < 1) return absl::InvalidArgumentError(absl::StrCat("mlp: batch ", batch, " < 1"));
  std::vector<MlpEvalSums> parts(group->num_replicas());
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
  MlpEvalSums sums;
  for (const MlpEvalSums& part : parts) {
    sums.loss_sum += part.loss_sum;
    sums.correct += part.correct;
  }
  return sums;
}

}  // namespace pstrain
