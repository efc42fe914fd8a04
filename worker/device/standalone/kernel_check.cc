// Standalone check and benchmark of worker/device's CUDA kernels, for a GPU machine without Bazel
// or gRPC (CMake + CUDA + NCCL only; see README.md here):
//
//   1. checks: every kernel of cuda_kernels.cu, cuBLAS Gemm as the CUDA device calls it, and the
//      NCCL all-reduce across this machine's GPUs, against the plain C++ reference (reference.cc);
//   2. bandwidth: the memory-bound kernels in GB/s beside the GPU's theoretical memory bandwidth
//      (cudaGetDeviceProperties: 2 x memory clock x bus width) and a device-to-device copy measured
//      in the same run;
//   3. training: examples/s of one MLP SGD step (784-256-256-10, softmax cross-entropy) on the GPU
//      and, with the same code shape, on the reference (one CPU core, plain loops).
//
// One JSON object per line on stdout. Exit status: 0 every check passed, 1 a check failed or a
// CUDA call did, 77 no GPU (CTest's skip code). Flags: --quick (smaller sizes), --no_bench.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "reference.h"
#include "worker/device/cuda_kernels.h"

namespace pstrain {
namespace {

namespace k = ::pstrain::cuda_kernels;

// ---- Plumbing ----------------------------------------------------------------------------------

void Die(const char* what, const char* file, int line, const std::string& detail) {
  std::printf("{\"error\": \"%s failed at %s:%d: %s\"}\n", what, file, line, detail.c_str());
  std::fflush(stdout);
  std::exit(1);
}

#define CUDA_OK(expr)                                                            \
  do {                                                                           \
    const cudaError_t e_ = (expr);                                               \
    if (e_ != cudaSuccess) Die(#expr, __FILE__, __LINE__, cudaGetErrorString(e_)); \
  } while (0)
#define CUBLAS_OK(expr)                                                                 \
  do {                                                                                  \
    const cublasStatus_t s_ = (expr);                                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS) Die(#expr, __FILE__, __LINE__, std::to_string(s_)); \
  } while (0)
#define NCCL_OK(expr)                                                             \
  do {                                                                            \
    const ncclResult_t r_ = (expr);                                               \
    if (r_ != ncclSuccess) Die(#expr, __FILE__, __LINE__, ncclGetErrorString(r_)); \
  } while (0)

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) { CUDA_OK(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T))); }
  explicit DeviceArray(const std::vector<T>& v) : DeviceArray(v.size()) { Upload(v); }
  ~DeviceArray() { cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  // The kernels run on a cudaStreamNonBlocking stream, which the legacy default stream of
  // cudaMemcpy does not wait for (nor it for cudaMemcpy's DMA from pageable memory): every
  // transfer waits for the whole device before and after.
  void Upload(const std::vector<T>& v) {
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    CUDA_OK(cudaDeviceSynchronize());
  }
  std::vector<T> Download(size_t n) const {
    std::vector<T> v(n);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(v.data(), p_, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  // Every byte `value`, ordered like the transfers.
  void Fill(int value, size_t bytes) const {
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemset(p_, value, bytes));
    CUDA_OK(cudaDeviceSynchronize());
  }
  std::vector<T> Download() const { return Download(n_); }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_;
};

std::vector<float> RandomFloats(size_t n, std::mt19937* rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

std::vector<int32_t> RandomIndex(size_t n, int64_t limit, std::mt19937* rng) {
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(limit - 1));
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(*rng);
  return v;
}

// max |a - b| / (1 + |b|).
double MaxRelErr(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::fabs(double(a[i]) - b[i]) / (1 + std::fabs(double(b[i])));
    worst = std::max(worst, std::isnan(err) ? INFINITY : err);
  }
  return worst;
}

struct Results {
  int checks = 0;
  int failed = 0;
  void Report(const char* name, bool ok, double err, const std::string& detail = "") {
    ++checks;
    if (!ok) ++failed;
    std::printf("{\"check\": \"%s\", \"ok\": %s, \"max_rel_err\": %.3g%s%s}\n", name,
                ok ? "true" : "false", err, detail.empty() ? "" : ", ", detail.c_str());
    std::fflush(stdout);
  }
  void Near(const char* name, const std::vector<float>& actual, const std::vector<float>& expected,
            double tol) {
    const double err = MaxRelErr(actual, expected);
    Report(name, err <= tol, err);
  }
  template <typename T>
  void Equal(const char* name, const std::vector<T>& actual, const std::vector<T>& expected) {
    Report(name, actual == expected, actual == expected ? 0.0 : INFINITY);
  }
};

// Row-major C = alpha op(A) op(B) + beta C with cuBLAS, as cuda_device.cc calls it.
void Gemm(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t kk, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  CUBLAS_OK(cublasSgemm_64(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
                           kk, &alpha, b, ldb, a, lda, &beta, c, ldc));
}

// Milliseconds per call of `launch` on `stream`: a warm-up, then enough calls for ~100 ms.
template <typename F>
double TimeMs(cudaStream_t stream, F launch) {
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  launch();
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaEventRecord(start, stream));
  launch();
  CUDA_OK(cudaEventRecord(stop, stream));
  CUDA_OK(cudaEventSynchronize(stop));
  float once = 0;
  CUDA_OK(cudaEventElapsedTime(&once, start, stop));
  const int iters = std::clamp(static_cast<int>(100.0f / std::max(once, 1e-3f)), 3, 2000);
  CUDA_OK(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) launch();
  CUDA_OK(cudaEventRecord(stop, stream));
  CUDA_OK(cudaEventSynchronize(stop));
  float total = 0;
  CUDA_OK(cudaEventElapsedTime(&total, start, stop));
  CUDA_OK(cudaGetLastError());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return total / iters;
}

