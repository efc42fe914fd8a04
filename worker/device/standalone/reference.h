// Plain C++ references of the CUDA kernels for the standalone check (no Abseil, no Bazel): the
// same semantics as worker/device's CPU device (device.h), written as the simplest loops. Row-major
// matrices, float32, int32 indices.
#ifndef PSTRAIN_WORKER_DEVICE_STANDALONE_REFERENCE_H_
#define PSTRAIN_WORKER_DEVICE_STANDALONE_REFERENCE_H_

#include <cstdint>
#include <vector>

namespace pstrain {
namespace cuda_kernels {
struct Window2DArgs;
}  // namespace cuda_kernels

namespace reference {

// C = alpha * op(A) op(B) + beta * C (beta == 0 ignores C).
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void BiasAdd(int64_t rows, int64_t cols, const float* bias, float* x);
void BiasGrad(int64_t rows, int64_t cols, const float* dy, float* dbias);
void Relu(int64_t n, const float* x, float* y);
void ReluGrad(int64_t n, const float* y, const float* dy, float* dx);
void Sigmoid(int64_t n, const float* x, float* y);
// Returns the mean loss.
float SoftmaxCrossEntropy(int64_t rows, int64_t classes, const float* logits,
                          const int32_t* labels, float* probs);
void SoftmaxCrossEntropyGrad(int64_t rows, int64_t classes, const float* probs,
                             const int32_t* labels, float* dlogits);
float SigmoidCrossEntropy(int64_t n, const float* logits, const float* labels, float* dlogits);
float MeanSquaredError(int64_t n, const float* predictions, const float* targets, float* dpred);
// Returns the number of distinct ids (in order of first appearance in unique_ids).
int64_t Unique(int64_t n, const int64_t* ids, int64_t* unique_ids, int32_t* index);
void GatherRows(int64_t dim, const float* table, const int32_t* index, int64_t n, float* out);
void SumPool(int64_t batch, int64_t features, int64_t dim, const float* in, float* out);
void SumPoolGrad(int64_t batch, int64_t features, int64_t dim, const float* dout, float* din);
void SegmentSum(int64_t n, int64_t dim, const float* grads, const int32_t* index,
                int64_t num_unique, float* out);
void Axpy(int64_t n, float alpha, const float* x, float* y);
void RowDot(int64_t rows, int64_t dim, const float* a, const float* b, float* out);
void RowDotGrad(int64_t rows, int64_t dim, const float* a, const float* b, const float* dout,
                float* da, float* db);
// Convolution and pooling on NHWC images (cuda_kernels.h's Window2DArgs): the column matrix of
// `images` images; its fold back (overwriting d_input, each element's entries added in output
// pixel order); max pooling with each max's index within its image (the first on ties); and its
// gradient (overwriting d_input, added in output order).
void Im2Col(const cuda_kernels::Window2DArgs& w, int64_t images, const float* input, float* col);
void Col2Im(const cuda_kernels::Window2DArgs& w, int64_t images, const float* col,
            float* d_input);
void MaxPool2D(const cuda_kernels::Window2DArgs& w, const float* input, float* output,
               int32_t* argmax);
void MaxPool2DGrad(const cuda_kernels::Window2DArgs& w, const float* d_output,
                   const int32_t* argmax, float* d_input);

}  // namespace reference
}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DEVICE_STANDALONE_REFERENCE_H_
