#include "models/ctr_net.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {

CtrGradLayout::CtrGradLayout(const CtrNetShape& shape, int64_t num_unique) {
  int64_t offset = 0;
  const std::pair<int64_t*, int64_t> parts[] = {
      {&emb, num_unique * shape.dim}, {&lr, num_unique}, {&w1, shape.w1_size()},
      {&b1, shape.hidden},            {&w2, shape.hidden}, {&b2, 1},
      {&lr_bias, 1}};
  for (const auto& [where, floats] : parts) {
    *where = offset;
    offset += floats;
  }
  size = offset;
}

CtrGrads CtrGrads::Split(const float* flat, const CtrGradLayout& layout) {
  CtrGrads g;
  const std::pair<std::vector<float>*, std::pair<int64_t, int64_t>> parts[] = {
      {&g.emb, {layout.emb, layout.lr}},  {&g.lr, {layout.lr, layout.w1}},
      {&g.w1, {layout.w1, layout.b1}},    {&g.b1, {layout.b1, layout.w2}},
      {&g.w2, {layout.w2, layout.b2}},    {&g.b2, {layout.b2, layout.lr_bias}},
      {&g.lr_bias, {layout.lr_bias, layout.size}}};
  for (const auto& [v, range] : parts) v->assign(flat + range.first, flat + range.second);
  return g;
}

absl::StatusOr<float*> CtrNet::Scratch(DeviceBuffer* b, int64_t count) {
  const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
  if (b->bytes() < bytes) {
    ASSIGN_OR_RETURN(*b, device_->Allocate(bytes));
  }
  return b->as<float>();
}

absl::Status CtrNet::Forward(const CtrBatch& b, const CtrDenseParams& p) {
  forward_n_ = -1;
  if (b.n < 0 || b.num_unique < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CtrNet: n ", b.n, " and num_unique ", b.num_unique, " must be >= 0"));
  }
  const int64_t n = b.n, f = shape_.features, d = shape_.dim, hidden = shape_.hidden;
  const int64_t in = shape_.input();
  ASSIGN_OR_RETURN(float* x, Scratch(&x_, n * in));
  ASSIGN_OR_RETURN(float* h, Scratch(&h_, n * hidden));
  ASSIGN_OR_RETURN(float* logits, Scratch(&logits_, n));
  ASSIGN_OR_RETURN(float* lr_rows, Scratch(&lr_rows_, n * f));
  ASSIGN_OR_RETURN(float* lr_logits, Scratch(&lr_logits_, n));
  if (n > 0) {
    // The concatenation of the features' rows is the gather itself: [n * features, dim].
    RETURN_IF_ERROR(device_->GatherRows(b.num_unique, d, b.emb, b.index, n * f, x));
    RETURN_IF_ERROR(device_->Gemm(false, false, n, hidden, in, 1.0f, x, in, p.w1, hidden, 0.0f, h,
                                  hidden));
    RETURN_IF_ERROR(device_->BiasAdd(n, hidden, p.b1, h));
    RETURN_IF_ERROR(device_->Relu(n * hidden, h, h));
    RETURN_IF_ERROR(
        device_->Gemm(false, false, n, 1, hidden, 1.0f, h, hidden, p.w2, 1, 0.0f, logits, 1));
    RETURN_IF_ERROR(device_->BiasAdd(n, 1, p.b2, logits));

    RETURN_IF_ERROR(device_->GatherRows(b.num_unique, 1, b.lr, b.index, n * f, lr_rows));
    RETURN_IF_ERROR(device_->SumPool(n, f, 1, lr_rows, lr_logits));
    RETURN_IF_ERROR(device_->BiasAdd(n, 1, p.lr_bias, lr_logits));
  }
  // On an accelerator the index check runs in the kernel: surface its error here.
  RETURN_IF_ERROR(device_->Synchronize());
  forward_n_ = n;
  return absl::OkStatus();
}

absl::Status CtrNet::CopyLogits(std::vector<float>* logits, std::vector<float>* lr_logits) const {
  if (forward_n_ < 0) return absl::FailedPreconditionError("CtrNet::CopyLogits before a Forward");
  logits->resize(forward_n_);
  lr_logits->resize(forward_n_);
  RETURN_IF_ERROR(device_->CopyToHost(logits_.data(), logits->data(), forward_n_ * 4));
  return device_->CopyToHost(lr_logits_.data(), lr_logits->data(), forward_n_ * 4);
}

