// The CUDA kernels of worker/device's GPU backend; see cuda_kernels.h.
//
// Memory-bound kernels use grid-stride loops over int64 indices with 256-thread blocks; the
// embedding copies move float4s when rows allow it. Reductions run in a fixed order: a warp or a
// thread per output, block partial sums in shared memory, and a last single-block kernel for the
// losses, so the results do not depend on scheduling.
#include "worker/device/cuda_kernels.h"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <cstdint>

namespace pstrain {
namespace cuda_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int64_t kMaxBlocks = 65535;  // enough to fill any GPU; grid-stride loops do the rest
constexpr int kLossBlocks = static_cast<int>(kLossScratchBytes / sizeof(double));

int Blocks(int64_t work, int threads = kThreads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<int>(std::max<int64_t>(1, std::min(blocks, kMaxBlocks)));
}

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Claims the error record for the first kernel thread that finds a bad value; later ones leave it.
__device__ void RecordError(KernelError* error, int32_t op, int64_t position, int32_t value,
                            int64_t limit) {
  if (atomicCAS(&error->op, kNoError, -1) == kNoError) {
    error->value = value;
    error->position = position;
    error->limit = limit;
    __threadfence();
    atomicExch(&error->op, op);
  }
}

__device__ __forceinline__ float StableSigmoid(float x) {
  const float e = expf(-fabsf(x));
  return x >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

__device__ __forceinline__ double WarpSum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, offset));
  }
  return __shfl_sync(0xffffffffu, v, 0);
}

// Sums each thread's `v` over the block (blockDim.x == kThreads) into partials[blockIdx.x].
__device__ void BlockPartial(double v, double* partials) {
  __shared__ double warp_sums[kThreads / kWarp];
  v = WarpSum(v);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int w = 0; w < kThreads / kWarp; ++w) total += warp_sums[w];
    partials[blockIdx.x] = total;
  }
}

// *loss = (sum of partials[0 .. count)) / n, one block, in a fixed order.
__global__ void FinishLoss(const double* partials, int count, int64_t n, float* loss) {
  __shared__ double sums[kThreads];
  double v = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) v += partials[i];
  sums[threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int i = 0; i < kThreads; ++i) total += sums[i];
    *loss = n == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(n));
  }
}

// ---- Dense -------------------------------------------------------------------------------------

__global__ void BiasAddKernel(int64_t size, int64_t cols, const float* __restrict__ bias,
                              float* __restrict__ x) {
  for (int64_t i = GlobalThread(); i < size; i += GridStride()) x[i] += bias[i % cols];
}

// Column sums: block (32, 8) owns 32 columns; its threads walk the rows 8 apart, then the 8
// partial sums per column are added in order.
__global__ void BiasGradKernel(int64_t rows, int64_t cols, const float* __restrict__ dy,
                               float* __restrict__ dbias) {
  __shared__ float sums[8][kWarp + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarp + threadIdx.x;
  float v = 0;
  if (c < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += 8) v += dy[r * cols + c];
  }
  sums[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0;
    for (int y = 0; y < 8; ++y) total += sums[y][threadIdx.x];
    dbias[c] = total;
  }
}

__global__ void ReluKernel(int64_t n, const float* x, float* y) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) y[i] = fmaxf(x[i], 0.0f);
}

__global__ void ReluGradKernel(int64_t n, const float* y, const float* dy, float* dx) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) dx[i] = y[i] > 0 ? dy[i] : 0.0f;
}

__global__ void SigmoidKernel(int64_t n, const float* x, float* y) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) y[i] = StableSigmoid(x[i]);
}

// ---- Losses ------------------------------------------------------------------------------------

// A warp per row: max, sum of exponentials, probabilities, and the row's -log p[label] added to
// lane 0's running total; then the block's partial sum.
__global__ void SoftmaxCrossEntropyKernel(int64_t rows, int64_t classes, const float* logits,
                                          const int32_t* __restrict__ labels, float* probs,
                                          double* partials, KernelError* error) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warp = GlobalThread() / kWarp;
  const int64_t warps = GridStride() / kWarp;
  double total = 0;
  for (int64_t r = warp; r < rows; r += warps) {
    const float* x = logits + r * classes;
    float* p = probs + r * classes;
    const int32_t label = labels[r];
    const bool bad = label < 0 || label >= classes;
    // Read before p (which may be x) is written.
    const float x_label = bad ? 0.0f : x[label];
    float max = -INFINITY;
    for (int64_t j = lane; j < classes; j += kWarp) max = fmaxf(max, x[j]);
    max = WarpMax(max);
    __syncwarp();
    float sum = 0;
    for (int64_t j = lane; j < classes; j += kWarp) {
      const float e = expf(x[j] - max);
      p[j] = e;
      sum += e;
    }
    sum = __shfl_sync(0xffffffffu, WarpSum(sum), 0);
    const float inv = 1.0f / sum;
    for (int64_t j = lane; j < classes; j += kWarp) p[j] *= inv;
    if (lane == 0) {
      if (bad) {
        RecordError(error, kSoftmaxCrossEntropy, r, label, classes);
      } else {
        total += log(static_cast<double>(sum)) - static_cast<double>(x_label - max);
      }
    }
  }
  BlockPartial(total, partials);
}