struct Gpu {
  int ordinal = 0;
  cudaDeviceProp prop{};
  double peak_gb_per_s = 0;  // theoretical: 2 (DDR) x memory clock x bus width
  double copy_gb_per_s = 0;  // measured device-to-device copy (read + write bytes)
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
};

void Bandwidth(const Gpu& gpu, const char* name, const std::string& shape, double bytes,
               double ms) {
  const double gb_per_s = bytes / (ms * 1e-3) / 1e9;
  std::printf("{\"bench\": \"%s\", %s, \"ms\": %.4f, \"gb_per_s\": %.1f, \"peak_gb_per_s\": %.1f, "
              "\"of_peak\": %.3f, \"of_d2d_copy\": %.3f}\n",
              name, shape.c_str(), ms, gb_per_s, gpu.peak_gb_per_s, gb_per_s / gpu.peak_gb_per_s,
              gpu.copy_gb_per_s > 0 ? gb_per_s / gpu.copy_gb_per_s : 0.0);
  std::fflush(stdout);
}

// ---- Checks ------------------------------------------------------------------------------------

void CheckKernels(const Gpu& gpu, Results* results) {
  std::mt19937 rng(1234);
  cudaStream_t s = gpu.stream;
  DeviceArray<k::KernelError> error(1);
  error.Fill(0, sizeof(k::KernelError));
  DeviceArray<char> scratch(64 << 20);

  {  // Gemm, every transpose.
    const int64_t m = 133, n = 65, kk = 257;
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const int64_t lda = ta ? m : kk, ldb = tb ? kk : n;
      const std::vector<float> a = RandomFloats(m * kk, &rng), b = RandomFloats(kk * n, &rng);
      std::vector<float> c = RandomFloats(m * n, &rng);
      DeviceArray<float> da(a), db(b), dc(c);
      Gemm(gpu.cublas, ta, tb, m, n, kk, 1.5f, da.get(), lda, db.get(), ldb, 0.5f, dc.get(), n);
      reference::Gemm(ta, tb, m, n, kk, 1.5f, a.data(), lda, b.data(), ldb, 0.5f, c.data(), n);
      const std::string name = "gemm_t" + std::to_string(t);
      results->Near(name.c_str(), dc.Download(), c, 1e-4);
    }
  }
  {  // Dense elementwise.
    const int64_t rows = 1000, cols = 37, size = rows * cols;
    const std::vector<float> x = RandomFloats(size, &rng, -30, 30), bias = RandomFloats(cols, &rng);
    const std::vector<float> dy = RandomFloats(size, &rng);
    DeviceArray<float> dx(x), dbias(bias), ddy(dy), out(size), dgrad(cols);
    std::vector<float> ref = x, grad(cols);
    CUDA_OK(k::BiasAdd(rows, cols, dbias.get(), dx.get(), s));
    reference::BiasAdd(rows, cols, bias.data(), ref.data());
    results->Equal("bias_add", dx.Download(), ref);
    CUDA_OK(k::BiasGrad(rows, cols, ddy.get(), dgrad.get(), s));
    reference::BiasGrad(rows, cols, dy.data(), grad.data());
    results->Near("bias_grad", dgrad.Download(), grad, 1e-5);
    CUDA_OK(k::Relu(size, dx.get(), out.get(), s));
    reference::Relu(size, ref.data(), ref.data());
    results->Equal("relu", out.Download(), ref);
    std::vector<float> relu_grad(size);
    CUDA_OK(k::ReluGrad(size, out.get(), ddy.get(), out.get(), s));
    reference::ReluGrad(size, ref.data(), dy.data(), relu_grad.data());
    results->Equal("relu_grad", out.Download(), relu_grad);
    std::vector<float> sig(size);
    dx.Upload(x);
    CUDA_OK(k::Sigmoid(size, dx.get(), out.get(), s));
    reference::Sigmoid(size, x.data(), sig.data());
    results->Near("sigmoid", out.Download(), sig, 1e-6);
  }
  {  // Losses.
    const int64_t rows = 4097, classes = 10;
    const std::vector<float> logits = RandomFloats(rows * classes, &rng, -20, 20);
    const std::vector<int32_t> labels = RandomIndex(rows, classes, &rng);
    DeviceArray<float> dlogits(logits), dprobs(rows * classes), dloss(1);
    DeviceArray<int32_t> dlabels(labels);
    std::vector<float> probs(rows * classes), grad(rows * classes);
    CUDA_OK(k::SoftmaxCrossEntropy(rows, classes, dlogits.get(), dlabels.get(), dprobs.get(),
                                   dloss.get(), scratch.get(), error.get(), s));
    const float loss = reference::SoftmaxCrossEntropy(rows, classes, logits.data(), labels.data(),
                                                      probs.data());
    results->Near("softmax_cross_entropy_probs", dprobs.Download(), probs, 1e-5);
    results->Near("softmax_cross_entropy_loss", dloss.Download(), {loss}, 1e-5);
    CUDA_OK(k::SoftmaxCrossEntropyGrad(rows, classes, dprobs.get(), dlabels.get(), dprobs.get(),
                                       error.get(), s));
    reference::SoftmaxCrossEntropyGrad(rows, classes, probs.data(), labels.data(), grad.data());
    results->Near("softmax_cross_entropy_grad", dprobs.Download(), grad, 1e-6);

    const int64_t n = 100003;
    const std::vector<float> x = RandomFloats(n, &rng, -40, 40), y = RandomFloats(n, &rng, 0, 1);
    DeviceArray<float> dxx(x), dyy(y), dg(n);
    std::vector<float> g(n);
    CUDA_OK(k::SigmoidCrossEntropy(n, dxx.get(), dyy.get(), dloss.get(), dg.get(), scratch.get(), s));
    const float sce = reference::SigmoidCrossEntropy(n, x.data(), y.data(), g.data());
    results->Near("sigmoid_cross_entropy_loss", dloss.Download(), {sce}, 1e-5);
    results->Near("sigmoid_cross_entropy_grad", dg.Download(), g, 1e-6);
    CUDA_OK(k::MeanSquaredError(n, dxx.get(), dyy.get(), dloss.get(), dg.get(), scratch.get(), s));
    const float mse = reference::MeanSquaredError(n, x.data(), y.data(), g.data());
    results->Near("mean_squared_error_loss", dloss.Download(), {mse}, 1e-5);
    results->Near("mean_squared_error_grad", dg.Download(), g, 1e-6);
  }
  {  // Unique.
    const int64_t n = 300000;
    std::vector<int64_t> ids(n);
    std::uniform_int_distribution<int64_t> dist(0, 50000);
    for (int64_t i = 0; i < n; ++i) ids[i] = (i % 5 == 0 ? -1 : 1) * dist(rng) * 1000003;
    std::vector<int64_t> unique(n);
    std::vector<int32_t> index(n);
    const int64_t count = reference::Unique(n, ids.data(), unique.data(), index.data());
    unique.resize(count);
    size_t bytes = 0;
    CUDA_OK(k::UniqueScratchBytes(n, &bytes));
    DeviceArray<char> unique_scratch(bytes);
    DeviceArray<int64_t> dids(ids), dunique(n), dcount(1);
    DeviceArray<int32_t> dindex(n);
    CUDA_OK(k::Unique(n, dids.get(), dunique.get(), dindex.get(), dcount.get(),
                      unique_scratch.get(), bytes, s));
    const int64_t got = dcount.Download()[0];
    results->Report("unique_count", got == count, got == count ? 0 : INFINITY,
                    "\"count\": " + std::to_string(got) + ", \"expected\": " +
                        std::to_string(count));
    results->Equal("unique_ids", dunique.Download(std::clamp<int64_t>(got, 0, n)), unique);
    results->Equal("unique_index", dindex.Download(), index);
  }
  {  // Gather, pool, segment sum.
    for (int64_t dim : {3, 16, 64}) {
      const int64_t rows = 10000, n = 50000;
      const std::vector<float> table = RandomFloats(rows * dim, &rng);
      const std::vector<int32_t> index = RandomIndex(n, rows, &rng);
      DeviceArray<float> dtable(table), dout(n * dim);
      DeviceArray<int32_t> dindex(index);
      std::vector<float> out(n * dim);
      CUDA_OK(k::GatherRows(rows, dim, dtable.get(), dindex.get(), n, dout.get(), error.get(), s));
      reference::GatherRows(dim, table.data(), index.data(), n, out.data());
      results->Equal(("gather_rows_dim" + std::to_string(dim)).c_str(), dout.Download(), out);

      std::vector<float> grads = RandomFloats(n * dim, &rng), sums(rows * dim);
      DeviceArray<float> dgrads(grads), dsums(rows * dim);
      size_t bytes = 0;
      CUDA_OK(k::SegmentSumScratchBytes(n, rows, &bytes));
      DeviceArray<char> seg_scratch(bytes);
      CUDA_OK(k::SegmentSum(n, dim, dgrads.get(), dindex.get(), rows, dsums.get(),
                            seg_scratch.get(), bytes, error.get(), s));
      reference::SegmentSum(n, dim, grads.data(), index.data(), rows, sums.data());
      results->Equal(("segment_sum_dim" + std::to_string(dim)).c_str(), dsums.Download(), sums);
    }
    const int64_t batch = 3000, features = 7, dim = 24;
    const std::vector<float> in = RandomFloats(batch * features * dim, &rng);
    const std::vector<float> g = RandomFloats(batch * dim, &rng);
    DeviceArray<float> din(in), dpool(batch * dim), dg(g), dgrad(batch * features * dim);
    std::vector<float> pool(batch * dim), grad(batch * features * dim);
    CUDA_OK(k::SumPool(batch, features, dim, din.get(), dpool.get(), s));
    reference::SumPool(batch, features, dim, in.data(), pool.data());
    results->Equal("sum_pool", dpool.Download(), pool);
    CUDA_OK(k::SumPoolGrad(batch, features, dim, dg.get(), dgrad.get(), s));
    reference::SumPoolGrad(batch, features, dim, g.data(), grad.data());
    results->Equal("sum_pool_grad", dgrad.Download(), grad);
  }
  {  // Vectors and the one-GPU replica sum.
    const int64_t rows = 5000, dim = 40, n = rows * dim;
    const std::vector<float> a = RandomFloats(n, &rng), b = RandomFloats(n, &rng);
    const std::vector<float> dout = RandomFloats(rows, &rng);
    DeviceArray<float> da(a), db(b), ddout(dout), dy(b), ddot(rows), dga(n), dgb(n);
    std::vector<float> y = b, dot(rows), ga(n), gb(n);
    CUDA_OK(k::Axpy(n, 0.5f, da.get(), dy.get(), s));
    reference::Axpy(n, 0.5f, a.data(), y.data());
    results->Near("axpy", dy.Download(), y, 1e-6);  // nvcc fuses the multiply-add
    CUDA_OK(k::RowDot(rows, dim, da.get(), db.get(), ddot.get(), s));
    reference::RowDot(rows, dim, a.data(), b.data(), dot.data());
    results->Near("row_dot", ddot.Download(), dot, 1e-5);
    CUDA_OK(k::RowDotGrad(rows, dim, da.get(), db.get(), ddout.get(), dga.get(), dgb.get(), s));
    reference::RowDotGrad(rows, dim, a.data(), b.data(), dout.data(), ga.data(), gb.data());
    results->Equal("row_dot_grad_a", dga.Download(), ga);
    results->Equal("row_dot_grad_b", dgb.Download(), gb);
    std::vector<float> sum(n);
    for (int64_t i = 0; i < n; ++i) sum[i] = (a[i] + b[i]) + y[i];
    float* buffers[3] = {da.get(), db.get(), dy.get()};
    CUDA_OK(k::SumBuffers(3, buffers, n, s));
    results->Equal("sum_buffers", db.Download(), sum);
  }
  {  // Convolution's column matrix and its fold back; max pooling and its gradient.
    struct Case {
      k::Window2DArgs w;
      const char* name;
    };
    // batch, height, width, channels, window, strides, output, padding (as device.h computes it).
    for (const Case& c : {Case{{64, 28, 28, 1, 3, 3, 1, 1, 26, 26, 0, 0}, "seed_conv"},
                          Case{{3, 9, 8, 3, 3, 3, 2, 2, 5, 4, 1, 0}, "same_stride2"},
                          Case{{64, 26, 26, 32, 2, 2, 2, 2, 13, 13, 0, 0}, "seed_pool"},
                          Case{{2, 7, 9, 5, 3, 3, 1, 1, 7, 9, 1, 1}, "same_overlapping"}}) {
      const k::Window2DArgs& w = c.w;
      const int64_t in_size = w.batch * w.height * w.width * w.channels;
      const int64_t col_size = w.batch * w.out_height * w.out_width * w.window_height *
                               w.window_width * w.channels;
      const int64_t out_size = w.batch * w.out_height * w.out_width * w.channels;
      const std::vector<float> x = RandomFloats(in_size, &rng);
      const std::vector<float> cols = RandomFloats(col_size, &rng);
      const std::vector<float> dy = RandomFloats(out_size, &rng);
      DeviceArray<float> dx(x), dcol(col_size), dcols(cols), dback(in_size), dout(out_size);
      DeviceArray<float> ddy(dy);
      DeviceArray<int32_t> darg(out_size);
      std::vector<float> col(col_size), back(in_size), out(out_size), grad(in_size);
      std::vector<int32_t> arg(out_size);
      const std::string name = c.name;
      CUDA_OK(k::Im2Col(w, w.batch, dx.get(), dcol.get(), s));
      reference::Im2Col(w, w.batch, x.data(), col.data());
      results->Equal(("im2col_" + name).c_str(), dcol.Download(), col);
      CUDA_OK(k::Col2Im(w, w.batch, dcols.get(), dback.get(), s));
      reference::Col2Im(w, w.batch, cols.data(), back.data());
      results->Equal(("col2im_" + name).c_str(), dback.Download(), back);
      CUDA_OK(k::MaxPool2D(w, dx.get(), dout.get(), darg.get(), s));
      reference::MaxPool2D(w, x.data(), out.data(), arg.data());
      results->Equal(("max_pool_" + name).c_str(), dout.Download(), out);
      results->Equal(("max_pool_argmax_" + name).c_str(), darg.Download(), arg);
      CUDA_OK(k::MaxPool2DGrad(w, ddy.get(), darg.get(), dback.get(), error.get(), s));
      reference::MaxPool2DGrad(w, dy.data(), arg.data(), grad.data());
      results->Equal(("max_pool_grad_" + name).c_str(), dback.Download(), grad);
    }
    const k::KernelError e = error.Download()[0];
    const bool clean = e.op == k::kNoError;
    results->Report("max_pool_grad_no_error", clean, clean ? 0 : INFINITY);
  }
  {  // Out-of-range indices are recorded, not fatal.
    DeviceArray<float> table(4 * 8), out(3 * 8);
    DeviceArray<int32_t> index(std::vector<int32_t>{0, 7, 1});
    error.Fill(0, sizeof(k::KernelError));
    CUDA_OK(k::GatherRows(4, 8, table.get(), index.get(), 3, out.get(), error.get(), s));
    const k::KernelError e = error.Download()[0];
    const bool ok = e.op == k::kGatherRows && e.position == 1 && e.value == 7 && e.limit == 4;
    results->Report("gather_rows_bad_index_recorded", ok, ok ? 0 : INFINITY);
  }
  {  // An argmax outside its window is recorded, its gradient dropped.
    const k::Window2DArgs w{1, 4, 4, 1, 2, 2, 2, 2, 2, 2, 0, 0};
    DeviceArray<float> dy(std::vector<float>{1, 1, 1, 1}), dx(16);
    // Output 2's window holds elements 8, 9, 12 and 13.
    DeviceArray<int32_t> arg(std::vector<int32_t>{0, 2, 15, 10});
    error.Fill(0, sizeof(k::KernelError));
    CUDA_OK(k::MaxPool2DGrad(w, dy.get(), arg.get(), dx.get(), error.get(), s));
    const k::KernelError e = error.Download()[0];
    const std::vector<float> grad = dx.Download();
    const bool ok = e.op == k::kMaxPool2DGrad && e.position == 2 && e.value == 15 &&
                    e.limit == 16 && grad[15] == 0 && grad[0] == 1 && grad[10] == 1;
    results->Report("max_pool_grad_bad_argmax_recorded", ok, ok ? 0 : INFINITY);
  }
  CUDA_OK(cudaStreamSynchronize(s));
}

