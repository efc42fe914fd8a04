// The CUDA device: GPU memory, one stream per device, cuBLAS for Gemm, the kernels of
// cuda_kernels.cu for everything else, and NCCL across GPUs (CudaAllReducer). Compiled only in a
// build with CUDA (see cuda_device.h); plain C++ (the host compiler), only cuda_kernels.cu goes
// through nvcc.
//
// Ordering. Every op is enqueued on the device's stream, so ops run in the order they are issued
// and the host returns before the GPU is done; Synchronize(), CopyToHost() and Unique() wait.
// CopyToDevice() returns when the host buffer may be reused (pageable memory is staged by the
// driver before the call returns; page-locked memory is waited for).
//
// Scratch memory (Unique's and SegmentSum's sort buffers, the losses' partial sums) comes from the
// stream-ordered allocator (cudaMallocAsync / cudaFreeAsync on the device's stream), whose pool
// keeps freed memory for the next op rather than returning it to the driver (plain cudaMalloc on a
// GPU without memory pools).
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "worker/device/cuda_device.h"
#include "worker/device/cuda_kernels.h"
#include "worker/device/device.h"

namespace pstrain {
namespace cuda_backend {
namespace {

namespace k = ::pstrain::cuda_kernels;

absl::Status CudaError(const std::string& where, cudaError_t e) {
  if (e == cudaSuccess) return absl::OkStatus();
  const std::string message =
      absl::StrCat(where, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

absl::Status CublasError(const std::string& where, cublasStatus_t s) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(where, ": cuBLAS status ", static_cast<int>(s)));
}

absl::Status NcclError(const std::string& where, ncclResult_t r) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(where, ": NCCL: ", ncclGetErrorString(r)));
}

class CudaDevice : public Device {
 public:
  // Takes ownership of the stream, handle and error record. `pools`: the GPU supports the
  // stream-ordered allocator (else scratch memory is plain cudaMalloc / cudaFree).
  CudaDevice(int ordinal, cudaStream_t stream, cublasHandle_t cublas, k::KernelError* error,
             bool pools)
      : ordinal_(ordinal), stream_(stream), pools_(pools), cublas_(cublas), error_(error) {}

