#include "models/tabular/tabular_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace tabular {

NetShape::NetShape(const Spec& spec, const ExampleLayout& layout, int k)
    : features(static_cast<int>(layout.embedded.size())),
      dim(spec.model.embedding_dim),
      dense(layout.num_dense),
      dot(spec.model.interaction == Interaction::kDot),
      hidden(spec.model.hidden),
      outputs(k),
      deep(spec.model.type != ModelType::kWide),
      wide(spec.model.type != ModelType::kDeep),
      baseline(spec.model.type != ModelType::kWide),
      task(spec.label.task) {}

int64_t NetShape::input() const {
  return features * dim + dense + (dot ? int64_t{features} * (features - 1) / 2 : 0);
}

std::vector<int64_t> NetShape::widths() const {
  std::vector<int64_t> w = {input()};
  w.insert(w.end(), hidden.begin(), hidden.end());
  w.push_back(outputs);
  return w;
}

TabularNet::TabularNet(Device* device, const Spec& spec, const ExampleLayout& layout,
                       NetShape shape)
    : device_(device), layout_(layout), shape_(std::move(shape)) {
  for (int f : layout.embedded) {
    slot_first_.push_back(layout.first_slot[f]);
    slot_count_.push_back(layout.slots[f]);
    mean_.push_back(!spec.features[f].separator.empty() &&
                    spec.features[f].pooling == Pooling::kMean);
  }
}

absl::StatusOr<float*> TabularNet::Scratch(DeviceBuffer* b, int64_t count) {
  const int64_t bytes = std::max<int64_t>(count, 1) * static_cast<int64_t>(sizeof(float));
  if (b->bytes() < bytes) {
    ASSIGN_OR_RETURN(*b, device_->Allocate(bytes));
  }
  return b->as<float>();
}

double TabularNet::Loss(Task task, int64_t n, int k, const float* logits, const float* labels,
                        float* dlogits) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* x = logits + i * k;
    float* g = dlogits == nullptr ? nullptr : dlogits + i * k;
    switch (task) {
      case Task::kBinary: {
        const double v = x[0], y = labels[i];
        total += std::max(v, 0.0) - v * y + std::log1p(std::exp(-std::abs(v)));
        if (g != nullptr) g[0] = static_cast<float>(1.0 / (1.0 + std::exp(-v)) - y);
        break;
      }
      case Task::kRegression: {
        const double e = static_cast<double>(x[0]) - labels[i];
        total += e * e;
        if (g != nullptr) g[0] = static_cast<float>(2 * e);
        break;
      }
      case Task::kMulticlass: {
        const int y = static_cast<int>(labels[i]);
        double m = x[0];
        for (int c = 1; c < k; ++c) m = std::max<double>(m, x[c]);
        double sum = 0;
        for (int c = 0; c < k; ++c) sum += std::exp(x[c] - m);
        total += std::log(sum) + m - x[y];
        if (g != nullptr) {
          for (int c = 0; c < k; ++c) {
            g[c] = static_cast<float>(std::exp(x[c] - m) / sum - (c == y ? 1.0 : 0.0));
          }
        }
        break;
      }
    }
  }
  return total;
}

