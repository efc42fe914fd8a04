#include "reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "worker/device/cuda_kernels.h"

namespace pstrain {
namespace reference {
namespace {

float StableSigmoid(float x) {
  const float e = std::exp(-std::fabs(x));
  return x >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

}  // namespace

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  std::vector<float> row(n);
  for (int64_t i = 0; i < m; ++i) {
    std::fill(row.begin(), row.end(), 0.0f);
    for (int64_t p = 0; p < k; ++p) {
      const float av = trans_a ? a[p * lda + i] : a[i * lda + p];
      if (!trans_b) {
        const float* bp = b + p * ldb;
        for (int64_t j = 0; j < n; ++j) row[j] += av * bp[j];
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] += av * b[j * ldb + p];
      }
    }
    float* ci = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) {
      ci[j] = beta == 0 ? alpha * row[j] : alpha * row[j] + beta * ci[j];
    }
  }
}

void BiasAdd(int64_t rows, int64_t cols, const float* bias, float* x) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] += bias[c];
  }
}

void BiasGrad(int64_t rows, int64_t cols, const float* dy, float* dbias) {
  std::vector<double> sum(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) sum[c] += dy[r * cols + c];
  }
  for (int64_t c = 0; c < cols; ++c) dbias[c] = static_cast<float>(sum[c]);
}

void Relu(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::max(x[i], 0.0f);
}

void ReluGrad(int64_t n, const float* y, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0 ? dy[i] : 0.0f;
}

void Sigmoid(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = StableSigmoid(x[i]);
}

float SoftmaxCrossEntropy(int64_t rows, int64_t classes, const float* logits,
                          const int32_t* labels, float* probs) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * classes;
    float* p = probs + r * classes;
    const float x_label = x[labels[r]];
    float max = x[0];
    for (int64_t j = 1; j < classes; ++j) max = std::max(max, x[j]);
    float sum = 0;
    for (int64_t j = 0; j < classes; ++j) {
      p[j] = std::exp(x[j] - max);
      sum += p[j];
    }
    for (int64_t j = 0; j < classes; ++j) p[j] /= sum;
    total += std::log(static_cast<double>(sum)) - (x_label - max);
  }
  return rows == 0 ? 0.0f : static_cast<float>(total / rows);
}

void SoftmaxCrossEntropyGrad(int64_t rows, int64_t classes, const float* probs,
                             const int32_t* labels, float* dlogits) {
  const float scale = 1.0f / rows;
  for (int64_t i = 0; i < rows * classes; ++i) dlogits[i] = probs[i] * scale;
  for (int64_t r = 0; r < rows; ++r) dlogits[r * classes + labels[r]] -= scale;
}

float SigmoidCrossEntropy(int64_t n, const float* logits, const float* labels, float* dlogits) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float x = logits[i], y = labels[i];
    total += std::max(x, 0.0f) - x * y + std::log1p(std::exp(-std::fabs(x)));
    if (dlogits != nullptr) dlogits[i] = (StableSigmoid(x) - y) / n;
  }
  return n == 0 ? 0.0f : static_cast<float>(total / n);
}

float MeanSquaredError(int64_t n, const float* predictions, const float* targets, float* dpred) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float d = predictions[i] - targets[i];
    total += static_cast<double>(d) * d;
    if (dpred != nullptr) dpred[i] = d * (2.0f / n);
  }
  return n == 0 ? 0.0f : static_cast<float>(total / n);
}

int64_t Unique(int64_t n, const int64_t* ids, int64_t* unique_ids, int32_t* index) {
  std::unordered_map<int64_t, int32_t> position;
  position.reserve(n);
  int32_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    auto [it, inserted] = position.emplace(ids[i], count);
    if (inserted) unique_ids[count++] = ids[i];
    index[i] = it->second;
  }
  return count;
}

void GatherRows(int64_t dim, const float* table, const int32_t* index, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(out + i * dim, table + static_cast<int64_t>(index[i]) * dim, dim * sizeof(float));
  }
}

void SumPool(int64_t batch, int64_t features, int64_t dim, const float* in, float* out) {
  for (int64_t b = 0; b < batch; ++b) {
    float* o = out + b * dim;
    const float* x = in + b * features * dim;
    for (int64_t j = 0; j < dim; ++j) o[j] = features == 0 ? 0.0f : x[j];
    for (int64_t f = 1; f < features; ++f) {
      for (int64_t j = 0; j < dim; ++j) o[j] += x[f * dim + j];
    }
  }
}

void SumPoolGrad(int64_t batch, int64_t features, int64_t dim, const float* dout, float* din) {
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t f = 0; f < features; ++f) {
      std::memcpy(din + (b * features + f) * dim, dout + b * dim, dim * sizeof(float));
    }
  }
}