  ~CudaDevice() override {
    cudaSetDevice(ordinal_);
    cudaStreamSynchronize(stream_);
    cublasDestroy(cublas_);
    cudaFree(error_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return absl::StrCat("cuda:", ordinal_); }
  bool host_memory() const override { return false; }
  int ordinal() const { return ordinal_; }
  cudaStream_t stream() const { return stream_; }

  absl::Status Synchronize() override {
    RETURN_IF_ERROR(Bind());
    return WaitAndCheck("Synchronize");
  }

 protected:
  absl::StatusOr<void*> DoAllocate(int64_t bytes) override {
    RETURN_IF_ERROR(Bind());
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear it: an allocation failure is not sticky
      return CudaError(absl::StrCat(name(), ": Allocate(", bytes, ")"), e);
    }
    return p;
  }
  void DoFree(void* data) override {
    cudaSetDevice(ordinal_);
    cudaFree(data);  // waits for the GPU work in flight, which may still use the buffer
  }
  absl::Status DoCopyToDevice(const void* host, void* device, int64_t bytes) override {
    RETURN_IF_ERROR(Bind());
    RETURN_IF_ERROR(Check("CopyToDevice", cudaMemcpyAsync(device, host, bytes,
                                                          cudaMemcpyHostToDevice, stream_)));
    cudaPointerAttributes attributes;
    if (cudaPointerGetAttributes(&attributes, host) == cudaSuccess &&
        attributes.type == cudaMemoryTypeHost) {
      // Page-locked: the copy is truly asynchronous, and the caller may reuse `host` on return.
      return Check("CopyToDevice", cudaStreamSynchronize(stream_));
    }
    cudaGetLastError();  // an unregistered host pointer is not an error
    return absl::OkStatus();
  }
  absl::Status DoCopyToHost(const void* device, void* host, int64_t bytes) override {
    RETURN_IF_ERROR(Bind());
    RETURN_IF_ERROR(Check("CopyToHost", cudaMemcpyAsync(host, device, bytes,
                                                        cudaMemcpyDeviceToHost, stream_)));
    return WaitAndCheck("CopyToHost");
  }
  absl::Status DoCopyOnDevice(const void* from, void* to, int64_t bytes) override {
    RETURN_IF_ERROR(Bind());
    return Check("CopyOnDevice",
                 cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  absl::Status DoZero(void* device, int64_t bytes) override {
    RETURN_IF_ERROR(Bind());
    return Check("Zero", cudaMemsetAsync(device, 0, bytes, stream_));
  }

  absl::Status DoGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t kk, float alpha,
                      const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                      float* c, int64_t ldc) override {
    RETURN_IF_ERROR(Bind());
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the column-major view of a
    // row-major buffer is its transpose, so B and A swap places and keep their own op.
    absl::MutexLock lock(&cublas_mu_);
    return CublasError(absl::StrCat(name(), ": Gemm"),
                       cublasSgemm_64(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                      trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, kk, &alpha, b,
                                      ldb, a, lda, &beta, c, ldc));
  }
  absl::Status DoBiasAdd(int64_t rows, int64_t cols, const float* bias, float* x) override {
    RETURN_IF_ERROR(Bind());
    return Check("BiasAdd", k::BiasAdd(rows, cols, bias, x, stream_));
  }
  absl::Status DoBiasGrad(int64_t rows, int64_t cols, const float* dy, float* dbias) override {
    RETURN_IF_ERROR(Bind());
    return Check("BiasGrad", k::BiasGrad(rows, cols, dy, dbias, stream_));
  }
  absl::Status DoRelu(int64_t n, const float* x, float* y) override {
    RETURN_IF_ERROR(Bind());
    return Check("Relu", k::Relu(n, x, y, stream_));
  }
  absl::Status DoReluGrad(int64_t n, const float* y, const float* dy, float* dx) override {
    RETURN_IF_ERROR(Bind());
    return Check("ReluGrad", k::ReluGrad(n, y, dy, dx, stream_));
  }
  absl::Status DoSigmoid(int64_t n, const float* x, float* y) override {
    RETURN_IF_ERROR(Bind());
    return Check("Sigmoid", k::Sigmoid(n, x, y, stream_));
  }

  absl::Status DoSoftmaxCrossEntropy(int64_t rows, int64_t classes, const float* logits,
                                     const int32_t* labels, float* probs, float* loss) override {
    RETURN_IF_ERROR(Bind());
    ASSIGN_OR_RETURN(Scratch scratch, Scratch::Make(this, k::kLossScratchBytes));
    return Check("SoftmaxCrossEntropy",
                 k::SoftmaxCrossEntropy(rows, classes, logits, labels, probs, loss,
                                        scratch.data(), error_, stream_));
  }
  absl::Status DoSoftmaxCrossEntropyGrad(int64_t rows, int64_t classes, const float* probs,
                                         const int32_t* labels, float* dlogits) override {
    RETURN_IF_ERROR(Bind());
    return Check("SoftmaxCrossEntropyGrad",
                 k::SoftmaxCrossEntropyGrad(rows, classes, probs, labels, dlogits, error_,
                                            stream_));
  }
  absl::Status DoSigmoidCrossEntropy(int64_t n, const float* logits, const float* labels,
                                     float* loss, float* dlogits) override {
    RETURN_IF_ERROR(Bind());
    ASSIGN_OR_RETURN(Scratch scratch, Scratch::Make(this, k::kLossScratchBytes));
    return Check("SigmoidCrossEntropy", k::SigmoidCrossEntropy(n, logits, labels, loss, dlogits,
                                                               scratch.data(), stream_));
  }
  absl::Status DoMeanSquaredError(int64_t n, const float* predictions, const float* targets,
                                  float* loss, float* dpred) override {
    RETURN_IF_ERROR(Bind());
    ASSIGN_OR_RETURN(Scratch scratch, Scratch::Make(this, k::kLossScratchBytes));
    return Check("MeanSquaredError", k::MeanSquaredError(n, predictions, targets, loss, dpred,
                                                         scratch.data(), stream_));
  }

  absl::StatusOr<int64_t> DoUnique(int64_t n, const int64_t* ids, int64_t* unique_ids,
                                   int32_t* index) override {
    RETURN_IF_ERROR(Bind());
    size_t bytes = 0;
    RETURN_IF_ERROR(Check("Unique", k::UniqueScratchBytes(n, &bytes)));
    // The count goes after the sort buffers.
    const size_t count_offset = (bytes + 255) / 256 * 256;
    ASSIGN_OR_RETURN(Scratch scratch, Scratch::Make(this, count_offset + sizeof(int64_t)));
    int64_t* device_count =
        reinterpret_cast<int64_t*>(static_cast<char*>(scratch.data()) + count_offset);
    RETURN_IF_ERROR(Check("Unique", k::Unique(n, ids, unique_ids, index, device_count,
                                              scratch.data(), bytes, stream_)));
    int64_t count = 0;
    RETURN_IF_ERROR(Check("Unique", cudaMemcpyAsync(&count, device_count, sizeof(count),
                                                    cudaMemcpyDeviceToHost, stream_)));
    RETURN_IF_ERROR(WaitAndCheck("Unique"));
    return count;
  }
  absl::Status DoGatherRows(int64_t num_rows, int64_t dim, const float* table,
                            const int32_t* index, int64_t n, float* out) override {
    RETURN_IF_ERROR(Bind());
    return Check("GatherRows", k::GatherRows(num_rows, dim, table, index, n, out, error_, stream_));
  }
  absl::Status DoSumPool(int64_t batch, int64_t features, int64_t dim, const float* in,
                         float* out) override {
    RETURN_IF_ERROR(Bind());
    return Check("SumPool", k::SumPool(batch, features, dim, in, out, stream_));
  }
  absl::Status DoSumPoolGrad(int64_t batch, int64_t features, int64_t dim, const float* dout,
                             float* din) override {
    RETURN_IF_ERROR(Bind());
    return Check("SumPoolGrad", k::SumPoolGrad(batch, features, dim, dout, din, stream_));
  }
  absl::Status DoSegmentSum(int64_t n, int64_t dim, const float* grads, const int32_t* index,
                            int64_t num_unique, float* out) override {
    RETURN_IF_ERROR(Bind());
    if (n > INT32_MAX || num_unique > INT32_MAX - 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          name(), ": SegmentSum: n (", n, ") and num_unique (", num_unique,
          ") must be below 2^31 on a GPU"));
    }
    if (num_unique == 0) return absl::OkStatus();  // n == 0 too (Device checked)
    size_t bytes = 0;
    RETURN_IF_ERROR(Check("SegmentSum", k::SegmentSumScratchBytes(n, num_unique, &bytes)));
    ASSIGN_OR_RETURN(Scratch scratch, Scratch::Make(this, bytes));
    return Check("SegmentSum", k::SegmentSum(n, dim, grads, index, num_unique, out,
                                             scratch.data(), bytes, error_, stream_));
  }
  absl::Status DoConcatColumns(int64_t rows, absl::Span<const ConstColumnBlock> blocks,
                               float* out) override {
    RETURN_IF_ERROR(Bind());
    int64_t width = 0;
    for (const ConstColumnBlock& block : blocks) width += block.cols;
    int64_t offset = 0;
    for (const ConstColumnBlock& block : blocks) {
      if (block.cols > 0) {
        RETURN_IF_ERROR(Check("ConcatColumns",
                              cudaMemcpy2DAsync(out + offset, width * sizeof(float), block.data,
                                                block.ld * sizeof(float),
                                                block.cols * sizeof(float), rows,
                                                cudaMemcpyDeviceToDevice, stream_)));
      }
      offset += block.cols;
    }
    return absl::OkStatus();
  }
  absl::Status DoSplitColumns(int64_t rows, const float* in,
                              absl::Span<const ColumnBlock> blocks) override {
    RETURN_IF_ERROR(Bind());
    int64_t width = 0;
    for (const ColumnBlock& block : blocks) width += block.cols;
    int64_t offset = 0;
    for (const ColumnBlock& block : blocks) {
      if (block.cols > 0) {
        RETURN_IF_ERROR(Check("SplitColumns",
                              cudaMemcpy2DAsync(block.data, block.ld * sizeof(float), in + offset,
                                                width * sizeof(float),
                                                block.cols * sizeof(float), rows,
                                                cudaMemcpyDeviceToDevice, stream_)));
      }
      offset += block.cols;
    }
    return absl::OkStatus();
  }
  absl::Status DoConv2D(const Window2D& window, const Window2DOutput& out, int64_t out_channels,
                        const float* input, const float* filter, float* output) override {
    RETURN_IF_ERROR(Bind());
    const ConvPlan plan(window, out);
    ASSIGN_OR_RETURN(Scratch col, Scratch::Make(this, plan.ScratchBytes()));
    for (int64_t n0 = 0; n0 < window.batch; n0 += plan.chunk) {
      const int64_t images = std::min(plan.chunk, window.batch - n0);
      const float* a = input + n0 * plan.image;
      if (!plan.identity) {
        RETURN_IF_ERROR(Check("Conv2D", k::Im2Col(plan.args, images, a,
                                                  static_cast<float*>(col.data()), stream_)));
        a = static_cast<const float*>(col.data());
      }
      RETURN_IF_ERROR(DoGemm(/*trans_a=*/false, /*trans_b=*/false, images * plan.pixels,
                             out_channels, plan.cols, /*alpha=*/1, a, plan.cols, filter,
                             out_channels, /*beta=*/0, output + n0 * plan.pixels * out_channels,
                             out_channels));
    }
    return absl::OkStatus();
  }
  absl::Status DoConv2DGrad(const Window2D& window, const Window2DOutput& out,
                            int64_t out_channels, const float* input, const float* filter,
                            const float* d_output, float* d_input, float* d_filter) override {
    RETURN_IF_ERROR(Bind());
    const ConvPlan plan(window, out);
    ASSIGN_OR_RETURN(Scratch col, Scratch::Make(this, plan.ScratchBytes()));
    float* columns = static_cast<float*>(col.data());
    for (int64_t n0 = 0; n0 < window.batch; n0 += plan.chunk) {
      const int64_t images = std::min(plan.chunk, window.batch - n0);
      const int64_t rows = images * plan.pixels;
      const float* dy = d_output + n0 * plan.pixels * out_channels;
      if (d_filter != nullptr) {
        const float* a = input + n0 * plan.image;
        if (!plan.identity) {
          RETURN_IF_ERROR(
              Check("Conv2DGrad", k::Im2Col(plan.args, images, a, columns, stream_)));
          a = columns;
        }
        RETURN_IF_ERROR(DoGemm(/*trans_a=*/true, /*trans_b=*/false, plan.cols, out_channels, rows,
                               /*alpha=*/1, a, plan.cols, dy, out_channels,
                               /*beta=*/n0 == 0 ? 0.0f : 1.0f, d_filter, out_channels));
      }
      if (d_input != nullptr) {
        float* dx = d_input + n0 * plan.image;
        float* dcol = plan.identity ? dx : columns;
        RETURN_IF_ERROR(DoGemm(/*trans_a=*/false, /*trans_b=*/true, rows, plan.cols, out_channels,
                               /*alpha=*/1, dy, out_channels, filter, out_channels, /*beta=*/0,
                               dcol, plan.cols));
        if (!plan.identity) {
          RETURN_IF_ERROR(
              Check("Conv2DGrad", k::Col2Im(plan.args, images, columns, dx, stream_)));
        }
      }
    }
    return absl::OkStatus();
  }
  absl::Status DoMaxPool2D(const Window2D& window, const Window2DOutput& out, const float* input,
                           float* output, int32_t* argmax) override {
    RETURN_IF_ERROR(Bind());
    return Check("MaxPool2D",
                 k::MaxPool2D(WindowArgs(window, out), input, output, argmax, stream_));
  }
  absl::Status DoMaxPool2DGrad(const Window2D& window, const Window2DOutput& out,
                               const float* d_output, const int32_t* argmax,
                               float* d_input) override {
    RETURN_IF_ERROR(Bind());
    return Check("MaxPool2DGrad", k::MaxPool2DGrad(WindowArgs(window, out), d_output, argmax,
                                                   d_input, error_, stream_));
  }
  absl::Status DoAxpy(int64_t n, float alpha, const float* x, float* y) override {
    RETURN_IF_ERROR(Bind());
    return Check("Axpy", k::Axpy(n, alpha, x, y, stream_));
  }
  absl::Status DoScale(int64_t n, float alpha, float* x) override {
    RETURN_IF_ERROR(Bind());
    return Check("Scale", k::Scale(n, alpha, x, stream_));
  }
  absl::Status DoRowDot(int64_t rows, int64_t dim, const float* a, const float* b,
                        float* out) override {
    RETURN_IF_ERROR(Bind());
    return Check("RowDot", k::RowDot(rows, dim, a, b, out, stream_));
  }
  absl::Status DoRowDotGrad(int64_t rows, int64_t dim, const float* a, const float* b,
                            const float* dout, float* da, float* db) override {
    RETURN_IF_ERROR(Bind());
    return Check("RowDotGrad", k::RowDotGrad(rows, dim, a, b, dout, da, db, stream_));
  }
  absl::Status DoAllReduceSum(absl::Span<float* const> buffers, int64_t n) override {
    RETURN_IF_ERROR(Bind());
    for (size_t i = 0; i < buffers.size(); ++i) {
      cudaPointerAttributes attributes;
      const cudaError_t e = cudaPointerGetAttributes(&attributes, buffers[i]);
      if (e != cudaSuccess || attributes.type != cudaMemoryTypeDevice ||
          attributes.device != ordinal_) {
        cudaGetLastError();
        return absl::InvalidArgumentError(absl::StrCat(
            name(), ": AllReduceSum: buffers[", i, "] is not this GPU's memory (to sum across "
            "GPUs, use ReplicaGroup, which uses NCCL)"));
      }
    }
    return Check("AllReduceSum", k::SumBuffers(static_cast<int>(buffers.size()), buffers.data(),
                                               n, stream_));
  }

