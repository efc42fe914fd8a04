// The worker's math layer: the dense, convolution and embedding ops that models call in their
// forward and backward passes, behind one abstract `Device`. The CPU device (the reference, and
// what CI runs) is made by CreateCpuDevice(); the CUDA device (cuda_device.cc, in a build with
// CUDA) sits behind the same interface, chosen at run time by CreateDevice() when a GPU is present.
// Float32 only.
//
// Memory. Every pointer an op takes is a *device pointer*: memory from Allocate(), or (on a device
// whose host_memory() is true, such as the CPU) any host memory the caller owns. Move data in and out
// with CopyToDevice() / CopyToHost(). Matrices are row-major; `ld*` arguments are row strides in
// elements. Indices into row tables are int32 (a batch has far fewer than 2^31 rows).
//
// Errors. Ops check their arguments and return kInvalidArgument naming the op and the argument
// (negative size, leading dimension too small, null pointer with a nonzero size, index, label or
// argmax out of range) before writing anything. Ops may run asynchronously on an accelerator: their
// results are ready for the host after Synchronize() (or the next CopyToHost(), which waits). On
// the CPU every op has finished when it returns. On a GPU the data-dependent checks (index, label
// and argmax ranges) run in the kernels: such an error comes back from the next Synchronize(),
// CopyToHost() or Unique(), and the rows with a bad index are written as zeros (a bad argmax's
// gradient is dropped).
//
// Aliasing. Outputs must not overlap inputs unless the op's comment says so.
#ifndef PSTRAIN_WORKER_DEVICE_DEVICE_H_
#define PSTRAIN_WORKER_DEVICE_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace pstrain {

class Device;
class ThreadPool;

// Device memory, freed by the device that allocated it (which must outlive it). Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  int64_t bytes() const { return bytes_; }

 private:
  friend class Device;
  DeviceBuffer(Device* owner, void* data, int64_t bytes)
      : owner_(owner), data_(data), bytes_(bytes) {}
  void Release();

  Device* owner_ = nullptr;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// ---- Convolution and pooling geometry ---------------------------------------------------------

// How a 2-D window (a convolution's filter, a pooling window) is laid over an image, as TensorFlow
// defines it, in each spatial dimension of input size `in`, window `k` and stride `s`:
//   kValid  no padding: every window lies inside the image; out = (in - k) / s + 1 (in >= k).
//   kSame   out = ceil(in / s); the image is padded by max((out - 1) * s + k - in, 0) in all, the
//           smaller half (floor) before the first row / column and the rest after. Conv2D reads the
//           padding as zeros; MaxPool2D ignores it (every window still covers part of the image).
enum class Padding { kValid, kSame };

// A 2-D window sliding over a batch of NHWC images [batch, height, width, channels] (row-major,
// channels fastest). For a convolution `channels` are its input channels and the window its filter.
struct Window2D {
  int64_t batch = 0;          // images; default 0
  int64_t height = 0;         // rows of each image; default 0
  int64_t width = 0;          // columns of each image; default 0
  int64_t channels = 0;       // channels of each pixel; default 0
  int64_t window_height = 1;  // the window's rows (>= 1); default 1
  int64_t window_width = 1;   // the window's columns (>= 1); default 1
  int64_t stride_height = 1;  // rows between windows (>= 1); default 1
  int64_t stride_width = 1;   // columns between windows (>= 1); default 1
  Padding padding = Padding::kValid;  // default kValid
};

// Where a Window2D's windows land: the output's rows and columns (the output is
// [batch, height, width, out channels]), and the padding before the first row and column (0 with
// kValid). Output pixel (oy, ox)'s window starts at image row oy * stride_height - pad_top and
// column ox * stride_width - pad_left.
struct Window2DOutput {
  int64_t height = 0;
  int64_t width = 0;
  int64_t pad_top = 0;
  int64_t pad_left = 0;
};

