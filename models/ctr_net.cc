#include "models/ctr_net.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {

absl::Status CtrNet::Forward(const CtrBatch& b, const CtrDenseParams& p) {
  forward_n_ = -1;
  if (b.n < 0 || b.num_unique < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CtrNet: n ", b.n, " and num_unique ", b.num_unique, " must be >= 0"));
  }
  const int64_t n = b.n, f = shape_.features, d = shape_.dim, hidden = shape_.hidden;
  const int64_t in = shape_.input();
  x_.resize(n * in);
  h_.resize(n * hidden);
  logits_.resize(n);
  lr_rows_.resize(n * f);
  lr_logits_.resize(n);
  if (n > 0) {
    // The concatenation of the features' rows is the gather itself: [n * features, dim].
    RETURN_IF_ERROR(device_->GatherRows(b.num_unique, d, b.emb, b.index, n * f, x_.data()));
    RETURN_IF_ERROR(device_->Gemm(false, false, n, hidden, in, 1.0f, x_.data(), in, p.w1, hidden,
                                  0.0f, h_.data(), hidden));
    RETURN_IF_ERROR(device_->BiasAdd(n, hidden, p.b1, h_.data()));
    RETURN_IF_ERROR(device_->Relu(n * hidden, h_.data(), h_.data()));
    RETURN_IF_ERROR(device_->Gemm(false, false, n, 1, hidden, 1.0f, h_.data(), hidden, p.w2, 1,
                                  0.0f, logits_.data(), 1));
    RETURN_IF_ERROR(device_->BiasAdd(n, 1, p.b2, logits_.data()));

    RETURN_IF_ERROR(device_->GatherRows(b.num_unique, 1, b.lr, b.index, n * f, lr_rows_.data()));
    RETURN_IF_ERROR(device_->SumPool(n, f, 1, lr_rows_.data(), lr_logits_.data()));
    RETURN_IF_ERROR(device_->BiasAdd(n, 1, p.lr_bias, lr_logits_.data()));
  }
  forward_n_ = n;
  return absl::OkStatus();
}

absl::Status CtrNet::Backward(const CtrBatch& b, const CtrDenseParams& p, CtrGrads* g,
                              float* loss, float* lr_loss) {
  if (forward_n_ < 0 || forward_n_ != b.n) {
    return absl::InvalidArgumentError(absl::StrCat("CtrNet::Backward: a batch of ", b.n,
                                                   " examples after a Forward of ", forward_n_));
  }
  const int64_t n = b.n, f = shape_.features, d = shape_.dim, hidden = shape_.hidden;
  const int64_t in = shape_.input();
  // Every op below overwrites its whole output, so no zeroing (but for an empty batch).
  const std::pair<std::vector<float>*, int64_t> outputs[] = {
      {&g->emb, b.num_unique * d}, {&g->lr, b.num_unique}, {&g->w1, in * hidden},
      {&g->b1, hidden},            {&g->w2, hidden},       {&g->b2, 1},
      {&g->lr_bias, 1}};
  for (const auto& [v, size] : outputs) {
    if (n == 0) {
      v->assign(size, 0.0f);
    } else {
      v->resize(size);
    }
  }
  *loss = 0;
  *lr_loss = 0;
  if (n == 0) return absl::OkStatus();
  const float scale = static_cast<float>(n);  // mean-loss gradients -> summed-loss gradients

  // The model: the dense weights' gradients of the mean loss, the rows' of the summed loss.
  dlogits_.resize(n);
  RETURN_IF_ERROR(device_->SigmoidCrossEntropy(n, logits_.data(), b.labels, loss, dlogits_.data()));
  RETURN_IF_ERROR(device_->Gemm(true, false, hidden, 1, n, 1.0f, h_.data(), hidden,
                                dlogits_.data(), 1, 0.0f, g->w2.data(), 1));
  RETURN_IF_ERROR(device_->BiasGrad(n, 1, dlogits_.data(), g->b2.data()));
  dh_.resize(n * hidden);
  RETURN_IF_ERROR(device_->Gemm(false, true, n, hidden, 1, 1.0f, dlogits_.data(), 1, p.w2, 1, 0.0f,
                                dh_.data(), hidden));
  RETURN_IF_ERROR(device_->ReluGrad(n * hidden, h_.data(), dh_.data(), dh_.data()));
  RETURN_IF_ERROR(device_->Gemm(true, false, in, hidden, n, 1.0f, x_.data(), in, dh_.data(), hidden,
                                0.0f, g->w1.data(), hidden));
  RETURN_IF_ERROR(device_->BiasGrad(n, hidden, dh_.data(), g->b1.data()));
  dx_.resize(n * in);
  RETURN_IF_ERROR(device_->Gemm(false, true, n, in, hidden, scale, dh_.data(), hidden, p.w1, hidden,
                                0.0f, dx_.data(), in));
  RETURN_IF_ERROR(
      device_->SegmentSum(n * f, d, dx_.data(), b.index, b.num_unique, g->emb.data()));

  // The logistic-regression baseline, likewise.
  dlr_.resize(n);
  RETURN_IF_ERROR(
      device_->SigmoidCrossEntropy(n, lr_logits_.data(), b.labels, lr_loss, dlr_.data()));
  RETURN_IF_ERROR(device_->BiasGrad(n, 1, dlr_.data(), g->lr_bias.data()));
  RETURN_IF_ERROR(device_->Scale(n, scale, dlr_.data()));
  dlr_rows_.resize(n * f);
  RETURN_IF_ERROR(device_->SumPoolGrad(n, f, 1, dlr_.data(), dlr_rows_.data()));
  RETURN_IF_ERROR(
      device_->SegmentSum(n * f, 1, dlr_rows_.data(), b.index, b.num_unique, g->lr.data()));
  return absl::OkStatus();
}

}  // namespace pstrain