 private:
  // Scratch device memory from the stream-ordered pool, freed (in stream order) when it goes out
  // of scope: after the op using it has been enqueued, so the GPU is done with it before reuse.
  // Without pool support, cudaMalloc / cudaFree (which waits for the GPU).
  class Scratch {
   public:
    static absl::StatusOr<Scratch> Make(CudaDevice* device, size_t bytes) {
      void* p = nullptr;
      const size_t size = std::max<size_t>(bytes, 1);
      const cudaError_t e = device->pools_ ? cudaMallocAsync(&p, size, device->stream_)
                                           : cudaMalloc(&p, size);
      if (e != cudaSuccess) {
        cudaGetLastError();
        return CudaError(absl::StrCat(device->name(), ": scratch of ", bytes, " bytes"), e);
      }
      return Scratch(device->pools_ ? device->stream_ : nullptr, p);
    }
    Scratch(Scratch&& other) noexcept
        : stream_(other.stream_), data_(std::exchange(other.data_, nullptr)) {}
    Scratch& operator=(Scratch&&) = delete;
    ~Scratch() {
      if (data_ == nullptr) return;
      if (stream_ != nullptr) {
        cudaFreeAsync(data_, stream_);
      } else {
        cudaFree(data_);
      }
    }
    void* data() const { return data_; }