// Every GPU adds its buffer; NCCL's result must be the sum on each. Then algorithm and bus
// bandwidth (nccl-tests' definitions) for a 256 MiB all-reduce.
void CheckNccl(int gpus, bool bench, Results* results) {
  std::vector<int> ordinals(gpus);
  for (int i = 0; i < gpus; ++i) ordinals[i] = i;
  std::vector<ncclComm_t> comms(gpus);
  NCCL_OK(ncclCommInitAll(comms.data(), gpus, ordinals.data()));
  const size_t n = bench ? (64 << 20) : (1 << 20);
  std::vector<float*> buffers(gpus);
  std::vector<cudaStream_t> streams(gpus);
  std::vector<float> expected(n, 0.0f);
  for (int g = 0; g < gpus; ++g) {
    CUDA_OK(cudaSetDevice(g));
    CUDA_OK(cudaStreamCreate(&streams[g]));
    CUDA_OK(cudaMalloc(&buffers[g], n * sizeof(float)));
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i % 1000) * 0.001 * (g + 1));
    for (size_t i = 0; i < n; ++i) expected[i] += v[i];
    CUDA_OK(cudaMemcpy(buffers[g], v.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  auto all_reduce = [&] {
    NCCL_OK(ncclGroupStart());
    for (int g = 0; g < gpus; ++g) {
      NCCL_OK(ncclAllReduce(buffers[g], buffers[g], n, ncclFloat, ncclSum, comms[g], streams[g]));
    }
    NCCL_OK(ncclGroupEnd());
  };
  auto sync = [&] {
    for (int g = 0; g < gpus; ++g) {
      CUDA_OK(cudaSetDevice(g));
      CUDA_OK(cudaStreamSynchronize(streams[g]));
    }
  };
  all_reduce();
  sync();
  for (int g = 0; g < gpus; ++g) {
    std::vector<float> out(n);
    CUDA_OK(cudaSetDevice(g));
    CUDA_OK(cudaMemcpy(out.data(), buffers[g], n * sizeof(float), cudaMemcpyDeviceToHost));
    const std::string name = "nccl_all_reduce_gpu" + std::to_string(g);
    results->Near(name.c_str(), out, expected, 1e-5);
  }
  if (bench && gpus == 1) {
    // One rank's all-reduce in place moves nothing: no bandwidth to quote.
    std::printf("{\"bench\": \"nccl_all_reduce\", \"gpus\": 1, \"skipped\": "
                "\"bandwidth needs 2 or more GPUs (one rank's in-place all-reduce copies nothing)\"}\n");
  } else if (bench) {
    const int iters = 20;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) all_reduce();
    sync();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
    const double algbw = n * sizeof(float) / seconds / 1e9;
    std::printf("{\"bench\": \"nccl_all_reduce\", \"gpus\": %d, \"bytes\": %zu, \"ms\": %.3f, "
                "\"algbw_gb_per_s\": %.1f, \"busbw_gb_per_s\": %.1f}\n",
                gpus, n * sizeof(float), seconds * 1e3, algbw,
                algbw * 2.0 * (gpus - 1) / std::max(gpus, 1));
  }
  for (int g = 0; g < gpus; ++g) {
    CUDA_OK(cudaSetDevice(g));
    cudaFree(buffers[g]);
    cudaStreamDestroy(streams[g]);
    ncclCommDestroy(comms[g]);
  }
  CUDA_OK(cudaSetDevice(0));
}