__global__ void SoftmaxCrossEntropyGradKernel(int64_t rows, int64_t classes, const float* probs,
                                              const int32_t* __restrict__ labels, float* dlogits,
                                              float scale, KernelError* error) {
  const int64_t size = rows * classes;
  for (int64_t i = GlobalThread(); i < size; i += GridStride()) {
    const int64_t r = i / classes, j = i % classes;
    const int32_t label = labels[r];
    float v = probs[i] * scale;
    if (j == label) v -= scale;
    dlogits[i] = v;
    if (j == 0 && (label < 0 || label >= classes)) {
      RecordError(error, kSoftmaxCrossEntropyGrad, r, label, classes);
    }
  }
}

__global__ void SigmoidCrossEntropyKernel(int64_t n, const float* logits, const float* labels,
                                          float* dlogits, float scale, double* partials) {
  double total = 0;
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const float x = logits[i], y = labels[i];
    total += fmaxf(x, 0.0f) - x * y + log1pf(expf(-fabsf(x)));
    if (dlogits != nullptr) dlogits[i] = (StableSigmoid(x) - y) * scale;
  }
  BlockPartial(total, partials);
}

__global__ void MeanSquaredErrorKernel(int64_t n, const float* predictions, const float* targets,
                                       float* dpred, float scale, double* partials) {
  double total = 0;
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const float d = predictions[i] - targets[i];
    total += static_cast<double>(d) * d;
    if (dpred != nullptr) dpred[i] = d * scale;
  }
  BlockPartial(total, partials);
}

// ---- Embeddings --------------------------------------------------------------------------------

// Scratch is carved into 256-byte-aligned pieces, in this order, by both the size query and the op.
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename T>
  T* Take(int64_t count) {
    T* p = base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + used_);
    used_ += (static_cast<size_t>(count) * sizeof(T) + 255) / 256 * 256;
    return p;
  }
  void* rest() const { return base_ == nullptr ? nullptr : base_ + used_; }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

struct MaxOp {
  __device__ __forceinline__ int32_t operator()(int32_t a, int32_t b) const {
    return a > b ? a : b;
  }
};

struct UniqueArrays {
  int64_t* sorted_ids;
  int32_t* positions;   // 0, 1, ...; after the sort, reused for the head marks
  int32_t* sorted_pos;
  int32_t* first;       // 1 at each id's first position (original order)
  int32_t* rank;        // exclusive scan of first
  int32_t* head_of;     // max-scan: the sorted position where each element's segment starts
  void* cub_temp;
  size_t cub_bytes;
};

// Carves the arrays; with base == nullptr only sizes them (asking CUB for its temp storage).
cudaError_t CarveUnique(int n, void* base, UniqueArrays* a, size_t* total) {
  Carver carver(base);
  a->sorted_ids = carver.Take<int64_t>(n);
  a->positions = carver.Take<int32_t>(n);
  a->sorted_pos = carver.Take<int32_t>(n);
  a->first = carver.Take<int32_t>(n);
  a->rank = carver.Take<int32_t>(n);
  a->head_of = carver.Take<int32_t>(n);
  size_t sort_bytes = 0, sum_bytes = 0, max_bytes = 0;
  cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const int64_t*)nullptr,
                                                  (int64_t*)nullptr, (const int32_t*)nullptr,
                                                  (int32_t*)nullptr, n);
  if (e != cudaSuccess) return e;
  e = cub::DeviceScan::ExclusiveSum(nullptr, sum_bytes, (const int32_t*)nullptr,
                                    (int32_t*)nullptr, n);
  if (e != cudaSuccess) return e;
  e = cub::DeviceScan::InclusiveScan(nullptr, max_bytes, (const int32_t*)nullptr,
                                     (int32_t*)nullptr, MaxOp(), n);
  if (e != cudaSuccess) return e;
  a->cub_bytes = std::max(sort_bytes, std::max(sum_bytes, max_bytes));
  a->cub_temp = carver.rest();
  *total = carver.used() + a->cub_bytes;
  return cudaSuccess;
}

__global__ void IotaKernel(int64_t n, int32_t* positions, int32_t* zeros) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    positions[i] = static_cast<int32_t>(i);
    if (zeros != nullptr) zeros[i] = 0;
  }
}

__global__ void UniqueHeadsKernel(int64_t n, const int64_t* sorted_ids, const int32_t* sorted_pos,
                                  int32_t* first, int32_t* head_mark) {
  for (int64_t k = GlobalThread(); k < n; k += GridStride()) {
    const bool head = k == 0 || sorted_ids[k] != sorted_ids[k - 1];
    if (head) first[sorted_pos[k]] = 1;
    head_mark[k] = head ? static_cast<int32_t>(k) : 0;
  }
}