// The output geometry of `window`. Errors: kInvalidArgument naming the field (a negative size, a
// window or stride < 1, a kValid window larger than the image, sizes that overflow int64).
absl::StatusOr<Window2DOutput> ComputeWindow2DOutput(const Window2D& window);

// One compute device. Thread-safe: ops may be called from several threads at once (on outputs that
// do not overlap). The public methods check their arguments, then call the backend's Do* hook.
class Device {
 public:
  virtual ~Device() = default;

  // "cpu", later "cuda:0".
  virtual std::string name() const = 0;
  // True when device pointers are ordinary host pointers (the CPU): a caller may then hand host
  // buffers straight to ops and skip the copies.
  virtual bool host_memory() const = 0;

  // ---- Memory ----------------------------------------------------------------------------------

  // `bytes` of uninitialized device memory, aligned to 64 bytes.
  // Errors: kInvalidArgument (bytes < 0), kResourceExhausted (out of device memory).
  absl::StatusOr<DeviceBuffer> Allocate(int64_t bytes);
  // Host -> device, device -> host, device -> device (regions must not overlap); `bytes` each.
  absl::Status CopyToDevice(const void* host, void* device, int64_t bytes);
  absl::Status CopyToHost(const void* device, void* host, int64_t bytes);
  absl::Status CopyOnDevice(const void* from, void* to, int64_t bytes);
  // Sets `bytes` of device memory to zero.
  absl::Status Zero(void* device, int64_t bytes);
  // Waits for every op issued so far on this device. Errors: a failure an asynchronous op reported.
  virtual absl::Status Synchronize() = 0;

  // ---- Dense layers ----------------------------------------------------------------------------