// ---- Bandwidth ---------------------------------------------------------------------------------

void BenchKernels(Gpu* gpu, bool quick) {
  std::mt19937 rng(99);
  cudaStream_t s = gpu->stream;
  const int64_t scale = quick ? 8 : 1;
  DeviceArray<k::KernelError> error(1);
  error.Fill(0, sizeof(k::KernelError));
  {  // The reachable limit: a device-to-device copy (counts read + write).
    const size_t bytes = (size_t{512} << 20) / scale;
    DeviceArray<char> a(bytes), b(bytes);
    a.Fill(1, bytes);
    const double ms = TimeMs(s, [&] {
      CUDA_OK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s));
    });
    gpu->copy_gb_per_s = 2.0 * bytes / (ms * 1e-3) / 1e9;
    Bandwidth(*gpu, "d2d_copy", "\"bytes\": " + std::to_string(bytes), 2.0 * bytes, ms);
  }
  for (int64_t dim : {16, 64}) {  // gather: read index + rows, write rows
    const int64_t rows = (int64_t{1} << 20) / scale, n = (int64_t{1} << 21) / scale;
    DeviceArray<float> table(RandomFloats(rows * dim, &rng)), out(n * dim);
    DeviceArray<int32_t> index(RandomIndex(n, rows, &rng));
    const double ms = TimeMs(s, [&] {
      CUDA_OK(k::GatherRows(rows, dim, table.get(), index.get(), n, out.get(), error.get(), s));
    });
    Bandwidth(*gpu, "gather_rows",
              "\"dim\": " + std::to_string(dim) + ", \"n\": " + std::to_string(n),
              n * (2.0 * dim * 4 + 4), ms);
    // SegmentSum over the same shape: n gradient rows into `rows` rows (sort included in the
    // time, useful bytes counted: read gradients + index, write the sums).
    size_t bytes = 0;
    CUDA_OK(k::SegmentSumScratchBytes(n, rows, &bytes));
    DeviceArray<char> scratch(bytes);
    DeviceArray<float> sums(rows * dim);
    const double seg_ms = TimeMs(s, [&] {
      CUDA_OK(k::SegmentSum(n, dim, out.get(), index.get(), rows, sums.get(), scratch.get(), bytes,
                            error.get(), s));
    });
    Bandwidth(*gpu, "segment_sum",
              "\"dim\": " + std::to_string(dim) + ", \"n\": " + std::to_string(n) +
                  ", \"num_unique\": " + std::to_string(rows),
              n * (dim * 4.0 + 4) + rows * dim * 4.0, seg_ms);
  }
  {  // Unique over skewed ids: read ids, write index and the unique ids (useful bytes).
    const int64_t n = (int64_t{1} << 22) / scale;
    std::vector<int64_t> ids(n);
    std::uniform_int_distribution<int64_t> dist(0, 1 << 18);
    for (int64_t& id : ids) id = dist(rng) * dist(rng);
    DeviceArray<int64_t> dids(ids), unique(n), count(1);
    DeviceArray<int32_t> index(n);
    size_t bytes = 0;
    CUDA_OK(k::UniqueScratchBytes(n, &bytes));
    DeviceArray<char> scratch(bytes);
    const double ms = TimeMs(s, [&] {
      CUDA_OK(k::Unique(n, dids.get(), unique.get(), index.get(), count.get(), scratch.get(),
                        bytes, s));
    });
    const int64_t u = count.Download()[0];
    Bandwidth(*gpu, "unique", "\"n\": " + std::to_string(n) + ", \"num_unique\": " +
                                  std::to_string(u),
              n * 12.0 + u * 8.0, ms);
  }
  {  // Sum pooling and its gradient.
    const int64_t batch = 65536 / scale, features = 16, dim = 32;
    DeviceArray<float> in(RandomFloats(batch * features * dim, &rng)), out(batch * dim);
    const double ms = TimeMs(s, [&] {
      CUDA_OK(k::SumPool(batch, features, dim, in.get(), out.get(), s));
    });
    const double bytes = batch * dim * 4.0 * (features + 1);
    Bandwidth(*gpu, "sum_pool", "\"batch\": " + std::to_string(batch) + ", \"features\": 16", bytes,
              ms);
    const double grad_ms = TimeMs(s, [&] {
      CUDA_OK(k::SumPoolGrad(batch, features, dim, out.get(), in.get(), s));
    });
    Bandwidth(*gpu, "sum_pool_grad", "\"batch\": " + std::to_string(batch) + ", \"features\": 16",
              bytes, grad_ms);
  }
  {  // Elementwise.
    const int64_t n = (int64_t{1} << 26) / scale;
    DeviceArray<float> x(RandomFloats(n, &rng)), y(RandomFloats(n, &rng));
    const double axpy = TimeMs(s, [&] { CUDA_OK(k::Axpy(n, 1e-3f, x.get(), y.get(), s)); });
    Bandwidth(*gpu, "axpy", "\"n\": " + std::to_string(n), 12.0 * n, axpy);
    const double relu = TimeMs(s, [&] { CUDA_OK(k::Relu(n, x.get(), y.get(), s)); });
    Bandwidth(*gpu, "relu", "\"n\": " + std::to_string(n), 8.0 * n, relu);
    const int64_t cols = 256, rows = n / cols;
    DeviceArray<float> bias(RandomFloats(cols, &rng));
    const double bias_ms =
        TimeMs(s, [&] { CUDA_OK(k::BiasAdd(rows, cols, bias.get(), y.get(), s)); });
    Bandwidth(*gpu, "bias_add", "\"rows\": " + std::to_string(rows) + ", \"cols\": 256",
              8.0 * n, bias_ms);
    DeviceArray<float> dbias(cols);
    const double bias_grad_ms =
        TimeMs(s, [&] { CUDA_OK(k::BiasGrad(rows, cols, y.get(), dbias.get(), s)); });
    Bandwidth(*gpu, "bias_grad", "\"rows\": " + std::to_string(rows) + ", \"cols\": 256",
              4.0 * n, bias_grad_ms);
  }
  {  // Gemm (cuBLAS), GFLOP/s on the MLP's shapes.
    struct Shape {
      int64_t m, n, k;
      bool ta, tb;
    };
    for (const Shape& g : {Shape{1024, 256, 784, false, false}, Shape{784, 256, 1024, true, false},
                           Shape{1024, 784, 256, false, true}, Shape{4096, 4096, 4096, false, false}}) {
      DeviceArray<float> a(RandomFloats(g.m * g.k, &rng)), b(RandomFloats(g.k * g.n, &rng));
      DeviceArray<float> c(g.m * g.n);
      const double ms = TimeMs(s, [&] {
        Gemm(gpu->cublas, g.ta, g.tb, g.m, g.n, g.k, 1, a.get(), g.ta ? g.m : g.k, b.get(),
             g.tb ? g.k : g.n, 0, c.get(), g.n);
      });
      std::printf("{\"bench\": \"gemm\", \"m\": %ld, \"n\": %ld, \"k\": %ld, \"trans_a\": %s, "
                  "\"trans_b\": %s, \"ms\": %.4f, \"gflop_per_s\": %.0f}\n",
                  static_cast<long>(g.m), static_cast<long>(g.n), static_cast<long>(g.k),
                  g.ta ? "true" : "false", g.tb ? "true" : "false", ms,
                  2.0 * g.m * g.n * g.k / (ms * 1e-3) / 1e9);
    }
  }
}