__global__ void UniqueFinishKernel(int64_t n, const int64_t* sorted_ids,
                                   const int32_t* sorted_pos, const int32_t* first,
                                   const int32_t* rank, const int32_t* head_of,
                                   int64_t* unique_ids, int32_t* index, int64_t* num_unique) {
  for (int64_t k = GlobalThread(); k < n; k += GridStride()) {
    const int32_t h = head_of[k];
    const int32_t u = rank[sorted_pos[h]];
    index[sorted_pos[k]] = u;
    if (k == h) unique_ids[u] = sorted_ids[k];
    if (k == n - 1) *num_unique = static_cast<int64_t>(rank[n - 1]) + first[n - 1];
  }
}

__global__ void GatherRowsKernel(int64_t num_rows, int64_t dim, const float* __restrict__ table,
                                 const int32_t* __restrict__ index, int64_t n,
                                 float* __restrict__ out, KernelError* error) {
  const int64_t size = n * dim;
  for (int64_t t = GlobalThread(); t < size; t += GridStride()) {
    const int64_t i = t / dim, j = t % dim;
    const int32_t row = index[i];
    if (row < 0 || row >= num_rows) {
      out[t] = 0;
      if (j == 0) RecordError(error, kGatherRows, i, row, num_rows);
    } else {
      out[t] = table[static_cast<int64_t>(row) * dim + j];
    }
  }
}

// The same with float4s: dim4 = dim / 4, table and out 16-byte aligned.
__global__ void GatherRows4Kernel(int64_t num_rows, int64_t dim4, const float4* __restrict__ table,
                                  const int32_t* __restrict__ index, int64_t n,
                                  float4* __restrict__ out, KernelError* error) {
  const int64_t size = n * dim4;
  for (int64_t t = GlobalThread(); t < size; t += GridStride()) {
    const int64_t i = t / dim4, j = t % dim4;
    const int32_t row = index[i];
    if (row < 0 || row >= num_rows) {
      out[t] = make_float4(0, 0, 0, 0);
      if (j == 0) RecordError(error, kGatherRows, i, row, num_rows);
    } else {
      out[t] = table[static_cast<int64_t>(row) * dim4 + j];
    }
  }
}

// Only the index check (dim == 0: nothing to copy, but a bad index is still an error).
__global__ void CheckIndexKernel(int32_t op, int64_t n, const int32_t* index, int64_t limit,
                                 KernelError* error) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    if (index[i] < 0 || index[i] >= limit) RecordError(error, op, i, index[i], limit);
  }
}

__global__ void SumPoolKernel(int64_t batch, int64_t features, int64_t dim,
                              const float* __restrict__ in, float* __restrict__ out) {
  const int64_t size = batch * dim;
  for (int64_t t = GlobalThread(); t < size; t += GridStride()) {
    const int64_t b = t / dim, j = t % dim;
    const float* x = in + b * features * dim + j;
    float sum = features == 0 ? 0.0f : x[0];
    for (int64_t f = 1; f < features; ++f) sum += x[f * dim];
    out[t] = sum;
  }
}

__global__ void SumPoolGradKernel(int64_t batch, int64_t features, int64_t dim,
                                  const float* __restrict__ dout, float* __restrict__ din) {
  const int64_t size = batch * features * dim;
  for (int64_t t = GlobalThread(); t < size; t += GridStride()) {
    const int64_t j = t % dim, b = t / (features * dim);
    din[t] = dout[b * dim + j];
  }
}

struct SegmentArrays {
  int32_t* keys;        // index with bad entries replaced by num_unique (a segment nobody reads)
  int32_t* positions;
  int32_t* sorted_keys;
  int32_t* sorted_pos;
  int32_t* offsets;     // num_unique + 1: segment u is sorted [offsets[u], offsets[u + 1])
  void* cub_temp;
  size_t cub_bytes;
  int end_bit;          // keys are < 2^end_bit
};

cudaError_t CarveSegment(int n, int64_t num_unique, void* base, SegmentArrays* a,
                         size_t* total) {
  Carver carver(base);
  a->keys = carver.Take<int32_t>(n);
  a->positions = carver.Take<int32_t>(n);
  a->sorted_keys = carver.Take<int32_t>(n);
  a->sorted_pos = carver.Take<int32_t>(n);
  a->offsets = carver.Take<int32_t>(num_unique + 1);
  a->end_bit = 1;
  while (a->end_bit < 31 && (int64_t{1} << a->end_bit) <= num_unique) ++a->end_bit;
  size_t sort_bytes = 0;
  cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const int32_t*)nullptr,
                                                  (int32_t*)nullptr, (const int32_t*)nullptr,
                                                  (int32_t*)nullptr, n, 0, a->end_bit);
  if (e != cudaSuccess) return e;
  a->cub_bytes = sort_bytes;
  a->cub_temp = carver.rest();
  *total = carver.used() + a->cub_bytes;
  return cudaSuccess;
}

