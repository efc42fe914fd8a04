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

absl::Status DenseMlp::Forward(Device* device, const float* params, int64_t batch, const float* x,
                               const int32_t* labels, std::vector<std::vector<float>>* acts,
                               float* loss) const {
  if (!device->host_memory()) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp: device ", device->name(), " does not use host memory"));
  }
  if (batch < 1) return absl::InvalidArgumentError(absl::StrCat("mlp: batch ", batch, " < 1"));
  acts->resize(widths_.size());
  for (int l = 0; l < num_layers(); ++l) {
    const float* in = l == 0 ? x : (*acts)[l].data();
    std::vector<float>& out = (*acts)[l + 1];
    out.resize(batch * widths_[l + 1]);
    RETURN_IF_ERROR(device->Gemm(/*trans_a=*/false, /*trans_b=*/false, batch, widths_[l + 1],
                                 widths_[l], /*alpha=*/1, in, widths_[l],
                                 params + weight_offset(l), widths_[l + 1], /*beta=*/0,
                                 out.data(), widths_[l + 1]));
    RETURN_IF_ERROR(device->BiasAdd(batch, widths_[l + 1], params + bias_offset(l), out.data()));
    if (l + 1 < num_layers()) {
      RETURN_IF_ERROR(device->Relu(batch * widths_[l + 1], out.data(), out.data()));
    }
  }
  std::vector<float>& logits = acts->back();
  return device->SoftmaxCrossEntropy(batch, classes(), logits.data(), labels, logits.data(), loss);
}

absl::StatusOr<float> DenseMlp::ForwardBackward(Device* device, const float* params,
                                                int64_t batch, const float* x,
                                                const int32_t* labels, float* grads) const {
  std::vector<std::vector<float>> acts;
  float loss = 0;
  RETURN_IF_ERROR(Forward(device, params, batch, x, labels, &acts, &loss));
  // dy: the loss's gradient with respect to layer l's output (before its ReLU), [batch, w[l+1]].
  std::vector<float> dy(batch * classes()), dx;
  RETURN_IF_ERROR(
      device->SoftmaxCrossEntropyGrad(batch, classes(), acts.back().data(), labels, dy.data()));
  for (int l = num_layers() - 1; l >= 0; --l) {
    const int64_t fan_in = widths_[l], fan_out = widths_[l + 1];
    const float* in = l == 0 ? x : acts[l].data();
    // dW = in^T dy, db = column sums of dy.
    RETURN_IF_ERROR(device->Gemm(/*trans_a=*/true, /*trans_b=*/false, fan_in, fan_out, batch,
                                 /*alpha=*/1, in, fan_in, dy.data(), fan_out, /*beta=*/0,
                                 grads + weight_offset(l), fan_out));
    RETURN_IF_ERROR(device->BiasGrad(batch, fan_out, dy.data(), grads + bias_offset(l)));
    if (l == 0) break;
    // dx = dy W^T, through the ReLU of h_l.
    dx.resize(batch * fan_in);
    RETURN_IF_ERROR(device->Gemm(/*trans_a=*/false, /*trans_b=*/true, batch, fan_in, fan_out,
                                 /*alpha=*/1, dy.data(), fan_out, params + weight_offset(l),
                                 fan_out, /*beta=*/0, dx.data(), fan_in));
    RETURN_IF_ERROR(device->ReluGrad(batch * fan_in, acts[l].data(), dx.data(), dx.data()));
    dy.swap(dx);
  }
  return loss;
}

absl::StatusOr<MlpEvalSums> DenseMlp::Evaluate(Device* device, const float* params,
                                               int64_t batch, const float* x,
                                               const int32_t* labels) const {
  std::vector<std::vector<float>> acts;
  float loss = 0;
  RETURN_IF_ERROR(Forward(device, params, batch, x, labels, &acts, &loss));
  MlpEvalSums sums;
  sums.loss_sum = static_cast<double>(loss) * static_cast<double>(batch);
  const std::vector<float>& probs = acts.back();
  const int64_t c = classes();
  for (int64_t r = 0; r < batch; ++r) {
    const float* row = probs.data() + r * c;
    if (std::max_element(row, row + c) - row == labels[r]) ++sums.correct;
  }
  return sums;
}

}  // namespace pstrain