// ---- Training examples/s -----------------------------------------------------------------------

// One SGD step of an MLP with ReLU hidden layers and a softmax cross-entropy head, written once
// over an "ops" object so the GPU and the reference run the same sequence.
struct MlpShape {
  std::vector<int64_t> widths;  // inputs, hidden..., classes
  int64_t batch;
};

template <typename Ops>
void MlpStep(const MlpShape& shape, Ops& ops, float lr) {
  const int layers = static_cast<int>(shape.widths.size()) - 1;
  const int64_t b = shape.batch;
  // Forward: acts[0] = x, acts[l + 1] = relu(acts[l] W_l + b_l) (logits for the last).
  for (int l = 0; l < layers; ++l) {
    const int64_t in = shape.widths[l], out = shape.widths[l + 1];
    ops.Gemm(false, false, b, out, in, 1, ops.act(l), in, ops.w(l), out, 0, ops.act(l + 1), out);
    ops.BiasAdd(b, out, ops.bias(l), ops.act(l + 1));
    if (l + 1 < layers) ops.Relu(b * out, ops.act(l + 1), ops.act(l + 1));
  }
  const int64_t classes = shape.widths.back();
  ops.SoftmaxCrossEntropy(b, classes, ops.act(layers), ops.act(layers));
  ops.SoftmaxCrossEntropyGrad(b, classes, ops.act(layers), ops.grad_act(layers));
  // Backward, then the update W -= lr dW, b -= lr db.
  for (int l = layers - 1; l >= 0; --l) {
    const int64_t in = shape.widths[l], out = shape.widths[l + 1];
    ops.Gemm(true, false, in, out, b, 1, ops.act(l), in, ops.grad_act(l + 1), out, 0, ops.dw(l),
             out);
    ops.BiasGrad(b, out, ops.grad_act(l + 1), ops.dbias(l));
    if (l > 0) {
      ops.Gemm(false, true, b, in, out, 1, ops.grad_act(l + 1), out, ops.w(l), out, 0,
               ops.grad_act(l), in);
      ops.ReluGrad(b * in, ops.act(l), ops.grad_act(l), ops.grad_act(l));
    }
    ops.Axpy(in * out, -lr, ops.dw(l), ops.w(l));
    ops.Axpy(out, -lr, ops.dbias(l), ops.bias(l));
  }
}