__global__ void SegmentKeysKernel(int64_t n, const int32_t* index, int64_t num_unique,
                                  int32_t* keys, int32_t* positions, KernelError* error) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const int32_t u = index[i];
    if (u < 0 || u >= num_unique) {
      RecordError(error, kSegmentSum, i, u, num_unique);
      keys[i] = static_cast<int32_t>(num_unique);
    } else {
      keys[i] = u;
    }
    positions[i] = static_cast<int32_t>(i);
  }
}

// offsets[u] = the first sorted position whose key is >= u, for u in [0, num_unique]: thread k
// fills the keys in (key[k - 1], key[k]] (key[-1] = -1, key[n] = num_unique).
__global__ void SegmentOffsetsKernel(int64_t n, const int32_t* sorted_keys, int64_t num_unique,
                                     int32_t* offsets) {
  for (int64_t k = GlobalThread(); k <= n; k += GridStride()) {
    const int64_t prev = k == 0 ? -1 : sorted_keys[k - 1];
    const int64_t cur = k == n ? num_unique : sorted_keys[k];
    for (int64_t u = prev + 1; u <= cur && u <= num_unique; ++u) {
      offsets[u] = static_cast<int32_t>(k);
    }
  }
}

__global__ void SegmentReduceKernel(int64_t dim, int64_t num_unique, const float* __restrict__ grads,
                                    const int32_t* __restrict__ sorted_pos,
                                    const int32_t* __restrict__ offsets, float* __restrict__ out) {
  const int64_t size = num_unique * dim;
  for (int64_t t = GlobalThread(); t < size; t += GridStride()) {
    const int64_t u = t / dim, j = t % dim;
    float sum = 0;
    for (int32_t k = offsets[u]; k < offsets[u + 1]; ++k) {
      sum += grads[static_cast<int64_t>(sorted_pos[k]) * dim + j];
    }
    out[t] = sum;
  }
}

// ---- Vectors -----------------------------------------------------------------------------------

__global__ void AxpyKernel(int64_t n, float alpha, const float* __restrict__ x,
                           float* __restrict__ y) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) y[i] += alpha * x[i];
}

__global__ void ScaleKernel(int64_t n, float alpha, float* x) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) x[i] *= alpha;
}

// A warp per row.
__global__ void RowDotKernel(int64_t rows, int64_t dim, const float* __restrict__ a,
                             const float* __restrict__ b, float* __restrict__ out) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = GridStride() / kWarp;
  for (int64_t r = GlobalThread() / kWarp; r < rows; r += warps) {
    float sum = 0;
    for (int64_t j = lane; j < dim; j += kWarp) sum += a[r * dim + j] * b[r * dim + j];
    sum = WarpSum(sum);
    if (lane == 0) out[r] = sum;
  }
}

__global__ void RowDotGradKernel(int64_t rows, int64_t dim, const float* __restrict__ a,
                                 const float* __restrict__ b, const float* __restrict__ dout,
                                 float* __restrict__ da, float* __restrict__ db) {
  const int64_t size = rows * dim;
  for (int64_t t = GlobalThread(); t < size; t += GridStride()) {
    const float g = dout[t / dim];
    if (da != nullptr) da[t] = g * b[t];
    if (db != nullptr) db[t] = g * a[t];
  }
}

// ---- Replicas on one GPU -----------------------------------------------------------------------

constexpr int kMaxSumInputs = 8;
struct SumInputs {
  const float* x[kMaxSumInputs];
  int count;
};

// sum[i] += x[0][i] + ... + x[count - 1][i], left to right.
__global__ void AccumulateKernel(int64_t n, SumInputs inputs, float* sum) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    float s = sum[i];
    for (int r = 0; r < inputs.count; ++r) s += inputs.x[r][i];
    sum[i] = s;
  }
}

// ---- Convolution and pooling -------------------------------------------------------------------

// One thread per column-matrix element: row r (image, output pixel), column j (ky, kx, c).
__global__ void Im2ColKernel(Window2DArgs w, int64_t images, const float* __restrict__ input,
                             float* __restrict__ col) {
  const int64_t row = w.window_width * w.channels;
  const int64_t k = w.window_height * row;
  const int64_t pixels = w.out_height * w.out_width;
  const int64_t size = images * pixels * k;
  for (int64_t t = GlobalThread(); t < size; t += GridStride()) {
    const int64_t r = t / k, j = t % k;
    const int64_t n = r / pixels, p = r % pixels;
    const int64_t oy = p / w.out_width, ox = p % w.out_width;
    const int64_t ky = j / row, kx = (j % row) / w.channels, c = j % w.channels;
    const int64_t y = oy * w.stride_height - w.pad_top + ky;
    const int64_t x = ox * w.stride_width - w.pad_left + kx;
    const bool inside = y >= 0 && y < w.height && x >= 0 && x < w.width;
    col[t] = inside ? input[((n * w.height + y) * w.width + x) * w.channels + c] : 0.0f;
  }
}

