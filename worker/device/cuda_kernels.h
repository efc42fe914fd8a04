// The CUDA kernels of worker/device's GPU backend, behind plain launch functions: no Abseil and no
// Bazel, so that both the CUDA device (cuda_device.cc) and the standalone kernel check
// (standalone/, built with CMake on a GPU machine) call the same code. Internal to worker/device.
//
// Each function enqueues its work on `stream` and returns the launch error (cudaSuccess, or the
// first CUDA error), without synchronizing. Pointers are device pointers. Sizes are what Device's
// argument checks let through (non-negative, products within int64), and the ops' semantics are
// those of device.h, to which the results are compared in the tests.
//
// Data-dependent errors (an index or a label out of range) cannot be known at launch: the kernel
// records one of them in `*error` (a KernelError in device memory, all zero to start) and carries
// on (a bad row is written as zeros, a bad label's loss term skipped); the caller reads the record
// when it synchronizes.
//
// Reductions run in a fixed order (no float atomics), so results are deterministic run to run.
// SegmentSum and SumPool add in the CPU reference's order and match it bit for bit.
#ifndef PSTRAIN_WORKER_DEVICE_CUDA_KERNELS_H_
#define PSTRAIN_WORKER_DEVICE_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pstrain {
namespace cuda_kernels {

// Which op recorded a KernelError.
enum KernelOp : int32_t {
  kNoError = 0,
  kGatherRows = 1,
  kSegmentSum = 2,
  kSoftmaxCrossEntropy = 3,
  kSoftmaxCrossEntropyGrad = 4,
  kMaxPool2DGrad = 5,  // `value` is the bad argmax, `limit` the image's size in elements
};

// "GatherRows", ...; "unknown op" for anything else.
const char* KernelOpName(int32_t op);

// A data-dependent error, in device memory. `op` is kNoError until a kernel claims the record.
struct KernelError {
  int32_t op;        // a KernelOp
  int32_t value;     // the bad index or label
  int64_t position;  // its position in the index or label array
  int64_t limit;     // the valid range was [0, limit)
};

// ---- Dense layers ------------------------------------------------------------------------------
// (Gemm is cuBLAS, called by the device.)

cudaError_t BiasAdd(int64_t rows, int64_t cols, const float* bias, float* x, cudaStream_t stream);
cudaError_t BiasGrad(int64_t rows, int64_t cols, const float* dy, float* dbias,
                     cudaStream_t stream);
cudaError_t Relu(int64_t n, const float* x, float* y, cudaStream_t stream);
cudaError_t ReluGrad(int64_t n, const float* y, const float* dy, float* dx, cudaStream_t stream);
cudaError_t Sigmoid(int64_t n, const float* x, float* y, cudaStream_t stream);

// ---- Losses ------------------------------------------------------------------------------------
// Each writes the mean loss as one float at `loss` (0 for an empty batch). `scratch` is
// kLossScratchBytes of device memory for the partial sums, not shared with another op in flight.

constexpr size_t kLossScratchBytes = 256 * sizeof(double);

cudaError_t SoftmaxCrossEntropy(int64_t rows, int64_t classes, const float* logits,
                                const int32_t* labels, float* probs, float* loss, void* scratch,
                                KernelError* error, cudaStream_t stream);
cudaError_t SoftmaxCrossEntropyGrad(int64_t rows, int64_t classes, const float* probs,
                                    const int32_t* labels, float* dlogits, KernelError* error,
                                    cudaStream_t stream);
// dlogits may be null (forward only).
cudaError_t SigmoidCrossEntropy(int64_t n, const float* logits, const float* labels, float* loss,
                                float* dlogits, void* scratch, cudaStream_t stream);
// dpred may be null.
cudaError_t MeanSquaredError(int64_t n, const float* predictions, const float* targets,
                             float* loss, float* dpred, void* scratch, cudaStream_t stream);

// ---- Embeddings --------------------------------------------------------------------------------

// Unique by sort: a stable radix sort of (id, position) pairs, segment heads marking each id's
// first position, an exclusive scan of those marks numbering the distinct ids in order of first
// appearance (the CPU's order), and a max-scan spreading each segment's number to its members.
// n in [1, 2^31). Writes the count to *num_unique (device memory). *bytes = the scratch it needs
// (asks CUB, which needs the current device set).
cudaError_t UniqueScratchBytes(int64_t n, size_t* bytes);
cudaError_t Unique(int64_t n, const int64_t* ids, int64_t* unique_ids, int32_t* index,
                   int64_t* num_unique, void* scratch, size_t scratch_bytes, cudaStream_t stream);

cudaError_t GatherRows(int64_t num_rows, int64_t dim, const float* table, const int32_t* index,
                       int64_t n, float* out, KernelError* error, cudaStream_t stream);
cudaError_t SumPool(int64_t batch, int64_t features, int64_t dim, const float* in, float* out,
                    cudaStream_t stream);
cudaError_t SumPoolGrad(int64_t batch, int64_t features, int64_t dim, const float* dout,
                        float* din, cudaStream_t stream);

// SegmentSum by sort/segment-reduce: a stable radix sort of (index, position) pairs on just the
// bits num_unique needs, segment offsets per output row, then each output element sums its
// segment's gradient rows in position order (no atomics; the CPU's order, so bit-identical).
// n in [0, 2^31), num_unique in [1, 2^31). Rows no index names come out zero.
cudaError_t SegmentSumScratchBytes(int64_t n, int64_t num_unique, size_t* bytes);
cudaError_t SegmentSum(int64_t n, int64_t dim, const float* grads, const int32_t* index,
                       int64_t num_unique, float* out, void* scratch, size_t scratch_bytes,
                       KernelError* error, cudaStream_t stream);

// ---- Convolution and pooling -------------------------------------------------------------------

// device.h's Window2D and its Window2DOutput, as plain numbers: NHWC images [batch, height, width,
// channels], a window of window_height x window_width moved by the strides, the output
// [batch, out_height, out_width, ...], window (oy, ox) starting at image row
// oy * stride_height - pad_top and column ox * stride_width - pad_left.
struct Window2DArgs {
  int64_t batch, height, width, channels;
  int64_t window_height, window_width, stride_height, stride_width;
  int64_t out_height, out_width, pad_top, pad_left;
};

// Unfolds `images` images at `input` into the column matrix `col` [images * out_height *
// out_width, window_height * window_width * channels]: a row per output pixel, holding its window
// in (ky, kx, c) order, zeros where the window leaves the image.
cudaError_t Im2Col(const Window2DArgs& w, int64_t images, const float* input, float* col,
                   cudaStream_t stream);
// The reverse, as a gradient: d_input (`images` images, overwritten) = for each element, the sum
// of the column-matrix entries unfolded from it, added in output pixel order (the CPU's order).
cudaError_t Col2Im(const Window2DArgs& w, int64_t images, const float* col, float* d_input,
                   cudaStream_t stream);
// Max pooling over all w.batch images: output and argmax [batch, out_height, out_width, channels],
// argmax the index within its image, (y * width + x) * channels + c, the first largest in the
// window's row-major order (the padding never wins).
cudaError_t MaxPool2D(const Window2DArgs& w, const float* input, float* output, int32_t* argmax,
                      cudaStream_t stream);
// d_input (overwritten) = the sum of the d_output values whose argmax names each element, in
// output pixel order (no atomics: the CPU's order). An argmax outside its window (or channel) is
// recorded in `error` and its value dropped.
cudaError_t MaxPool2DGrad(const Window2DArgs& w, const float* d_output, const int32_t* argmax,
                          float* d_input, KernelError* error, cudaStream_t stream);

// ---- Vectors -----------------------------------------------------------------------------------

cudaError_t Axpy(int64_t n, float alpha, const float* x, float* y, cudaStream_t stream);
cudaError_t Scale(int64_t n, float alpha, float* x, cudaStream_t stream);
cudaError_t RowDot(int64_t rows, int64_t dim, const float* a, const float* b, float* out,
                   cudaStream_t stream);
// da, db may be null.
cudaError_t RowDotGrad(int64_t rows, int64_t dim, const float* a, const float* b,
                       const float* dout, float* da, float* db, cudaStream_t stream);

// ---- Replicas on one GPU -----------------------------------------------------------------------

// buffers[0][i] = buffers[0][i] + buffers[1][i] + ... + buffers[count - 1][i] (in that order, as
// the CPU sums), then copies the sum into the others. `buffers` is a host array of device
// pointers, all on this GPU, not overlapping; count >= 2.
cudaError_t SumBuffers(int count, float* const* buffers, int64_t n, cudaStream_t stream);

}  // namespace cuda_kernels
}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DEVICE_CUDA_KERNELS_H_