absl::Status CtrNet::Backward(const CtrBatch& b, const CtrDenseParams& p, float* grads,
                              float* loss, float* lr_loss) {
  if (forward_n_ < 0 || forward_n_ != b.n) {
    return absl::InvalidArgumentError(absl::StrCat("CtrNet::Backward: a batch of ", b.n,
                                                   " examples after a Forward of ", forward_n_));
  }
  const int64_t n = b.n, f = shape_.features, d = shape_.dim, hidden = shape_.hidden;
  const int64_t in = shape_.input();
  const CtrGradLayout layout(shape_, b.num_unique);
  *loss = 0;
  *lr_loss = 0;
  // Every op below overwrites its whole output, so no zeroing (but for an empty batch).
  if (n == 0) return device_->Zero(grads, layout.size * 4);
  const float scale = static_cast<float>(n);  // mean-loss gradients -> summed-loss gradients
  ASSIGN_OR_RETURN(float* dlogits, Scratch(&dlogits_, n));
  ASSIGN_OR_RETURN(float* dh, Scratch(&dh_, n * hidden));
  ASSIGN_OR_RETURN(float* dx, Scratch(&dx_, n * in));
  ASSIGN_OR_RETURN(float* dlr, Scratch(&dlr_, n));
  ASSIGN_OR_RETURN(float* dlr_rows, Scratch(&dlr_rows_, n * f));
  ASSIGN_OR_RETURN(float* losses, Scratch(&losses_, 2));
  const float* x = x_.as<const float>();
  const float* h = h_.as<const float>();

  // The model: the dense weights' gradients of the mean loss, the rows' of the summed loss.
  RETURN_IF_ERROR(
      device_->SigmoidCrossEntropy(n, logits_.as<float>(), b.labels, &losses[0], dlogits));
  RETURN_IF_ERROR(device_->Gemm(true, false, hidden, 1, n, 1.0f, h, hidden, dlogits, 1, 0.0f,
                                grads + layout.w2, 1));
  RETURN_IF_ERROR(device_->BiasGrad(n, 1, dlogits, grads + layout.b2));
  RETURN_IF_ERROR(
      device_->Gemm(false, true, n, hidden, 1, 1.0f, dlogits, 1, p.w2, 1, 0.0f, dh, hidden));
  RETURN_IF_ERROR(device_->ReluGrad(n * hidden, h, dh, dh));
  RETURN_IF_ERROR(device_->Gemm(true, false, in, hidden, n, 1.0f, x, in, dh, hidden, 0.0f,
                                grads + layout.w1, hidden));
  RETURN_IF_ERROR(device_->BiasGrad(n, hidden, dh, grads + layout.b1));
  RETURN_IF_ERROR(
      device_->Gemm(false, true, n, in, hidden, scale, dh, hidden, p.w1, hidden, 0.0f, dx, in));
  RETURN_IF_ERROR(device_->SegmentSum(n * f, d, dx, b.index, b.num_unique, grads + layout.emb));

  // The logistic-regression baseline, likewise.
  RETURN_IF_ERROR(
      device_->SigmoidCrossEntropy(n, lr_logits_.as<float>(), b.labels, &losses[1], dlr));
  RETURN_IF_ERROR(device_->BiasGrad(n, 1, dlr, grads + layout.lr_bias));
  RETURN_IF_ERROR(device_->Scale(n, scale, dlr));
  RETURN_IF_ERROR(device_->SumPoolGrad(n, f, 1, dlr, dlr_rows));
  RETURN_IF_ERROR(
      device_->SegmentSum(n * f, 1, dlr_rows, b.index, b.num_unique, grads + layout.lr));
  float host_losses[2];
  RETURN_IF_ERROR(device_->CopyToHost(losses, host_losses, sizeof(host_losses)));  // waits
  *loss = host_losses[0];
  *lr_loss = host_losses[1];
  return absl::OkStatus();
}