  // C = alpha * op(A) * op(B) + beta * C, row-major, op(X) = X or X^T. op(A) is m x k, op(B) is
  // k x n, C is m x n. A is stored m x k (lda >= k) or, transposed, k x m (lda >= m); likewise B is
  // k x n (ldb >= n) or n x k (ldb >= k); ldc >= n. beta == 0 ignores C's contents (NaN included).
  absl::Status Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                    int64_t ldc);
  // x[r][c] += bias[c] for x of rows x cols (in place).
  absl::Status BiasAdd(int64_t rows, int64_t cols, const float* bias, float* x);
  // dbias[c] = sum over r of dy[r][c] (the column sums; overwrites dbias).
  absl::Status BiasGrad(int64_t rows, int64_t cols, const float* dy, float* dbias);
  // y = max(x, 0) elementwise over n values; y may be x.
  absl::Status Relu(int64_t n, const float* x, float* y);
  // dx = dy where y > 0, else 0; `y` is Relu's output (or its input: same sign). dx may be dy.
  absl::Status ReluGrad(int64_t n, const float* y, const float* dy, float* dx);
  // y = 1 / (1 + exp(-x)) elementwise; y may be x.
  absl::Status Sigmoid(int64_t n, const float* x, float* y);

  // ---- Losses (numerically stable; the loss is one float in device memory, 0 for an empty batch) -

  // Softmax over each row of `logits` [rows, classes] into `probs` (same shape; may be logits), and
  // *loss = mean over rows of -log(probs[r][labels[r]]). labels[r] in [0, classes).
  absl::Status SoftmaxCrossEntropy(int64_t rows, int64_t classes, const float* logits,
                                   const int32_t* labels, float* probs, float* loss);
  // dlogits = (probs - onehot(labels)) / rows: the gradient of SoftmaxCrossEntropy's mean loss.
  // dlogits may be probs.
  absl::Status SoftmaxCrossEntropyGrad(int64_t rows, int64_t classes, const float* probs,
                                       const int32_t* labels, float* dlogits);
  // Binary cross-entropy on n logits with labels in [0, 1]: *loss = mean of
  // -(y log s(x) + (1 - y) log(1 - s(x))), computed as max(x, 0) - x y + log1p(exp(-|x|));
  // dlogits (may be null: forward only; may be logits) = (s(x) - y) / n.
  absl::Status SigmoidCrossEntropy(int64_t n, const float* logits, const float* labels, float* loss,
                                   float* dlogits);
  // *loss = mean of (p - t)^2 over n values; dpred (may be null; may be predictions) = 2 (p - t) / n.
  absl::Status MeanSquaredError(int64_t n, const float* predictions, const float* targets,
                                float* loss, float* dpred);

  // ---- Embeddings ------------------------------------------------------------------------------
  // The flow of one sparse feature set: the batch's ids [batch, features] -> Unique -> the ps pulls
  // the num_unique rows -> GatherRows -> [batch, features, dim], which *is* the concatenation of the
  // features ([batch, features * dim], row-major) or SumPool's input. Backward: the concat's
  // gradient is the same buffer (or SumPoolGrad's output) -> SegmentSum -> [num_unique, dim] -> ps.

  // The distinct values of ids[0..n) in order of first appearance into `unique_ids`, and
  // index[i] = position of ids[i] in unique_ids. Returns the number of distinct ids. Needs room for
  // n entries in unique_ids. On an accelerator this synchronizes (the count is needed on the host).
  absl::StatusOr<int64_t> Unique(int64_t n, const int64_t* ids, int64_t* unique_ids,
                                 int32_t* index);
  // out[i] = table[index[i]] for i in [0, n): table is [num_rows, dim], out [n, dim].
  // Errors: kInvalidArgument if an index is outside [0, num_rows).
  absl::Status GatherRows(int64_t num_rows, int64_t dim, const float* table, const int32_t* index,
                          int64_t n, float* out);
  // out[b] = sum over f of in[b][f]: in is [batch, features, dim], out [batch, dim].
  absl::Status SumPool(int64_t batch, int64_t features, int64_t dim, const float* in, float* out);
  // din[b][f] = dout[b] for every f: SumPool's gradient, din [batch, features, dim].
  absl::Status SumPoolGrad(int64_t batch, int64_t features, int64_t dim, const float* dout,
                           float* din);
  // out[index[i]] += grads[i] summed over i in [0, n), after zeroing out: grads is [n, dim], out
  // [num_unique, dim]. The gradient of GatherRows (duplicate ids' gradients summed).
  // Errors: kInvalidArgument if an index is outside [0, num_unique).
  absl::Status SegmentSum(int64_t n, int64_t dim, const float* grads, const int32_t* index,
                          int64_t num_unique, float* out);
  // One column block of a matrix: `data` is [rows, cols] with row stride `ld` (>= cols).
  template <typename T>
  struct ColumnBlockOf {
    T* data = nullptr;
    int64_t cols = 0;
    int64_t ld = 0;
  };
  using ColumnBlock = ColumnBlockOf<float>;             // written (SplitColumns)
  using ConstColumnBlock = ColumnBlockOf<const float>;  // read (ConcatColumns)
  // out[r] = concat(blocks[0][r], blocks[1][r], ...): out is [rows, sum of cols] (contiguous).
  absl::Status ConcatColumns(int64_t rows, absl::Span<const ConstColumnBlock> blocks, float* out);
  // The reverse (ConcatColumns' gradient): blocks[j][r] = the matching columns of in[r].
  absl::Status SplitColumns(int64_t rows, const float* in, absl::Span<const ColumnBlock> blocks);

  // ---- Convolution and pooling (NHWC, float32; geometry as Window2D above) ---------------------

  // 2-D convolution (TF's Conv2D, without bias: add one with BiasAdd over [batch * out.height *
  // out.width, out_channels]). input [batch, height, width, channels], filter [window_height,
  // window_width, channels, out_channels] (TF's HWIO), output [batch, out.height, out.width,
  // out_channels] (`out` = ComputeWindow2DOutput(window)):
  //   output[n][oy][ox][o] = sum over ky, kx, c of
  //       input[n][oy * stride_height - pad_top + ky][ox * stride_width - pad_left + kx][c]
  //       * filter[ky][kx][c][o]                   (an input position outside the image reads 0)
  // Computed as im2col + Gemm: each output pixel's window is unfolded into a row of a column matrix
  // [pixels, window_height * window_width * channels] that multiplies the filter, read as a matrix
  // [window_height * window_width * channels, out_channels].
  //
  // Scratch: the device allocates the column matrix itself for the duration of the call (no
  // workspace argument), for a group of images at a time, so it stays under a bound (CPU 8 MiB,
  // GPU 64 MiB, or one image's if that is larger) however large the batch: out of memory is
  // kResourceExhausted. A 1x1 window with stride 1 needs none (the input is its own column matrix).
  absl::Status Conv2D(const Window2D& window, int64_t out_channels, const float* input,
                      const float* filter, float* output);
  // Conv2D's gradients from d_output (output's shape): d_input (input's shape) and d_filter
  // (filter's shape), both overwritten. Either may be null to skip it (a first layer needs no
  // d_input); `input` is read only for d_filter and `filter` only for d_input (the other may then
  // be null). d_filter = sum over the batch (not the mean: d_output carries any scaling). Scratch
  // as Conv2D's.
  absl::Status Conv2DGrad(const Window2D& window, int64_t out_channels, const float* input,
                          const float* filter, const float* d_output, float* d_input,
                          float* d_filter);
  // 2-D max pooling (TF's MaxPool): output [batch, out.height, out.width, channels] holds each
  // window's largest value per channel (the padding of kSame never wins: it is not part of the
  // image), and argmax (int32, output's shape) where it came from, as the element's index within
  // its image: (y * width + x) * channels + c (the first in the window's row-major order on ties).
  // Errors: kInvalidArgument also for an image of 2^31 elements or more (the argmax is int32).
  absl::Status MaxPool2D(const Window2D& window, const float* input, float* output,
                         int32_t* argmax);
  // MaxPool2D's gradient: d_input (input's shape, overwritten) = each d_output value added to the
  // image element its argmax names (summed where windows overlap). argmax is MaxPool2D's.
  // Errors: kInvalidArgument if an argmax is not inside its output's window (same channel).
  absl::Status MaxPool2DGrad(const Window2D& window, const float* d_output, const int32_t* argmax,
                             float* d_input);

  // ---- Vectors (matrix factorization) ----------------------------------------------------------

  // y += alpha * x over n values.
  absl::Status Axpy(int64_t n, float alpha, const float* x, float* y);
  // x *= alpha over n values.
  absl::Status Scale(int64_t n, float alpha, float* x);
  // out[r] = dot(a[r], b[r]) for a, b of [rows, dim].
  absl::Status RowDot(int64_t rows, int64_t dim, const float* a, const float* b, float* out);
  // RowDot's gradient: da[r] = dout[r] * b[r], db[r] = dout[r] * a[r] (either may be null).
  absl::Status RowDotGrad(int64_t rows, int64_t dim, const float* a, const float* b,
                          const float* dout, float* da, float* db);

  // ---- Replicas --------------------------------------------------------------------------------

  // Sums n floats across replicas: afterwards every buffers[i][j] holds the sum over i of the old
  // buffers[i][j]. Buffers must not overlap, and all are this device's memory (on a GPU, this
  // GPU's: kInvalidArgument otherwise). On the CPU a plain sum. Replicas on several GPUs are
  // summed with NCCL by ReplicaGroup (replicas.h).
  absl::Status AllReduceSum(absl::Span<float* const> buffers, int64_t n);

 protected:
  // Backends implement these; arguments are already checked as the public methods document (except
  // data-dependent checks, which the comments above name: index/label ranges are the backend's).
  virtual absl::StatusOr<void*> DoAllocate(int64_t bytes) = 0;
  virtual void DoFree(void* data) = 0;
  virtual absl::Status DoCopyToDevice(const void* host, void* device, int64_t bytes) = 0;
  virtual absl::Status DoCopyToHost(const void* device, void* host, int64_t bytes) = 0;
  virtual absl::Status DoCopyOnDevice(const void* from, void* to, int64_t bytes) = 0;
  virtual absl::Status DoZero(void* device, int64_t bytes) = 0;

  virtual absl::Status DoGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                              float alpha, const float* a, int64_t lda, const float* b,
                              int64_t ldb, float beta, float* c, int64_t ldc) = 0;
  virtual absl::Status DoBiasAdd(int64_t rows, int64_t cols, const float* bias, float* x) = 0;
  virtual absl::Status DoBiasGrad(int64_t rows, int64_t cols, const float* dy, float* dbias) = 0;
  virtual absl::Status DoRelu(int64_t n, const float* x, float* y) = 0;
  virtual absl::Status DoReluGrad(int64_t n, const float* y, const float* dy, float* dx) = 0;
  virtual absl::Status DoSigmoid(int64_t n, const float* x, float* y) = 0;
  virtual absl::Status DoSoftmaxCrossEntropy(int64_t rows, int64_t classes, const float* logits,
                                             const int32_t* labels, float* probs,
                                             float* loss) = 0;
  virtual absl::Status DoSoftmaxCrossEntropyGrad(int64_t rows, int64_t classes,
                                                 const float* probs, const int32_t* labels,
                                                 float* dlogits) = 0;
  virtual absl::Status DoSigmoidCrossEntropy(int64_t n, const float* logits, const float* labels,
                                             float* loss, float* dlogits) = 0;
  virtual absl::Status DoMeanSquaredError(int64_t n, const float* predictions,
                                          const float* targets, float* loss, float* dpred) = 0;
  virtual absl::StatusOr<int64_t> DoUnique(int64_t n, const int64_t* ids, int64_t* unique_ids,
                                           int32_t* index) = 0;
  virtual absl::Status DoGatherRows(int64_t num_rows, int64_t dim, const float* table,
                                    const int32_t* index, int64_t n, float* out) = 0;
  virtual absl::Status DoSumPool(int64_t batch, int64_t features, int64_t dim, const float* in,
                                 float* out) = 0;
  virtual absl::Status DoSumPoolGrad(int64_t batch, int64_t features, int64_t dim,
                                     const float* dout, float* din) = 0;
  virtual absl::Status DoSegmentSum(int64_t n, int64_t dim, const float* grads,
                                    const int32_t* index, int64_t num_unique, float* out) = 0;
  virtual absl::Status DoConcatColumns(int64_t rows, absl::Span<const ConstColumnBlock> blocks,
                                       float* out) = 0;
  virtual absl::Status DoSplitColumns(int64_t rows, const float* in,
                                      absl::Span<const ColumnBlock> blocks) = 0;
  // `out` is ComputeWindow2DOutput(window); every size is nonzero where the op has work (the public
  // methods return early on an empty output, zeroing d_filter / d_input as needed).
  virtual absl::Status DoConv2D(const Window2D& window, const Window2DOutput& out,
                                int64_t out_channels, const float* input, const float* filter,
                                float* output) = 0;
  virtual absl::Status DoConv2DGrad(const Window2D& window, const Window2DOutput& out,
                                    int64_t out_channels, const float* input, const float* filter,
                                    const float* d_output, float* d_input, float* d_filter) = 0;
  virtual absl::Status DoMaxPool2D(const Window2D& window, const Window2DOutput& out,
                                   const float* input, float* output, int32_t* argmax) = 0;
  virtual absl::Status DoMaxPool2DGrad(const Window2D& window, const Window2DOutput& out,
                                       const float* d_output, const int32_t* argmax,
                                       float* d_input) = 0;
  virtual absl::Status DoAxpy(int64_t n, float alpha, const float* x, float* y) = 0;
  virtual absl::Status DoScale(int64_t n, float alpha, float* x) = 0;
  virtual absl::Status DoRowDot(int64_t rows, int64_t dim, const float* a, const float* b,
                                float* out) = 0;
  virtual absl::Status DoRowDotGrad(int64_t rows, int64_t dim, const float* a, const float* b,
                                    const float* dout, float* da, float* db) = 0;
  virtual absl::Status DoAllReduceSum(absl::Span<float* const> buffers, int64_t n) = 0;

 private:
  friend class DeviceBuffer;
};