absl::Status TabularNet::Run(const NetBatch& batch, const NetParams& params, NetOutput* out,
                             NetGrads* grads) {
  RETURN_IF_ERROR(CheckSlotRows(batch));
  const int64_t n = batch.n, d = shape_.dim;
  const int K = shape_.outputs;
  const std::vector<float> inv_count = InverseCounts(batch);
  out->logits.assign(n * K, 0.0f);
  std::vector<float> x;  // the deep part's input
  if (shape_.deep) {
    x = DeepInput(batch, inv_count);
    RETURN_IF_ERROR(DeepForward(x, n, params, out->logits.data()));
  }
  if (shape_.wide) {
    WideForward(batch, inv_count, batch.wide, params.wide_dense, params.wide_bias,
                out->logits.data());
  }
  if (shape_.baseline) {
    out->base_logits.assign(n * K, 0.0f);
    WideForward(batch, inv_count, batch.base, params.base_dense, params.base_bias,
                out->base_logits.data());
  }
  if (grads == nullptr) return device_->Synchronize();

  // Losses and per-row gradients (of the summed loss).
  std::vector<float> g(n * K), bg;
  out->loss = n > 0 ? Loss(shape_.task, n, K, out->logits.data(), batch.labels, g.data()) / n : 0;
  if (shape_.baseline) {
    bg.resize(n * K);
    out->base_loss =
        n > 0 ? Loss(shape_.task, n, K, out->base_logits.data(), batch.labels, bg.data()) / n : 0;
  }
  const float inv_n = n > 0 ? 1.0f / static_cast<float>(n) : 0.0f;
  if (shape_.wide) {
    WideBackward(batch, inv_count, inv_n, g, &grads->wide, &grads->wide_dense, &grads->wide_bias);
  }
  if (shape_.baseline) {
    WideBackward(batch, inv_count, inv_n, bg, &grads->base, &grads->base_dense, &grads->base_bias);
  }

  grads->emb.assign(shape_.deep ? batch.num_unique * d : 0, 0.0f);
  if (!shape_.deep) return absl::OkStatus();
  const std::vector<int64_t> widths = shape_.widths();
  const int layers = static_cast<int>(widths.size()) - 1;
  grads->w.resize(layers);
  grads->b.resize(layers);
  for (int l = 0; l < layers; ++l) {
    grads->w[l].assign(widths[l] * widths[l + 1], 0.0f);
    grads->b[l].assign(widths[l + 1], 0.0f);
  }
  if (n == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<float> dx, DeepBackward(n, g, inv_n, grads));
  EmbeddingGrads(batch, inv_count, x, &dx, &grads->emb);
  return absl::OkStatus();
}

absl::Status TabularNet::CheckSlotRows(const NetBatch& batch) const {
  const int64_t n = batch.n;
  const int S = layout_.num_slots;
  for (int64_t i = 0; i < n * S; ++i) {
    if (batch.slot_rows[i] < -1 || batch.slot_rows[i] >= batch.num_unique) {
      return absl::InvalidArgumentError(absl::StrCat("tabular net: slot row ", batch.slot_rows[i],
                                                     " outside [0, ", batch.num_unique, ")"));
    }
  }
  return absl::OkStatus();
}

std::vector<float> TabularNet::InverseCounts(const NetBatch& batch) const {
  const int64_t n = batch.n;
  const int F = shape_.features, S = layout_.num_slots;
  std::vector<float> inv_count(n * F, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int e = 0; e < F; ++e) {
      if (!mean_[e]) continue;
      int c = 0;
      for (int s = 0; s < slot_count_[e]; ++s) c += batch.slot_rows[i * S + slot_first_[e] + s] >= 0;
      inv_count[i * F + e] = c > 0 ? 1.0f / static_cast<float>(c) : 0.0f;
    }
  }
  return inv_count;
}

std::vector<float> TabularNet::DeepInput(const NetBatch& batch,
                                         const std::vector<float>& inv_count) const {
  const int64_t n = batch.n, d = shape_.dim, D = shape_.dense, in = shape_.input();
  const int F = shape_.features, S = layout_.num_slots;
  std::vector<float> x(n * in, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    float* xi = x.data() + i * in;
    for (int e = 0; e < F; ++e) {
      float* pooled = xi + e * d;
      for (int s = 0; s < slot_count_[e]; ++s) {
        const int32_t row = batch.slot_rows[i * S + slot_first_[e] + s];
        if (row < 0) continue;
        const float* r = batch.emb + static_cast<int64_t>(row) * d;
        for (int64_t j = 0; j < d; ++j) pooled[j] += r[j];
      }
      if (mean_[e]) {
        for (int64_t j = 0; j < d; ++j) pooled[j] *= inv_count[i * F + e];
      }
    }
    if (D > 0) std::memcpy(xi + F * d, batch.dense + i * D, sizeof(float) * D);
    if (shape_.dot) {
      float* dots = xi + F * d + D;
      int p = 0;
      for (int a = 0; a < F; ++a) {
        for (int b = a + 1; b < F; ++b) {
          float s = 0;
          for (int64_t j = 0; j < d; ++j) s += xi[a * d + j] * xi[b * d + j];
          dots[p++] = s;
        }
      }
    }
  }
  return x;
}