// The output rows (or columns) [*first, *last] whose windows cover image row (or column) y.
__device__ __forceinline__ void Covering(int64_t y, int64_t pad, int64_t window, int64_t stride,
                                         int64_t out, int64_t* first, int64_t* last) {
  const int64_t lowest = y + pad - window + 1;  // o * stride >= lowest
  *first = lowest <= 0 ? 0 : (lowest + stride - 1) / stride;
  *last = min((y + pad) / stride, out - 1);
}

// One thread per image element: the sum of the column-matrix entries unfolded from it, in output
// pixel order.
__global__ void Col2ImKernel(Window2DArgs w, int64_t images, const float* __restrict__ col,
                             float* __restrict__ d_input) {
  const int64_t k = w.window_height * w.window_width * w.channels;
  const int64_t size = images * w.height * w.width * w.channels;
  for (int64_t t = GlobalThread(); t < size; t += GridStride()) {
    const int64_t c = t % w.channels;
    const int64_t x = (t / w.channels) % w.width;
    const int64_t y = (t / (w.channels * w.width)) % w.height;
    const int64_t n = t / (w.channels * w.width * w.height);
    int64_t oy0, oy1, ox0, ox1;
    Covering(y, w.pad_top, w.window_height, w.stride_height, w.out_height, &oy0, &oy1);
    Covering(x, w.pad_left, w.window_width, w.stride_width, w.out_width, &ox0, &ox1);
    float sum = 0;
    for (int64_t oy = oy0; oy <= oy1; ++oy) {
      const int64_t ky = y + w.pad_top - oy * w.stride_height;
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        const int64_t kx = x + w.pad_left - ox * w.stride_width;
        sum += col[((n * w.out_height + oy) * w.out_width + ox) * k +
                   (ky * w.window_width + kx) * w.channels + c];
      }
    }
    d_input[t] = sum;
  }
}

// The window rows [*lo, *hi) of output row (or column) o that lie inside the image, and where the
// window starts.
__device__ __forceinline__ void Clip(int64_t o, int64_t stride, int64_t pad, int64_t window,
                                     int64_t in, int64_t* start, int64_t* lo, int64_t* hi) {
  *start = o * stride - pad;
  *lo = -*start > 0 ? -*start : 0;
  *hi = min(window, in - *start);
}

// One thread per output element.
__global__ void MaxPool2DKernel(Window2DArgs w, const float* __restrict__ input,
                                float* __restrict__ output, int32_t* __restrict__ argmax) {
  const int64_t size = w.batch * w.out_height * w.out_width * w.channels;
  const int64_t image = w.height * w.width * w.channels;
  for (int64_t t = GlobalThread(); t < size; t += GridStride()) {
    const int64_t c = t % w.channels;
    const int64_t ox = (t / w.channels) % w.out_width;
    const int64_t oy = (t / (w.channels * w.out_width)) % w.out_height;
    const int64_t n = t / (w.channels * w.out_width * w.out_height);
    int64_t y0, ky_lo, ky_hi, x0, kx_lo, kx_hi;
    Clip(oy, w.stride_height, w.pad_top, w.window_height, w.height, &y0, &ky_lo, &ky_hi);
    Clip(ox, w.stride_width, w.pad_left, w.window_width, w.width, &x0, &kx_lo, &kx_hi);
    const float* x = input + n * image;
    float best = 0;
    int64_t best_at = -1;
    for (int64_t ky = ky_lo; ky < ky_hi; ++ky) {
      for (int64_t kx = kx_lo; kx < kx_hi; ++kx) {
        const int64_t at = ((y0 + ky) * w.width + x0 + kx) * w.channels + c;
        const float v = x[at];
        if (best_at < 0 || v > best) {
          best = v;
          best_at = at;
        }
      }
    }
    output[t] = best;
    argmax[t] = static_cast<int32_t>(best_at);
  }
}

// One thread per output element: records an argmax outside its window (or channel).
__global__ void CheckArgmaxKernel(Window2DArgs w, const int32_t* __restrict__ argmax,
                                  KernelError* error) {
  const int64_t size = w.batch * w.out_height * w.out_width * w.channels;
  for (int64_t t = GlobalThread(); t < size; t += GridStride()) {
    const int64_t c = t % w.channels;
    const int64_t ox = (t / w.channels) % w.out_width;
    const int64_t oy = (t / (w.channels * w.out_width)) % w.out_height;
    int64_t y0, ky_lo, ky_hi, x0, kx_lo, kx_hi;
    Clip(oy, w.stride_height, w.pad_top, w.window_height, w.height, &y0, &ky_lo, &ky_hi);
    Clip(ox, w.stride_width, w.pad_left, w.window_width, w.width, &x0, &kx_lo, &kx_hi);
    const int32_t a = argmax[t];
    bool found = false;
    for (int64_t ky = ky_lo; ky < ky_hi; ++ky) {
      for (int64_t kx = kx_lo; kx < kx_hi; ++kx) {
        found |= a == ((y0 + ky) * w.width + x0 + kx) * w.channels + c;
      }
    }
    if (!found) RecordError(error, kMaxPool2DGrad, t, a, w.height * w.width * w.channels);
  }
}