   private:
    Scratch(cudaStream_t stream, void* data) : stream_(stream), data_(data) {}
    cudaStream_t stream_;  // null: cudaMalloc'd
    void* data_;
  };

  // The kernels' view of a window.
  static k::Window2DArgs WindowArgs(const Window2D& w, const Window2DOutput& out) {
    return k::Window2DArgs{w.batch,         w.height,       w.width,          w.channels,
                           w.window_height, w.window_width, w.stride_height,  w.stride_width,
                           out.height,      out.width,      out.pad_top,      out.pad_left};
  }

  // How a convolution runs: im2col over groups of `chunk` images whose column matrix stays under
  // kConvScratchBytes (device.h), or none for a 1x1 window with stride 1.
  struct ConvPlan {
    static constexpr int64_t kConvScratchBytes = int64_t{64} << 20;
    ConvPlan(const Window2D& w, const Window2DOutput& out)
        : args(WindowArgs(w, out)),
          cols(w.window_height * w.window_width * w.channels),
          pixels(out.height * out.width),
          image(w.height * w.width * w.channels),
          identity(w.window_height == 1 && w.window_width == 1 && w.stride_height == 1 &&
                   w.stride_width == 1),
          chunk(identity ? w.batch : ImagesPerGroup(w.batch, pixels * cols)) {}
    // Images whose column matrices (`floats_per_image` each) fit kConvScratchBytes; at least 1.
    static int64_t ImagesPerGroup(int64_t batch, int64_t floats_per_image) {
      const int64_t bytes = std::max<int64_t>(1, floats_per_image * int64_t{sizeof(float)});
      return std::max<int64_t>(1, std::min(batch, kConvScratchBytes / bytes));
    }
    size_t ScratchBytes() const {
      return identity ? 0 : static_cast<size_t>(chunk * pixels * cols) * sizeof(float);
    }
    const k::Window2DArgs args;
    const int64_t cols;    // the column matrix's width: one window's floats
    const int64_t pixels;  // output pixels per image
    const int64_t image;   // floats per input image
    const bool identity;
    const int64_t chunk;   // images per column matrix
  };