// Host inputs as a device sees them: on a host-memory device (the CPU) the host pointers
// themselves, else copies in the device's memory that live as long as this object (so the ops that
// read them must have finished, e.g. by a Synchronize(), before it is destroyed). Not thread-safe.
class HostInputs {
 public:
  explicit HostInputs(Device* device) : device_(device) {}

  // `count` T's at `host`, on the device. Errors: Allocate's and CopyToDevice's.
  template <typename T>
  absl::StatusOr<const T*> Put(const T* host, int64_t count) {
    if (device_->host_memory() || count == 0) return host;
    const int64_t bytes = count * static_cast<int64_t>(sizeof(T));
    absl::StatusOr<DeviceBuffer> buffer = device_->Allocate(bytes);
    if (!buffer.ok()) return buffer.status();
    if (absl::Status s = device_->CopyToDevice(host, buffer->data(), bytes); !s.ok()) return s;
    buffers_.push_back(*std::move(buffer));
    return buffers_.back().template as<const T>();
  }

 private:
  Device* const device_;
  std::vector<DeviceBuffer> buffers_;
};

// Options of the CPU device.
struct CpuDeviceOptions {
  // Threads that large ops (Gemm, and the memory-bound ops over big buffers) are split across; not
  // owned, must outlive the device. The calling thread works too, so a pool of N - 1 threads keeps
  // N cores busy. Safe to share with other work, even to call ops from the pool's own threads: a
  // caller never waits on a piece of work that no thread has started. Default null: every op runs
  // on the calling thread alone.
  ThreadPool* pool = nullptr;
  // An op is split only into pieces of at least this much work: floating-point operations for
  // Gemm, bytes touched for the memory-bound ops. Default 2 Mflop (~15 us of Gemm on one core) /
  // 1 MiB: below that, waking a thread costs more than it saves. Gemm makes up to 4 pieces per
  // thread, claimed as threads come free, so a preempted thread holds up only a small piece.
  int64_t min_flops_per_piece = int64_t{2} << 20;
  int64_t min_bytes_per_piece = int64_t{1} << 20;
};

// The CPU device: host memory, ops on the calling thread (plus options.pool). Never fails today; the
// StatusOr leaves room for option checks. Errors: kInvalidArgument for a negative minimum.
absl::StatusOr<std::unique_ptr<Device>> CreateCpuDevice(const CpuDeviceOptions& options = {});

// Which device CreateDevice makes.
struct DeviceOptions {
  enum class Kind {
    kAuto,  // a GPU if this build has CUDA and the machine a GPU, else the CPU
    kCpu,
    kCuda,
  };
  // Default kAuto.
  Kind kind = Kind::kAuto;
  // Which GPU, for kCuda / kAuto. Default 0.
  int gpu_ordinal = 0;
  // For the CPU device (also the fallback of kAuto).
  CpuDeviceOptions cpu;
};

// The device `options` ask for. Errors: kFailedPrecondition if kCuda is asked for and this build has
// no CUDA support or the machine no such GPU (the message contains "no CUDA" when there is no GPU
// at all); kInvalidArgument for a negative gpu_ordinal with kCuda; CreateCpuDevice's errors.
absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const DeviceOptions& options = {});

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DEVICE_DEVICE_H_