// One thread per image element: the sum of the d_output values whose argmax names it, over the
// outputs whose windows cover it, in output pixel order.
__global__ void MaxPool2DGradKernel(Window2DArgs w, const float* __restrict__ d_output,
                                    const int32_t* __restrict__ argmax,
                                    float* __restrict__ d_input) {
  const int64_t size = w.batch * w.height * w.width * w.channels;
  for (int64_t t = GlobalThread(); t < size; t += GridStride()) {
    const int64_t c = t % w.channels;
    const int64_t x = (t / w.channels) % w.width;
    const int64_t y = (t / (w.channels * w.width)) % w.height;
    const int64_t n = t / (w.channels * w.width * w.height);
    const int64_t self = (y * w.width + x) * w.channels + c;
    int64_t oy0, oy1, ox0, ox1;
    Covering(y, w.pad_top, w.window_height, w.stride_height, w.out_height, &oy0, &oy1);
    Covering(x, w.pad_left, w.window_width, w.stride_width, w.out_width, &ox0, &ox1);
    float sum = 0;
    for (int64_t oy = oy0; oy <= oy1; ++oy) {
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        const int64_t o = ((n * w.out_height + oy) * w.out_width + ox) * w.channels + c;
        if (argmax[o] == self) sum += d_output[o];
      }
    }
    d_input[t] = sum;
  }
}

}  // namespace

const char* KernelOpName(int32_t op) {
  switch (op) {
    case kGatherRows:
      return "GatherRows";
    case kSegmentSum:
      return "SegmentSum";
    case kSoftmaxCrossEntropy:
      return "SoftmaxCrossEntropy";
    case kSoftmaxCrossEntropyGrad:
      return "SoftmaxCrossEntropyGrad";
    case kMaxPool2DGrad:
      return "MaxPool2DGrad";
    default:
      return "unknown op";
  }
}

cudaError_t BiasAdd(int64_t rows, int64_t cols, const float* bias, float* x, cudaStream_t stream) {
  const int64_t size = rows * cols;
  BiasAddKernel<<<Blocks(size), kThreads, 0, stream>>>(size, cols, bias, x);
  return cudaGetLastError();
}

cudaError_t BiasGrad(int64_t rows, int64_t cols, const float* dy, float* dbias,
                     cudaStream_t stream) {
  const int64_t blocks = (cols + kWarp - 1) / kWarp;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  BiasGradKernel<<<static_cast<unsigned>(blocks), dim3(kWarp, 8), 0, stream>>>(rows, cols, dy,
                                                                                dbias);
  return cudaGetLastError();
}

cudaError_t Relu(int64_t n, const float* x, float* y, cudaStream_t stream) {
  ReluKernel<<<Blocks(n), kThreads, 0, stream>>>(n, x, y);
  return cudaGetLastError();
}

cudaError_t ReluGrad(int64_t n, const float* y, const float* dy, float* dx, cudaStream_t stream) {
  ReluGradKernel<<<Blocks(n), kThreads, 0, stream>>>(n, y, dy, dx);
  return cudaGetLastError();
}