namespace {

// Replica `part`'s slice of a host batch (all of its distinct rows, its examples' indices and
// labels) and the dense weights, on the replica's device.
absl::Status PutOnDevice(const CtrBatch& host, const CtrDenseParams& host_params,
                         const CtrNetShape& shape, BatchSlice part, HostInputs* in,
                         CtrBatch* batch, CtrDenseParams* params) {
  const int64_t f = shape.features;
  batch->n = part.size;
  batch->num_unique = host.num_unique;
  ASSIGN_OR_RETURN(batch->index, in->Put(host.index + part.begin * f, part.size * f));
  ASSIGN_OR_RETURN(batch->emb, in->Put(host.emb, host.num_unique * shape.dim));
  ASSIGN_OR_RETURN(batch->lr, in->Put(host.lr, host.num_unique));
  ASSIGN_OR_RETURN(batch->labels,
                   in->Put(host.labels == nullptr ? nullptr : host.labels + part.begin,
                           host.labels == nullptr ? 0 : part.size));
  ASSIGN_OR_RETURN(params->w1, in->Put(host_params.w1, shape.w1_size()));
  ASSIGN_OR_RETURN(params->b1, in->Put(host_params.b1, shape.hidden));
  ASSIGN_OR_RETURN(params->w2, in->Put(host_params.w2, shape.hidden));
  ASSIGN_OR_RETURN(params->b2, in->Put(host_params.b2, 1));
  ASSIGN_OR_RETURN(params->lr_bias, in->Put(host_params.lr_bias, 1));
  return absl::OkStatus();
}

}  // namespace

absl::Status CtrReplicatedStep(ReplicaGroup* group, const CtrNetShape& shape,
                               const CtrBatch& host, const CtrDenseParams& host_params,
                               std::vector<float>* grads, float* loss, float* lr_loss) {
  const int replicas = group->num_replicas();
  const int64_t n = host.n;
  const CtrGradLayout layout(shape, host.num_unique);
  grads->resize(layout.size);
  std::vector<double> losses(replicas), lr_losses(replicas);
  auto step = [&](int r, Device* device, float* replica_grads) -> absl::Status {
    HostInputs in(device);
    CtrBatch batch;
    CtrDenseParams params;
    RETURN_IF_ERROR(
        PutOnDevice(host, host_params, shape, group->Slice(n, r), &in, &batch, &params));
    CtrNet net(device, shape);
    RETURN_IF_ERROR(net.Forward(batch, params));
    float replica_loss = 0, replica_lr_loss = 0;
    RETURN_IF_ERROR(
        net.Backward(batch, params, replica_grads, &replica_loss, &replica_lr_loss));
    const double weight = group->Weight(n, r);
    losses[r] = weight * replica_loss;
    lr_losses[r] = weight * replica_lr_loss;
    if (replicas == 1) return absl::OkStatus();
    RETURN_IF_ERROR(device->Scale(layout.size - layout.w1, static_cast<float>(weight),
                                  replica_grads + layout.w1));
    return device->Synchronize();  // before `in` and `net` free what the ops read
  };
  RETURN_IF_ERROR(group->RunAndSum(grads->data(), layout.size, step));
  double total = 0, lr_total = 0;
  for (int r = 0; r < replicas; ++r) {
    total += losses[r];
    lr_total += lr_losses[r];
  }
  *loss = static_cast<float>(total);
  *lr_loss = static_cast<float>(lr_total);
  return absl::OkStatus();
}

absl::Status CtrReplicatedForward(ReplicaGroup* group, const CtrNetShape& shape,
                                  const CtrBatch& host, const CtrDenseParams& host_params,
                                  std::vector<float>* logits, std::vector<float>* lr_logits) {
  if (host.n < 0) {
    return absl::InvalidArgumentError(absl::StrCat("CtrNet: n ", host.n, " must be >= 0"));
  }
  logits->resize(host.n);
  lr_logits->resize(host.n);
  return group->Run([&](int r, Device* device) -> absl::Status {
    const BatchSlice part = group->Slice(host.n, r);
    if (part.size == 0) return absl::OkStatus();
    HostInputs in(device);
    CtrBatch batch;
    CtrDenseParams params;
    RETURN_IF_ERROR(PutOnDevice(host, host_params, shape, part, &in, &batch, &params));
    CtrNet net(device, shape);
    RETURN_IF_ERROR(net.Forward(batch, params));
    std::vector<float> a, b;
    RETURN_IF_ERROR(net.CopyLogits(&a, &b));  // waits for the forward pass
    std::copy(a.begin(), a.end(), logits->begin() + part.begin);
    std::copy(b.begin(), b.end(), lr_logits->begin() + part.begin);
    return absl::OkStatus();
  });
}

}  // namespace pstrain