absl::Status TabularNet::DeepForward(const std::vector<float>& x, int64_t n,
                                     const NetParams& params, float* logits) {
  const int64_t in = shape_.input();
  const int K = shape_.outputs;
  const std::vector<int64_t> widths = shape_.widths();
  const int layers = static_cast<int>(widths.size()) - 1;
  // Parameters and input to the device; then the layers.
  int64_t total = 0;
  for (int l = 0; l < layers; ++l) total += widths[l] * widths[l + 1] + widths[l + 1];
  ASSIGN_OR_RETURN(float* dev_params, Scratch(&params_, total));
  std::vector<float*> w(layers), b(layers);
  int64_t at = 0;
  for (int l = 0; l < layers; ++l) {
    w[l] = dev_params + at;
    RETURN_IF_ERROR(device_->CopyToDevice(params.w[l], w[l], widths[l] * widths[l + 1] * 4));
    at += widths[l] * widths[l + 1];
    b[l] = dev_params + at;
    RETURN_IF_ERROR(device_->CopyToDevice(params.b[l], b[l], widths[l + 1] * 4));
    at += widths[l + 1];
  }
  act_.resize(layers + 1);
  std::vector<float*> act(layers + 1);
  for (int l = 0; l <= layers; ++l) {
    ASSIGN_OR_RETURN(act[l], Scratch(&act_[l], n * widths[l]));
  }
  if (n == 0) return absl::OkStatus();
  RETURN_IF_ERROR(device_->CopyToDevice(x.data(), act[0], n * in * 4));
  for (int l = 0; l < layers; ++l) {
    RETURN_IF_ERROR(device_->Gemm(false, false, n, widths[l + 1], widths[l], 1.0f, act[l],
                                  widths[l], w[l], widths[l + 1], 0.0f, act[l + 1],
                                  widths[l + 1]));
    RETURN_IF_ERROR(device_->BiasAdd(n, widths[l + 1], b[l], act[l + 1]));
    if (l + 1 < layers) RETURN_IF_ERROR(device_->Relu(n * widths[l + 1], act[l + 1], act[l + 1]));
  }
  return device_->CopyToHost(act[layers], logits, n * K * 4);
}

void TabularNet::WideForward(const NetBatch& batch, const std::vector<float>& inv_count,
                             const float* rows, const float* dense_w, const float* bias,
                             float* logits) const {
  const int64_t n = batch.n, D = shape_.dense;
  const int F = shape_.features, K = shape_.outputs, S = layout_.num_slots;
  for (int64_t i = 0; i < n; ++i) {
    float* o = logits + i * K;
    for (int k = 0; k < K; ++k) o[k] += bias[k];
    for (int e = 0; e < F; ++e) {
      const float scale = inv_count[i * F + e];
      for (int s = 0; s < slot_count_[e]; ++s) {
        const int32_t row = batch.slot_rows[i * S + slot_first_[e] + s];
        if (row < 0) continue;
        for (int k = 0; k < K; ++k) o[k] += scale * rows[static_cast<int64_t>(row) * K + k];
      }
    }
    for (int64_t j = 0; j < D; ++j) {
      const float v = batch.dense[i * D + j];
      for (int k = 0; k < K; ++k) o[k] += v * dense_w[j * K + k];
    }
  }
}

void TabularNet::WideBackward(const NetBatch& batch, const std::vector<float>& inv_count,
                              float inv_n, const std::vector<float>& gr, std::vector<float>* rows,
                              std::vector<float>* dense_w, std::vector<float>* bias) const {
  const int64_t n = batch.n, D = shape_.dense;
  const int F = shape_.features, K = shape_.outputs, S = layout_.num_slots;
  rows->assign(batch.num_unique * K, 0.0f);
  dense_w->assign(D * K, 0.0f);
  bias->assign(K, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float* gi = gr.data() + i * K;
    for (int k = 0; k < K; ++k) (*bias)[k] += gi[k] * inv_n;
    for (int e = 0; e < F; ++e) {
      const float scale = inv_count[i * F + e];
      for (int s = 0; s < slot_count_[e]; ++s) {
        const int32_t row = batch.slot_rows[i * S + slot_first_[e] + s];
        if (row < 0) continue;
        for (int k = 0; k < K; ++k) (*rows)[static_cast<int64_t>(row) * K + k] += scale * gi[k];
      }
    }
    for (int64_t j = 0; j < D; ++j) {
      const float v = batch.dense[i * D + j] * inv_n;
      for (int k = 0; k < K; ++k) (*dense_w)[j * K + k] += v * gi[k];
    }
  }
}