// Buffers of one MLP: weights, biases, their gradients, activations and their gradients.
template <typename Alloc>
struct MlpBuffers {
  std::vector<float*> w, bias, dw, dbias, acts, grad_acts;
  MlpBuffers(const MlpShape& shape, Alloc alloc) {
    const int layers = static_cast<int>(shape.widths.size()) - 1;
    for (int l = 0; l < layers; ++l) {
      const int64_t in = shape.widths[l], out = shape.widths[l + 1];
      w.push_back(alloc(in * out, 0.05f));
      bias.push_back(alloc(out, 0.0f));
      dw.push_back(alloc(in * out, 0.0f));
      dbias.push_back(alloc(out, 0.0f));
    }
    for (int l = 0; l <= layers; ++l) {
      acts.push_back(alloc(shape.batch * shape.widths[l], l == 0 ? 1.0f : 0.0f));
      grad_acts.push_back(alloc(shape.batch * shape.widths[l], 0.0f));
    }
  }
};

struct GpuOps {
  Gpu* gpu;
  std::vector<float*> w_, bias_, dw_, dbias_, acts_, grad_acts_;
  int32_t* labels;
  float* loss;
  void* scratch;
  k::KernelError* error;
  float* w(int l) { return w_[l]; }
  float* bias(int l) { return bias_[l]; }
  float* dw(int l) { return dw_[l]; }
  float* dbias(int l) { return dbias_[l]; }
  float* act(int l) { return acts_[l]; }
  float* grad_act(int l) { return grad_acts_[l]; }
  void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t kk, float alpha, const float* a,
            int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    pstrain::Gemm(gpu->cublas, ta, tb, m, n, kk, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void BiasAdd(int64_t r, int64_t c, const float* b, float* x) {
    CUDA_OK(k::BiasAdd(r, c, b, x, gpu->stream));
  }
  void Relu(int64_t n, const float* x, float* y) { CUDA_OK(k::Relu(n, x, y, gpu->stream)); }
  void ReluGrad(int64_t n, const float* y, const float* dy, float* dx) {
    CUDA_OK(k::ReluGrad(n, y, dy, dx, gpu->stream));
  }
  void BiasGrad(int64_t r, int64_t c, const float* dy, float* db) {
    CUDA_OK(k::BiasGrad(r, c, dy, db, gpu->stream));
  }
  void SoftmaxCrossEntropy(int64_t r, int64_t c, const float* logits, float* probs) {
    CUDA_OK(k::SoftmaxCrossEntropy(r, c, logits, labels, probs, loss, scratch, error, gpu->stream));
  }
  void SoftmaxCrossEntropyGrad(int64_t r, int64_t c, const float* probs, float* d) {
    CUDA_OK(k::SoftmaxCrossEntropyGrad(r, c, probs, labels, d, error, gpu->stream));
  }
  void Axpy(int64_t n, float a, const float* x, float* y) {
    CUDA_OK(k::Axpy(n, a, x, y, gpu->stream));
  }
};

struct CpuOps {
  std::vector<float*> w_, bias_, dw_, dbias_, acts_, grad_acts_;
  const int32_t* labels;
  float* w(int l) { return w_[l]; }
  float* bias(int l) { return bias_[l]; }
  float* dw(int l) { return dw_[l]; }
  float* dbias(int l) { return dbias_[l]; }
  float* act(int l) { return acts_[l]; }
  float* grad_act(int l) { return grad_acts_[l]; }
  void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t kk, float alpha, const float* a,
            int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    reference::Gemm(ta, tb, m, n, kk, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void BiasAdd(int64_t r, int64_t c, const float* b, float* x) { reference::BiasAdd(r, c, b, x); }
  void Relu(int64_t n, const float* x, float* y) { reference::Relu(n, x, y); }
  void ReluGrad(int64_t n, const float* y, const float* dy, float* dx) {
    reference::ReluGrad(n, y, dy, dx);
  }
  void BiasGrad(int64_t r, int64_t c, const float* dy, float* db) {
    reference::BiasGrad(r, c, dy, db);
  }
  void SoftmaxCrossEntropy(int64_t r, int64_t c, const float* logits, float* probs) {
    reference::SoftmaxCrossEntropy(r, c, logits, labels, probs);
  }
  void SoftmaxCrossEntropyGrad(int64_t r, int64_t c, const float* probs, float* d) {
    reference::SoftmaxCrossEntropyGrad(r, c, probs, labels, d);
  }
  void Axpy(int64_t n, float a, const float* x, float* y) { reference::Axpy(n, a, x, y); }
};

void BenchTraining(Gpu* gpu, bool quick) {
  std::mt19937 rng(5);
  for (int64_t batch : {256, 1024}) {
    const MlpShape shape{{784, 256, 256, 10}, batch};
    std::string widths;
    for (int64_t w : shape.widths) widths += (widths.empty() ? "" : "-") + std::to_string(w);
    const std::vector<int32_t> labels = RandomIndex(batch, 10, &rng);

    // GPU: everything resident, steps back to back on the stream.
    std::vector<DeviceArray<float>*> owned;
    auto gpu_alloc = [&](int64_t n, float spread) {
      auto* a = new DeviceArray<float>(RandomFloats(n, &rng, -spread, spread));
      owned.push_back(a);
      return a->get();
    };
    MlpBuffers<decltype(gpu_alloc)> gb(shape, gpu_alloc);
    DeviceArray<int32_t> dlabels(labels);
    DeviceArray<float> loss(1);
    DeviceArray<char> scratch(k::kLossScratchBytes);
    DeviceArray<k::KernelError> error(1);
    error.Fill(0, sizeof(k::KernelError));
    GpuOps gops{gpu, gb.w, gb.bias, gb.dw, gb.dbias, gb.acts, gb.grad_acts,
                dlabels.get(), loss.get(), scratch.get(), error.get()};
    const double gpu_ms = TimeMs(gpu->stream, [&] { MlpStep(shape, gops, 1e-3f); });
    for (DeviceArray<float>* a : owned) delete a;

    // Reference: one CPU core, plain loops (not worker/device's optimized CPU device: for that,
    // see `bazel run --config=opt //worker/device:device_bench`, its MLP step line).
    std::vector<std::vector<float>> host;
    host.reserve(64);
    auto cpu_alloc = [&](int64_t n, float spread) {
      host.push_back(RandomFloats(n, &rng, -spread, spread));
      return host.back().data();
    };
    MlpBuffers<decltype(cpu_alloc)> cb(shape, cpu_alloc);
    CpuOps cops{cb.w, cb.bias, cb.dw, cb.dbias, cb.acts, cb.grad_acts, labels.data()};
    const int cpu_steps = quick ? 1 : 3;
    MlpStep(shape, cops, 1e-3f);  // warm
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < cpu_steps; ++i) MlpStep(shape, cops, 1e-3f);
    const double cpu_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
        cpu_steps;
    std::printf("{\"bench\": \"mlp_train_step\", \"widths\": \"%s\", \"batch\": %ld, "
                "\"gpu_ms\": %.4f, \"gpu_examples_per_s\": %.0f, \"cpu_reference_ms\": %.2f, "
                "\"cpu_reference_examples_per_s\": %.0f, \"speedup\": %.1f, "
                "\"cpu_reference\": \"plain loops, 1 core\"}\n",
                widths.c_str(), static_cast<long>(batch), gpu_ms, batch / (gpu_ms * 1e-3), cpu_ms,
                batch / (cpu_ms * 1e-3), cpu_ms / gpu_ms);
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  using namespace pstrain;
  bool quick = false, bench = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--no_bench") == 0) {
      bench = false;
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--no_bench]\n", argv[0]);
      return 2;
    }
  }
  int gpus = 0;
  const cudaError_t e = cudaGetDeviceCount(&gpus);
  if (e != cudaSuccess || gpus == 0) {
    std::printf("{\"skipped\": \"no GPU: %s\"}\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
    return 77;
  }
  Gpu gpu;
  CUDA_OK(cudaSetDevice(gpu.ordinal));
  CUDA_OK(cudaGetDeviceProperties(&gpu.prop, gpu.ordinal));
  int memory_clock_khz = 0, bus_bits = 0;
  CUDA_OK(cudaDeviceGetAttribute(&memory_clock_khz, cudaDevAttrMemoryClockRate, gpu.ordinal));
  CUDA_OK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, gpu.ordinal));
  gpu.peak_gb_per_s = 2.0 * memory_clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  std::printf("{\"gpu\": \"%s\", \"gpus\": %d, \"sm\": \"%d.%d\", \"sms\": %d, "
              "\"memory_gib\": %.1f, \"memory_clock_mhz\": %d, \"bus_bits\": %d, "
              "\"peak_gb_per_s\": %.1f, \"cuda_runtime\": %d, \"cuda_driver\": %d}\n",
              gpu.prop.name, gpus, gpu.prop.major, gpu.prop.minor, gpu.prop.multiProcessorCount,
              gpu.prop.totalGlobalMem / double(1 << 30), memory_clock_khz / 1000, bus_bits,
              gpu.peak_gb_per_s, runtime, driver);
  CUDA_OK(cudaStreamCreateWithFlags(&gpu.stream, cudaStreamNonBlocking));
  CUBLAS_OK(cublasCreate(&gpu.cublas));
  CUBLAS_OK(cublasSetStream(gpu.cublas, gpu.stream));

  Results results;
  CheckKernels(gpu, &results);
  CheckNccl(gpus, bench, &results);
  if (bench) {
    BenchKernels(&gpu, quick);
    BenchTraining(&gpu, quick);
  }
  std::printf("{\"checks\": %d, \"failed\": %d}\n", results.checks, results.failed);
  cublasDestroy(gpu.cublas);
  cudaStreamDestroy(gpu.stream);
  return results.failed == 0 ? 0 : 1;
}