cudaError_t Sigmoid(int64_t n, const float* x, float* y, cudaStream_t stream) {
  SigmoidKernel<<<Blocks(n), kThreads, 0, stream>>>(n, x, y);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropy(int64_t rows, int64_t classes, const float* logits,
                                const int32_t* labels, float* probs, float* loss, void* scratch,
                                KernelError* error, cudaStream_t stream) {
  if (rows == 0) return cudaMemsetAsync(loss, 0, sizeof(float), stream);
  double* partials = static_cast<double*>(scratch);
  const int blocks = std::min(kLossBlocks, Blocks(rows * kWarp));
  SoftmaxCrossEntropyKernel<<<blocks, kThreads, 0, stream>>>(rows, classes, logits, labels, probs,
                                                             partials, error);
  FinishLoss<<<1, kThreads, 0, stream>>>(partials, blocks, rows, loss);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropyGrad(int64_t rows, int64_t classes, const float* probs,
                                    const int32_t* labels, float* dlogits, KernelError* error,
                                    cudaStream_t stream) {
  const float scale = 1.0f / static_cast<float>(rows);
  SoftmaxCrossEntropyGradKernel<<<Blocks(rows * classes), kThreads, 0, stream>>>(
      rows, classes, probs, labels, dlogits, scale, error);
  return cudaGetLastError();
}

cudaError_t SigmoidCrossEntropy(int64_t n, const float* logits, const float* labels, float* loss,
                                float* dlogits, void* scratch, cudaStream_t stream) {
  if (n == 0) return cudaMemsetAsync(loss, 0, sizeof(float), stream);
  double* partials = static_cast<double*>(scratch);
  const int blocks = std::min(kLossBlocks, Blocks(n));
  SigmoidCrossEntropyKernel<<<blocks, kThreads, 0, stream>>>(
      n, logits, labels, dlogits, 1.0f / static_cast<float>(n), partials);
  FinishLoss<<<1, kThreads, 0, stream>>>(partials, blocks, n, loss);
  return cudaGetLastError();
}

cudaError_t MeanSquaredError(int64_t n, const float* predictions, const float* targets,
                             float* loss, float* dpred, void* scratch, cudaStream_t stream) {
  if (n == 0) return cudaMemsetAsync(loss, 0, sizeof(float), stream);
  double* partials = static_cast<double*>(scratch);
  const int blocks = std::min(kLossBlocks, Blocks(n));
  MeanSquaredErrorKernel<<<blocks, kThreads, 0, stream>>>(
      n, predictions, targets, dpred, 2.0f / static_cast<float>(n), partials);
  FinishLoss<<<1, kThreads, 0, stream>>>(partials, blocks, n, loss);
  return cudaGetLastError();
}

cudaError_t UniqueScratchBytes(int64_t n, size_t* bytes) {
  if (n < 1 || n > INT32_MAX) return cudaErrorInvalidValue;
  UniqueArrays a;
  return CarveUnique(static_cast<int>(n), nullptr, &a, bytes);
}

cudaError_t Unique(int64_t n, const int64_t* ids, int64_t* unique_ids, int32_t* index,
                   int64_t* num_unique, void* scratch, size_t scratch_bytes,
                   cudaStream_t stream) {
  if (n < 1 || n > INT32_MAX) return cudaErrorInvalidValue;
  const int count = static_cast<int>(n);
  UniqueArrays a;
  size_t needed = 0;
  cudaError_t e = CarveUnique(count, scratch, &a, &needed);
  if (e != cudaSuccess) return e;
  if (needed > scratch_bytes) return cudaErrorInvalidValue;
  IotaKernel<<<Blocks(n), kThreads, 0, stream>>>(n, a.positions, a.first);
  e = cub::DeviceRadixSort::SortPairs(a.cub_temp, a.cub_bytes, ids, a.sorted_ids, a.positions,
                                      a.sorted_pos, count, 0, 64, stream);
  if (e != cudaSuccess) return e;
  int32_t* head_mark = a.positions;  // free after the sort
  UniqueHeadsKernel<<<Blocks(n), kThreads, 0, stream>>>(n, a.sorted_ids, a.sorted_pos, a.first,
                                                        head_mark);
  e = cub::DeviceScan::ExclusiveSum(a.cub_temp, a.cub_bytes, a.first, a.rank, count, stream);
  if (e != cudaSuccess) return e;
  e = cub::DeviceScan::InclusiveScan(a.cub_temp, a.cub_bytes, head_mark, a.head_of, MaxOp(),
                                     count, stream);
  if (e != cudaSuccess) return e;
  UniqueFinishKernel<<<Blocks(n), kThreads, 0, stream>>>(n, a.sorted_ids, a.sorted_pos, a.first,
                                                         a.rank, a.head_of, unique_ids, index,
                                                         num_unique);
  return cudaGetLastError();
}

cudaError_t GatherRows(int64_t num_rows, int64_t dim, const float* table, const int32_t* index,
                       int64_t n, float* out, KernelError* error, cudaStream_t stream) {
  if (dim == 0) {
    CheckIndexKernel<<<Blocks(n), kThreads, 0, stream>>>(kGatherRows, n, index, num_rows, error);
  } else if (dim % 4 == 0 && reinterpret_cast<uintptr_t>(table) % 16 == 0 &&
             reinterpret_cast<uintptr_t>(out) % 16 == 0) {
    GatherRows4Kernel<<<Blocks(n * dim / 4), kThreads, 0, stream>>>(
        num_rows, dim / 4, reinterpret_cast<const float4*>(table), index, n,
        reinterpret_cast<float4*>(out), error);
  } else {
    GatherRowsKernel<<<Blocks(n * dim), kThreads, 0, stream>>>(num_rows, dim, table, index, n,
                                                               out, error);
  }
  return cudaGetLastError();
}

cudaError_t SumPool(int64_t batch, int64_t features, int64_t dim, const float* in, float* out,
                    cudaStream_t stream) {
  SumPoolKernel<<<Blocks(batch * dim), kThreads, 0, stream>>>(batch, features, dim, in, out);
  return cudaGetLastError();
}

cudaError_t SumPoolGrad(int64_t batch, int64_t features, int64_t dim, const float* dout,
                        float* din, cudaStream_t stream) {
  SumPoolGradKernel<<<Blocks(batch * features * dim), kThreads, 0, stream>>>(batch, features, dim,
                                                                             dout, din);
  return cudaGetLastError();
}

cudaError_t SegmentSumScratchBytes(int64_t n, int64_t num_unique, size_t* bytes) {
  if (n < 0 || n > INT32_MAX || num_unique < 1 || num_unique > INT32_MAX - 1) {
    return cudaErrorInvalidValue;
  }
  SegmentArrays a;
  return CarveSegment(static_cast<int>(n), num_unique, nullptr, &a, bytes);
}

cudaError_t SegmentSum(int64_t n, int64_t dim, const float* grads, const int32_t* index,
                       int64_t num_unique, float* out, void* scratch, size_t scratch_bytes,
                       KernelError* error, cudaStream_t stream) {
  if (n < 0 || n > INT32_MAX || num_unique < 1 || num_unique > INT32_MAX - 1) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaMemsetAsync(out, 0, num_unique * dim * sizeof(float), stream);
  const int count = static_cast<int>(n);
  SegmentArrays a;
  size_t needed = 0;
  cudaError_t e = CarveSegment(count, num_unique, scratch, &a, &needed);
  if (e != cudaSuccess) return e;
  if (needed > scratch_bytes) return cudaErrorInvalidValue;
  SegmentKeysKernel<<<Blocks(n), kThreads, 0, stream>>>(n, index, num_unique, a.keys,
                                                        a.positions, error);
  if (dim == 0) return cudaGetLastError();
  e = cub::DeviceRadixSort::SortPairs(a.cub_temp, a.cub_bytes, a.keys, a.sorted_keys, a.positions,
                                      a.sorted_pos, count, 0, a.end_bit, stream);
  if (e != cudaSuccess) return e;
  SegmentOffsetsKernel<<<Blocks(n + 1), kThreads, 0, stream>>>(n, a.sorted_keys, num_unique,
                                                               a.offsets);
  SegmentReduceKernel<<<Blocks(num_unique * dim), kThreads, 0, stream>>>(
      dim, num_unique, grads, a.sorted_pos, a.offsets, out);
  return cudaGetLastError();
}

cudaError_t Im2Col(const Window2DArgs& w, int64_t images, const float* input, float* col,
                   cudaStream_t stream) {
  const int64_t size =
      images * w.out_height * w.out_width * w.window_height * w.window_width * w.channels;
  Im2ColKernel<<<Blocks(size), kThreads, 0, stream>>>(w, images, input, col);
  return cudaGetLastError();
}

cudaError_t Col2Im(const Window2DArgs& w, int64_t images, const float* col, float* d_input,
                   cudaStream_t stream) {
  const int64_t size = images * w.height * w.width * w.channels;
  Col2ImKernel<<<Blocks(size), kThreads, 0, stream>>>(w, images, col, d_input);
  return cudaGetLastError();
}

cudaError_t MaxPool2D(const Window2DArgs& w, const float* input, float* output, int32_t* argmax,
                      cudaStream_t stream) {
  const int64_t size = w.batch * w.out_height * w.out_width * w.channels;
  MaxPool2DKernel<<<Blocks(size), kThreads, 0, stream>>>(w, input, output, argmax);
  return cudaGetLastError();
}

cudaError_t MaxPool2DGrad(const Window2DArgs& w, const float* d_output, const int32_t* argmax,
                          float* d_input, KernelError* error, cudaStream_t stream) {
  const int64_t outputs = w.batch * w.out_height * w.out_width * w.channels;
  CheckArgmaxKernel<<<Blocks(outputs), kThreads, 0, stream>>>(w, argmax, error);
  const int64_t inputs = w.batch * w.height * w.width * w.channels;
  MaxPool2DGradKernel<<<Blocks(inputs), kThreads, 0, stream>>>(w, d_output, argmax, d_input);
  return cudaGetLastError();
}

cudaError_t Axpy(int64_t n, float alpha, const float* x, float* y, cudaStream_t stream) {
  AxpyKernel<<<Blocks(n), kThreads, 0, stream>>>(n, alpha, x, y);
  return cudaGetLastError();
}

cudaError_t Scale(int64_t n, float alpha, float* x, cudaStream_t stream) {
  ScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(n, alpha, x);
  return cudaGetLastError();
}

cudaError_t RowDot(int64_t rows, int64_t dim, const float* a, const float* b, float* out,
                   cudaStream_t stream) {
  RowDotKernel<<<Blocks(rows * kWarp), kThreads, 0, stream>>>(rows, dim, a, b, out);
  return cudaGetLastError();
}

cudaError_t RowDotGrad(int64_t rows, int64_t dim, const float* a, const float* b,
                       const float* dout, float* da, float* db, cudaStream_t stream) {
  RowDotGradKernel<<<Blocks(rows * dim), kThreads, 0, stream>>>(rows, dim, a, b, dout, da, db);
  return cudaGetLastError();
}

cudaError_t SumBuffers(int count, float* const* buffers, int64_t n, cudaStream_t stream) {
  if (count < 2) return cudaErrorInvalidValue;
  for (int first = 1; first < count; first += kMaxSumInputs) {
    SumInputs inputs;
    inputs.count = std::min(kMaxSumInputs, count - first);
    for (int r = 0; r < inputs.count; ++r) inputs.x[r] = buffers[first + r];
    AccumulateKernel<<<Blocks(n), kThreads, 0, stream>>>(n, inputs, buffers[0]);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  for (int r = 1; r < count; ++r) {
    const cudaError_t e = cudaMemcpyAsync(buffers[r], buffers[0], n * sizeof(float),
                                          cudaMemcpyDeviceToDevice, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace cuda_kernels
}  // namespace pstrain