void SegmentSum(int64_t n, int64_t dim, const float* grads, const int32_t* index,
                int64_t num_unique, float* out) {
  std::fill(out, out + num_unique * dim, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    float* o = out + static_cast<int64_t>(index[i]) * dim;
    for (int64_t j = 0; j < dim; ++j) o[j] += grads[i * dim + j];
  }
}

void Axpy(int64_t n, float alpha, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void RowDot(int64_t rows, int64_t dim, const float* a, const float* b, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < dim; ++j) sum += a[r * dim + j] * b[r * dim + j];
    out[r] = static_cast<float>(sum);
  }
}

void RowDotGrad(int64_t rows, int64_t dim, const float* a, const float* b, const float* dout,
                float* da, float* db) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < dim; ++j) {
      da[r * dim + j] = dout[r] * b[r * dim + j];
      db[r * dim + j] = dout[r] * a[r * dim + j];
    }
  }
}


// Image row (or column) of window position k at output position o, or -1 outside the image.
int64_t Source(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t in) {
  const int64_t v = o * stride - pad + k;
  return v >= 0 && v < in ? v : -1;
}

void Im2Col(const cuda_kernels::Window2DArgs& w, int64_t images, const float* input, float* col) {
  for (int64_t n = 0; n < images; ++n) {
    for (int64_t oy = 0; oy < w.out_height; ++oy) {
      for (int64_t ox = 0; ox < w.out_width; ++ox) {
        for (int64_t ky = 0; ky < w.window_height; ++ky) {
          const int64_t y = Source(oy, ky, w.stride_height, w.pad_top, w.height);
          for (int64_t kx = 0; kx < w.window_width; ++kx) {
            const int64_t x = Source(ox, kx, w.stride_width, w.pad_left, w.width);
            for (int64_t c = 0; c < w.channels; ++c) {
              *col++ = y < 0 || x < 0 ? 0.0f
                                      : input[((n * w.height + y) * w.width + x) * w.channels + c];
            }
          }
        }
      }
    }
  }
}

void Col2Im(const cuda_kernels::Window2DArgs& w, int64_t images, const float* col,
            float* d_input) {
  std::fill(d_input, d_input + images * w.height * w.width * w.channels, 0.0f);
  for (int64_t n = 0; n < images; ++n) {
    for (int64_t oy = 0; oy < w.out_height; ++oy) {
      for (int64_t ox = 0; ox < w.out_width; ++ox) {
        for (int64_t ky = 0; ky < w.window_height; ++ky) {
          const int64_t y = Source(oy, ky, w.stride_height, w.pad_top, w.height);
          for (int64_t kx = 0; kx < w.window_width; ++kx) {
            const int64_t x = Source(ox, kx, w.stride_width, w.pad_left, w.width);
            for (int64_t c = 0; c < w.channels; ++c, ++col) {
              if (y >= 0 && x >= 0) {
                d_input[((n * w.height + y) * w.width + x) * w.channels + c] += *col;
              }
            }
          }
        }
      }
    }
  }
}

void MaxPool2D(const cuda_kernels::Window2DArgs& w, const float* input, float* output,
               int32_t* argmax) {
  for (int64_t n = 0; n < w.batch; ++n) {
    const float* image = input + n * w.height * w.width * w.channels;
    for (int64_t oy = 0; oy < w.out_height; ++oy) {
      for (int64_t ox = 0; ox < w.out_width; ++ox) {
        for (int64_t c = 0; c < w.channels; ++c, ++output, ++argmax) {
          int64_t best = -1;
          for (int64_t ky = 0; ky < w.window_height; ++ky) {
            const int64_t y = Source(oy, ky, w.stride_height, w.pad_top, w.height);
            for (int64_t kx = 0; kx < w.window_width; ++kx) {
              const int64_t x = Source(ox, kx, w.stride_width, w.pad_left, w.width);
              if (y < 0 || x < 0) continue;
              const int64_t at = (y * w.width + x) * w.channels + c;
              if (best < 0 || image[at] > image[best]) best = at;
            }
          }
          *output = image[best];
          *argmax = static_cast<int32_t>(best);
        }
      }
    }
  }
}

void MaxPool2DGrad(const cuda_kernels::Window2DArgs& w, const float* d_output,
                   const int32_t* argmax, float* d_input) {
  const int64_t image = w.height * w.width * w.channels;
  const int64_t out_image = w.out_height * w.out_width * w.channels;
  std::fill(d_input, d_input + w.batch * image, 0.0f);
  for (int64_t i = 0; i < w.batch * out_image; ++i) {
    d_input[i / out_image * image + argmax[i]] += d_output[i];
  }
}

}  // namespace reference
}  // namespace pstrain