absl::StatusOr<std::vector<float>> TabularNet::DeepBackward(int64_t n, const std::vector<float>& g,
                                                            float inv_n, NetGrads* grads) {
  const int64_t in = shape_.input();
  const int K = shape_.outputs;
  const std::vector<int64_t> widths = shape_.widths();
  const int layers = static_cast<int>(widths.size()) - 1;
  // Backward through the layers, with the mean loss's gradients.
  std::vector<float> gm(n * K);
  for (int64_t i = 0; i < n * K; ++i) gm[i] = g[i] * inv_n;
  grad_.resize(layers + 1);
  std::vector<float*> grad(layers + 1), act(layers + 1);
  for (int l = 0; l <= layers; ++l) {
    ASSIGN_OR_RETURN(grad[l], Scratch(&grad_[l], n * widths[l]));
    act[l] = act_[l].as<float>();
  }
  dparams_.resize(2 * layers);
  RETURN_IF_ERROR(device_->CopyToDevice(gm.data(), grad[layers], n * K * 4));
  const float* dev_params = params_.as<float>();
  int64_t at = 0;
  std::vector<const float*> w(layers);
  for (int l = 0; l < layers; ++l) {
    w[l] = dev_params + at;
    at += widths[l] * widths[l + 1] + widths[l + 1];
  }
  for (int l = layers - 1; l >= 0; --l) {
    ASSIGN_OR_RETURN(float* dw, Scratch(&dparams_[2 * l], widths[l] * widths[l + 1]));
    ASSIGN_OR_RETURN(float* db, Scratch(&dparams_[2 * l + 1], widths[l + 1]));
    RETURN_IF_ERROR(device_->Gemm(true, false, widths[l], widths[l + 1], n, 1.0f, act[l],
                                  widths[l], grad[l + 1], widths[l + 1], 0.0f, dw, widths[l + 1]));
    RETURN_IF_ERROR(device_->BiasGrad(n, widths[l + 1], grad[l + 1], db));
    RETURN_IF_ERROR(device_->Gemm(false, true, n, widths[l], widths[l + 1], 1.0f, grad[l + 1],
                                  widths[l + 1], w[l], widths[l + 1], 0.0f, grad[l], widths[l]));
    if (l > 0) RETURN_IF_ERROR(device_->ReluGrad(n * widths[l], act[l], grad[l], grad[l]));
    RETURN_IF_ERROR(device_->CopyToHost(dw, grads->w[l].data(), widths[l] * widths[l + 1] * 4));
    RETURN_IF_ERROR(device_->CopyToHost(db, grads->b[l].data(), widths[l + 1] * 4));
  }
  std::vector<float> dx(n * in);
  RETURN_IF_ERROR(device_->CopyToHost(grad[0], dx.data(), n * in * 4));
  return dx;
}

void TabularNet::EmbeddingGrads(const NetBatch& batch, const std::vector<float>& inv_count,
                                const std::vector<float>& x, std::vector<float>* dx,
                                std::vector<float>* emb) const {
  const int64_t n = batch.n, d = shape_.dim, D = shape_.dense, in = shape_.input();
  const int F = shape_.features, S = layout_.num_slots;
  // dx is the mean loss's; the tables take the summed loss's: times n.
  const float scale_n = static_cast<float>(n);
  for (int64_t i = 0; i < n; ++i) {
    float* dxi = dx->data() + i * in;
    const float* xi = x.data() + i * in;
    if (shape_.dot) {
      const float* ddots = dxi + F * d + D;
      int p = 0;
      for (int a = 0; a < F; ++a) {
        for (int b = a + 1; b < F; ++b) {
          const float gp = ddots[p++];
          for (int64_t j = 0; j < d; ++j) {
            dxi[a * d + j] += gp * xi[b * d + j];
            dxi[b * d + j] += gp * xi[a * d + j];
          }
        }
      }
    }
    for (int e = 0; e < F; ++e) {
      const float scale = scale_n * inv_count[i * F + e];
      const float* dp = dxi + e * d;
      for (int s = 0; s < slot_count_[e]; ++s) {
        const int32_t row = batch.slot_rows[i * S + slot_first_[e] + s];
        if (row < 0) continue;
        float* gr = emb->data() + static_cast<int64_t>(row) * d;
        for (int64_t j = 0; j < d; ++j) gr[j] += scale * dp[j];
      }
    }
  }
}

}  // namespace tabular
}  // namespace pstrain