  // Makes this device the calling thread's current one (kernels and allocations go to it).
  absl::Status Bind() { return CudaError(absl::StrCat(name(), ": cudaSetDevice"),
                                         cudaSetDevice(ordinal_)); }

  absl::Status Check(const char* op, cudaError_t e) {
    return CudaError(absl::StrCat(name(), ": ", op), e);
  }

  // Waits for the stream, then reports (and clears) an error a kernel recorded.
  absl::Status WaitAndCheck(const char* op) {
    k::KernelError record{};
    RETURN_IF_ERROR(Check(op, cudaMemcpyAsync(&record, error_, sizeof(record),
                                              cudaMemcpyDeviceToHost, stream_)));
    RETURN_IF_ERROR(Check(op, cudaStreamSynchronize(stream_)));
    if (record.op == k::kNoError) return absl::OkStatus();
    RETURN_IF_ERROR(Check(op, cudaMemsetAsync(error_, 0, sizeof(*error_), stream_)));
    RETURN_IF_ERROR(Check(op, cudaStreamSynchronize(stream_)));
    const bool label = record.op == k::kSoftmaxCrossEntropy ||
                       record.op == k::kSoftmaxCrossEntropyGrad;
    if (record.op == k::kMaxPool2DGrad) {
      return absl::InvalidArgumentError(absl::StrCat(
          k::KernelOpName(record.op), ": argmax[", record.position, "] = ", record.value,
          " is not an element of its output's window in the same channel (images of ",
          record.limit, " elements; ", name(), ", reported at ", op,
          "; its gradient was dropped)"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        k::KernelOpName(record.op), ": ", label ? "labels[" : "index[", record.position,
        "] = ", record.value, " is outside [0, ", record.limit, ") (", name(),
        ", reported at ", op, "; rows with a bad index were written as zeros)"));
  }

  const int ordinal_;
  const cudaStream_t stream_;
  const bool pools_;
  // cuBLAS calls on one handle must not overlap.
  absl::Mutex cublas_mu_;
  cublasHandle_t cublas_ ABSL_GUARDED_BY(cublas_mu_);
  k::KernelError* const error_;  // device memory
};

class NcclAllReducer : public CudaAllReducer {
 public:
  NcclAllReducer(std::vector<CudaDevice*> devices, std::vector<ncclComm_t> comms)
      : devices_(std::move(devices)), comms_(std::move(comms)) {}
  ~NcclAllReducer() override {
    for (size_t i = 0; i < comms_.size(); ++i) {
      cudaSetDevice(devices_[i]->ordinal());
      cudaStreamSynchronize(devices_[i]->stream());
      ncclCommDestroy(comms_[i]);
    }
  }

  absl::Status AllReduceSum(absl::Span<float* const> buffers, int64_t n) override {
    if (buffers.size() != devices_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("AllReduceSum: ", buffers.size(),
                                                     " buffers for ", devices_.size(), " GPUs"));
    }
    if (n < 0) {
      return absl::InvalidArgumentError(absl::StrCat("AllReduceSum: n must be >= 0, got ", n));
    }
    if (n == 0 || devices_.size() == 1) return absl::OkStatus();
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(NcclError("AllReduceSum: ncclGroupStart", ncclGroupStart()));
    absl::Status status;
    for (size_t i = 0; i < devices_.size() && status.ok(); ++i) {
      status = NcclError(absl::StrCat("AllReduceSum on ", devices_[i]->name()),
                         ncclAllReduce(buffers[i], buffers[i], static_cast<size_t>(n), ncclFloat,
                                       ncclSum, comms_[i], devices_[i]->stream()));
    }
    const absl::Status end = NcclError("AllReduceSum: ncclGroupEnd", ncclGroupEnd());
    RETURN_IF_ERROR(status);
    return end;
  }

 private:
  const std::vector<CudaDevice*> devices_;
  const std::vector<ncclComm_t> comms_;
  absl::Mutex mu_;  // one collective enqueued at a time, in the same order on every GPU
};

}  // namespace

bool CudaBuild() { return true; }

int CudaDeviceCount(std::string* why_none) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // e.g. no driver or no device: "no GPU", not a failure
    if (why_none != nullptr) {
      *why_none = absl::StrCat("no CUDA GPU usable (cudaGetDeviceCount: ", cudaGetErrorName(e),
                               ", ", cudaGetErrorString(e), ")");
    }
    return 0;
  }
  if (count == 0 && why_none != nullptr) *why_none = "no CUDA GPU on this machine";
  return count;
}

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int ordinal) {
  if (ordinal < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CreateDevice: gpu_ordinal must be >= 0, got ", ordinal));
  }
  std::string why_none;
  const int count = CudaDeviceCount(&why_none);
  if (count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("CreateDevice: cuda:", ordinal, " asked for, but ", why_none));
  }
  if (ordinal >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CreateDevice: cuda:", ordinal, " asked for, but the machine has ", count, " GPU(s)"));
  }
  const std::string where = absl::StrCat("CreateDevice(cuda:", ordinal, ")");
  RETURN_IF_ERROR(CudaError(where + ": cudaSetDevice", cudaSetDevice(ordinal)));
  // Keep freed scratch in the pool instead of handing it back to the driver at each sync.
  int pools = 0;
  cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, ordinal);
  cudaMemPool_t pool;
  if (pools != 0 && cudaDeviceGetDefaultMemPool(&pool, ordinal) == cudaSuccess) {
    uint64_t threshold = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  }
  cudaGetLastError();
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(CudaError(where + ": cudaStreamCreate",
                            cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)));
  k::KernelError* error = nullptr;
  cudaError_t e = cudaMalloc(&error, sizeof(*error));
  if (e == cudaSuccess) e = cudaMemset(error, 0, sizeof(*error));
  if (e != cudaSuccess) {
    cudaFree(error);
    cudaStreamDestroy(stream);
    return CudaError(where + ": error record", e);
  }
  cublasHandle_t cublas = nullptr;
  cublasStatus_t s = cublasCreate(&cublas);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(cublas, stream);
  if (s != CUBLAS_STATUS_SUCCESS) {
    if (cublas != nullptr) cublasDestroy(cublas);
    cudaFree(error);
    cudaStreamDestroy(stream);
    return CublasError(where + ": cublasCreate", s);
  }
  return std::unique_ptr<Device>(
      std::make_unique<CudaDevice>(ordinal, stream, cublas, error, pools != 0));
}

absl::StatusOr<std::unique_ptr<CudaAllReducer>> CreateCudaAllReducer(
    absl::Span<Device* const> devices) {
  if (devices.empty()) {
    return absl::InvalidArgumentError("CreateCudaAllReducer: no devices");
  }
  std::vector<CudaDevice*> cuda_devices;
  std::vector<int> ordinals;
  for (size_t i = 0; i < devices.size(); ++i) {
    auto* device = dynamic_cast<CudaDevice*>(devices[i]);
    if (device == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CreateCudaAllReducer: devices[", i, "] (",
          devices[i] == nullptr ? "null" : devices[i]->name(), ") is not a CUDA device"));
    }
    if (std::find(ordinals.begin(), ordinals.end(), device->ordinal()) != ordinals.end()) {
      return absl::InvalidArgumentError(absl::StrCat("CreateCudaAllReducer: ", device->name(),
                                                     " appears twice (one replica per GPU)"));
    }
    cuda_devices.push_back(device);
    ordinals.push_back(device->ordinal());
  }
  std::vector<ncclComm_t> comms(devices.size());
  RETURN_IF_ERROR(NcclError("CreateCudaAllReducer: ncclCommInitAll",
                            ncclCommInitAll(comms.data(), static_cast<int>(comms.size()),
                                            ordinals.data())));
  return std::unique_ptr<CudaAllReducer>(
      std::make_unique<NcclAllReducer>(std::move(cuda_devices), std::move(comms)));
}

}  // namespace cuda_backend
}  // namespace pstrain
