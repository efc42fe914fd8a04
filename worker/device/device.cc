// Device's argument checks (the same for every backend) and CreateDevice's choice of backend.
#include "worker/device/device.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/device/cuda_device.h"

namespace pstrain {
namespace {

absl::Status NonNegative(const char* op, const char* what, int64_t value) {
  if (value >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " must be >= 0, got ", value));
}

// A pointer may be null only if nothing is read or written through it.
absl::Status Pointer(const char* op, const char* what, const void* p, int64_t elements) {
  if (p != nullptr || elements == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": ", what, " is null but covers ", elements, " elements"));
}

absl::Status LeadingDim(const char* op, const char* what, int64_t ld, int64_t min_ld) {
  if (ld >= min_ld && ld >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": ", what, " is ", ld, " but must be >= ", std::max<int64_t>(min_ld, 1)));
}

// rows * cols, or an error if it overflows int64.
absl::StatusOr<int64_t> Product(const char* op, int64_t a, int64_t b) {
  if (a != 0 && b > INT64_MAX / a) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": size ", a, " x ", b, " overflows"));
  }
  return a * b;
}


// Checks `window` and returns where its windows land (ComputeWindow2DOutput), errors naming `op`.
absl::StatusOr<Window2DOutput> CheckWindow(const char* op, const Window2D& w) {
  RETURN_IF_ERROR(NonNegative(op, "window.batch", w.batch));
  RETURN_IF_ERROR(NonNegative(op, "window.height", w.height));
  RETURN_IF_ERROR(NonNegative(op, "window.width", w.width));
  RETURN_IF_ERROR(NonNegative(op, "window.channels", w.channels));
  struct Positive {
    const char* what;
    int64_t value;
  };
  for (const Positive& p : {Positive{"window.window_height", w.window_height},
                            Positive{"window.window_width", w.window_width},
                            Positive{"window.stride_height", w.stride_height},
                            Positive{"window.stride_width", w.stride_width}}) {
    if (p.value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ", p.what, " must be >= 1, got ", p.value));
    }
  }
  ASSIGN_OR_RETURN(int64_t pixels, Product(op, w.height, w.width));
  ASSIGN_OR_RETURN(int64_t image, Product(op, pixels, w.channels));
  RETURN_IF_ERROR(Product(op, image, w.batch).status());
  // One spatial dimension: output size and padding before, as device.h's Padding describes.
  auto dimension = [&](const char* what, int64_t in, int64_t k, int64_t s, int64_t* out,
                       int64_t* pad_before) -> absl::Status {
    if (w.padding == Padding::kValid) {
      if (k > in) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": window.window_", what, " ", k, " exceeds the image's ", what, " ", in,
            " (kValid padding: every window lies inside the image)"));
      }
      *out = (in - k) / s + 1;
      *pad_before = 0;
      return absl::OkStatus();
    }
    *out = in / s + (in % s != 0 ? 1 : 0);
    // The last window starts r = in - (out - 1) * s (in [1, s]) before the image's end.
    const int64_t pad_total = *out == 0 ? 0 : std::max<int64_t>(k - (in - (*out - 1) * s), 0);
    *pad_before = pad_total / 2;
    return absl::OkStatus();
  };
  Window2DOutput out;
  RETURN_IF_ERROR(
      dimension("height", w.height, w.window_height, w.stride_height, &out.height, &out.pad_top));
  RETURN_IF_ERROR(
      dimension("width", w.width, w.window_width, w.stride_width, &out.width, &out.pad_left));
  return out;
}

// Element counts of a convolution's or pooling's tensors.
struct WindowSizes {
  int64_t input = 0;   // batch * height * width * channels
  int64_t output = 0;  // batch * out.height * out.width * out_channels
  int64_t filter = 0;  // window_height * window_width * channels * out_channels
};

absl::StatusOr<WindowSizes> Sizes(const char* op, const Window2D& w, const Window2DOutput& out,
                                  int64_t out_channels) {
  WindowSizes sizes;
  sizes.input = w.batch * w.height * w.width * w.channels;  // CheckWindow checked the product
  ASSIGN_OR_RETURN(int64_t out_pixels, Product(op, out.height, out.width));
  ASSIGN_OR_RETURN(int64_t out_image, Product(op, out_pixels, out_channels));
  ASSIGN_OR_RETURN(sizes.output, Product(op, out_image, w.batch));
  ASSIGN_OR_RETURN(int64_t window, Product(op, w.window_height, w.window_width));
  ASSIGN_OR_RETURN(int64_t rows, Product(op, window, w.channels));
  ASSIGN_OR_RETURN(sizes.filter, Product(op, rows, out_channels));
  return sizes;
}
}  // namespace

// ---- DeviceBuffer ------------------------------------------------------------------------------

DeviceBuffer::~DeviceBuffer() { Release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::Release() {
  if (owner_ != nullptr && data_ != nullptr) owner_->DoFree(data_);
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

// ---- Memory ------------------------------------------------------------------------------------

absl::StatusOr<DeviceBuffer> Device::Allocate(int64_t bytes) {
  RETURN_IF_ERROR(NonNegative("Allocate", "bytes", bytes));
  ASSIGN_OR_RETURN(void* data, DoAllocate(bytes));
  return DeviceBuffer(this, data, bytes);
}

absl::Status Device::CopyToDevice(const void* host, void* device, int64_t bytes) {
  RETURN_IF_ERROR(NonNegative("CopyToDevice", "bytes", bytes));
  RETURN_IF_ERROR(Pointer("CopyToDevice", "host", host, bytes));
  RETURN_IF_ERROR(Pointer("CopyToDevice", "device", device, bytes));
  if (bytes == 0) return absl::OkStatus();
  return DoCopyToDevice(host, device, bytes);
}

absl::Status Device::CopyToHost(const void* device, void* host, int64_t bytes) {
  RETURN_IF_ERROR(NonNegative("CopyToHost", "bytes", bytes));
  RETURN_IF_ERROR(Pointer("CopyToHost", "device", device, bytes));
  RETURN_IF_ERROR(Pointer("CopyToHost", "host", host, bytes));
  if (bytes == 0) return absl::OkStatus();
  return DoCopyToHost(device, host, bytes);
}

absl::Status Device::CopyOnDevice(const void* from, void* to, int64_t bytes) {
  RETURN_IF_ERROR(NonNegative("CopyOnDevice", "bytes", bytes));
  RETURN_IF_ERROR(Pointer("CopyOnDevice", "from", from, bytes));
  RETURN_IF_ERROR(Pointer("CopyOnDevice", "to", to, bytes));
  if (bytes == 0) return absl::OkStatus();
  return DoCopyOnDevice(from, to, bytes);
}

absl::Status Device::Zero(void* device, int64_t bytes) {
  RETURN_IF_ERROR(NonNegative("Zero", "bytes", bytes));
  RETURN_IF_ERROR(Pointer("Zero", "device", device, bytes));
  if (bytes == 0) return absl::OkStatus();
  return DoZero(device, bytes);
}

// ---- Dense layers ------------------------------------------------------------------------------

absl::Status Device::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                          float* c, int64_t ldc) {
  constexpr char kOp[] = "Gemm";
  RETURN_IF_ERROR(NonNegative(kOp, "m", m));
  RETURN_IF_ERROR(NonNegative(kOp, "n", n));
  RETURN_IF_ERROR(NonNegative(kOp, "k", k));
  RETURN_IF_ERROR(LeadingDim(kOp, trans_a ? "lda (A is k x m)" : "lda (A is m x k)", lda,
                             trans_a ? m : k));
  RETURN_IF_ERROR(LeadingDim(kOp, trans_b ? "ldb (B is n x k)" : "ldb (B is k x n)", ldb,
                             trans_b ? k : n));
  RETURN_IF_ERROR(LeadingDim(kOp, "ldc", ldc, n));
  ASSIGN_OR_RETURN(int64_t mk, Product(kOp, m, k));
  ASSIGN_OR_RETURN(int64_t kn, Product(kOp, k, n));
  ASSIGN_OR_RETURN(int64_t mn, Product(kOp, m, n));
  RETURN_IF_ERROR(Pointer(kOp, "a", a, mk));
  RETURN_IF_ERROR(Pointer(kOp, "b", b, kn));
  RETURN_IF_ERROR(Pointer(kOp, "c", c, mn));
  if (mn == 0) return absl::OkStatus();
  return DoGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

absl::Status Device::BiasAdd(int64_t rows, int64_t cols, const float* bias, float* x) {
  RETURN_IF_ERROR(NonNegative("BiasAdd", "rows", rows));
  RETURN_IF_ERROR(NonNegative("BiasAdd", "cols", cols));
  ASSIGN_OR_RETURN(int64_t size, Product("BiasAdd", rows, cols));
  RETURN_IF_ERROR(Pointer("BiasAdd", "bias", bias, size == 0 ? 0 : cols));
  RETURN_IF_ERROR(Pointer("BiasAdd", "x", x, size));
  if (size == 0) return absl::OkStatus();
  return DoBiasAdd(rows, cols, bias, x);
}

absl::Status Device::BiasGrad(int64_t rows, int64_t cols, const float* dy, float* dbias) {
  RETURN_IF_ERROR(NonNegative("BiasGrad", "rows", rows));
  RETURN_IF_ERROR(NonNegative("BiasGrad", "cols", cols));
  ASSIGN_OR_RETURN(int64_t size, Product("BiasGrad", rows, cols));
  RETURN_IF_ERROR(Pointer("BiasGrad", "dy", dy, size));
  RETURN_IF_ERROR(Pointer("BiasGrad", "dbias", dbias, cols));
  if (cols == 0) return absl::OkStatus();
  return DoBiasGrad(rows, cols, dy, dbias);
}

absl::Status Device::Relu(int64_t n, const float* x, float* y) {
  RETURN_IF_ERROR(NonNegative("Relu", "n", n));
  RETURN_IF_ERROR(Pointer("Relu", "x", x, n));
  RETURN_IF_ERROR(Pointer("Relu", "y", y, n));
  if (n == 0) return absl::OkStatus();
  return DoRelu(n, x, y);
}

absl::Status Device::ReluGrad(int64_t n, const float* y, const float* dy, float* dx) {
  RETURN_IF_ERROR(NonNegative("ReluGrad", "n", n));
  RETURN_IF_ERROR(Pointer("ReluGrad", "y", y, n));
  RETURN_IF_ERROR(Pointer("ReluGrad", "dy", dy, n));
  RETURN_IF_ERROR(Pointer("ReluGrad", "dx", dx, n));
  if (n == 0) return absl::OkStatus();
  return DoReluGrad(n, y, dy, dx);
}

absl::Status Device::Sigmoid(int64_t n, const float* x, float* y) {
  RETURN_IF_ERROR(NonNegative("Sigmoid", "n", n));
  RETURN_IF_ERROR(Pointer("Sigmoid", "x", x, n));
  RETURN_IF_ERROR(Pointer("Sigmoid", "y", y, n));
  if (n == 0) return absl::OkStatus();
  return DoSigmoid(n, x, y);
}

// ---- Losses ------------------------------------------------------------------------------------

absl::Status Device::SoftmaxCrossEntropy(int64_t rows, int64_t classes, const float* logits,
                                         const int32_t* labels, float* probs, float* loss) {
  constexpr char kOp[] = "SoftmaxCrossEntropy";
  RETURN_IF_ERROR(NonNegative(kOp, "rows", rows));
  if (classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": classes must be >= 1, got ", classes));
  }
  if (rows > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": rows ", rows, " exceeds int32"));
  }
  ASSIGN_OR_RETURN(int64_t size, Product(kOp, rows, classes));
  RETURN_IF_ERROR(Pointer(kOp, "logits", logits, size));
  RETURN_IF_ERROR(Pointer(kOp, "labels", labels, rows));
  RETURN_IF_ERROR(Pointer(kOp, "probs", probs, size));
  RETURN_IF_ERROR(Pointer(kOp, "loss", loss, 1));
  return DoSoftmaxCrossEntropy(rows, classes, logits, labels, probs, loss);
}

absl::Status Device::SoftmaxCrossEntropyGrad(int64_t rows, int64_t classes, const float* probs,
                                             const int32_t* labels, float* dlogits) {
  constexpr char kOp[] = "SoftmaxCrossEntropyGrad";
  RETURN_IF_ERROR(NonNegative(kOp, "rows", rows));
  if (classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": classes must be >= 1, got ", classes));
  }
  ASSIGN_OR_RETURN(int64_t size, Product(kOp, rows, classes));
  RETURN_IF_ERROR(Pointer(kOp, "probs", probs, size));
  RETURN_IF_ERROR(Pointer(kOp, "labels", labels, rows));
  RETURN_IF_ERROR(Pointer(kOp, "dlogits", dlogits, size));
  if (rows == 0) return absl::OkStatus();
  return DoSoftmaxCrossEntropyGrad(rows, classes, probs, labels, dlogits);
}

absl::Status Device::SigmoidCrossEntropy(int64_t n, const float* logits, const float* labels,
                                         float* loss, float* dlogits) {
  constexpr char kOp[] = "SigmoidCrossEntropy";
  RETURN_IF_ERROR(NonNegative(kOp, "n", n));
  RETURN_IF_ERROR(Pointer(kOp, "logits", logits, n));
  RETURN_IF_ERROR(Pointer(kOp, "labels", labels, n));
  RETURN_IF_ERROR(Pointer(kOp, "loss", loss, 1));
  return DoSigmoidCrossEntropy(n, logits, labels, loss, dlogits);
}

absl::Status Device::MeanSquaredError(int64_t n, const float* predictions, const float* targets,
                                      float* loss, float* dpred) {
  constexpr char kOp[] = "MeanSquaredError";
  RETURN_IF_ERROR(NonNegative(kOp, "n", n));
  RETURN_IF_ERROR(Pointer(kOp, "predictions", predictions, n));
  RETURN_IF_ERROR(Pointer(kOp, "targets", targets, n));
  RETURN_IF_ERROR(Pointer(kOp, "loss", loss, 1));
  return DoMeanSquaredError(n, predictions, targets, loss, dpred);
}

// ---- Embeddings --------------------------------------------------------------------------------

absl::StatusOr<int64_t> Device::Unique(int64_t n, const int64_t* ids, int64_t* unique_ids,
                                       int32_t* index) {
  RETURN_IF_ERROR(NonNegative("Unique", "n", n));
  if (n > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("Unique: n ", n, " exceeds int32 indices"));
  }
  RETURN_IF_ERROR(Pointer("Unique", "ids", ids, n));
  RETURN_IF_ERROR(Pointer("Unique", "unique_ids", unique_ids, n));
  RETURN_IF_ERROR(Pointer("Unique", "index", index, n));
  if (n == 0) return 0;
  return DoUnique(n, ids, unique_ids, index);
}

absl::Status Device::GatherRows(int64_t num_rows, int64_t dim, const float* table,
                                const int32_t* index, int64_t n, float* out) {
  constexpr char kOp[] = "GatherRows";
  RETURN_IF_ERROR(NonNegative(kOp, "num_rows", num_rows));
  RETURN_IF_ERROR(NonNegative(kOp, "dim", dim));
  RETURN_IF_ERROR(NonNegative(kOp, "n", n));
  ASSIGN_OR_RETURN(int64_t table_size, Product(kOp, num_rows, dim));
  ASSIGN_OR_RETURN(int64_t out_size, Product(kOp, n, dim));
  RETURN_IF_ERROR(Pointer(kOp, "table", table, table_size));
  RETURN_IF_ERROR(Pointer(kOp, "index", index, n));
  RETURN_IF_ERROR(Pointer(kOp, "out", out, out_size));
  if (n == 0) return absl::OkStatus();
  return DoGatherRows(num_rows, dim, table, index, n, out);
}

absl::Status Device::SumPool(int64_t batch, int64_t features, int64_t dim, const float* in,
                             float* out) {
  constexpr char kOp[] = "SumPool";
  RETURN_IF_ERROR(NonNegative(kOp, "batch", batch));
  RETURN_IF_ERROR(NonNegative(kOp, "features", features));
  RETURN_IF_ERROR(NonNegative(kOp, "dim", dim));
  ASSIGN_OR_RETURN(int64_t out_size, Product(kOp, batch, dim));
  ASSIGN_OR_RETURN(int64_t in_size, Product(kOp, out_size, features));
  RETURN_IF_ERROR(Pointer(kOp, "in", in, in_size));
  RETURN_IF_ERROR(Pointer(kOp, "out", out, out_size));
  if (out_size == 0) return absl::OkStatus();
  return DoSumPool(batch, features, dim, in, out);
}

absl::Status Device::SumPoolGrad(int64_t batch, int64_t features, int64_t dim, const float* dout,
                                 float* din) {
  constexpr char kOp[] = "SumPoolGrad";
  RETURN_IF_ERROR(NonNegative(kOp, "batch", batch));
  RETURN_IF_ERROR(NonNegative(kOp, "features", features));
  RETURN_IF_ERROR(NonNegative(kOp, "dim", dim));
  ASSIGN_OR_RETURN(int64_t out_size, Product(kOp, batch, dim));
  ASSIGN_OR_RETURN(int64_t in_size, Product(kOp, out_size, features));
  RETURN_IF_ERROR(Pointer(kOp, "dout", dout, in_size == 0 ? 0 : out_size));
  RETURN_IF_ERROR(Pointer(kOp, "din", din, in_size));
  if (in_size == 0) return absl::OkStatus();
  return DoSumPoolGrad(batch, features, dim, dout, din);
}

absl::Status Device::SegmentSum(int64_t n, int64_t dim, const float* grads, const int32_t* index,
                                int64_t num_unique, float* out) {
  constexpr char kOp[] = "SegmentSum";
  RETURN_IF_ERROR(NonNegative(kOp, "n", n));
  RETURN_IF_ERROR(NonNegative(kOp, "dim", dim));
  RETURN_IF_ERROR(NonNegative(kOp, "num_unique", num_unique));
  ASSIGN_OR_RETURN(int64_t in_size, Product(kOp, n, dim));
  ASSIGN_OR_RETURN(int64_t out_size, Product(kOp, num_unique, dim));
  RETURN_IF_ERROR(Pointer(kOp, "grads", grads, in_size));
  RETURN_IF_ERROR(Pointer(kOp, "index", index, n));
  RETURN_IF_ERROR(Pointer(kOp, "out", out, out_size));
  if (n > 0 && num_unique == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": ", n, " gradients but num_unique is 0"));
  }
  if (out_size == 0 && n == 0) return absl::OkStatus();
  return DoSegmentSum(n, dim, grads, index, num_unique, out);
}

namespace {

// Checks each block and returns the sum of their widths.
template <typename T>
absl::StatusOr<int64_t> CheckBlocks(const char* op, int64_t rows,
                                    absl::Span<const Device::ColumnBlockOf<T>> blocks) {
  RETURN_IF_ERROR(NonNegative(op, "rows", rows));
  int64_t total = 0;
  for (size_t j = 0; j < blocks.size(); ++j) {
    const Device::ColumnBlockOf<T>& block = blocks[j];
    const std::string what = absl::StrCat("blocks[", j, "]");
    RETURN_IF_ERROR(NonNegative(op, (what + ".cols").c_str(), block.cols));
    RETURN_IF_ERROR(LeadingDim(op, (what + ".ld").c_str(), block.ld, block.cols));
    ASSIGN_OR_RETURN(int64_t size, Product(op, rows, block.cols));
    RETURN_IF_ERROR(Pointer(op, (what + ".data").c_str(), block.data, size));
    if (block.cols > INT64_MAX - total) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": total width overflows"));
    }
    total += block.cols;
  }
  return total;
}

}  // namespace

absl::Status Device::ConcatColumns(int64_t rows, absl::Span<const ConstColumnBlock> blocks,
                                   float* out) {
  ASSIGN_OR_RETURN(int64_t width, CheckBlocks<const float>("ConcatColumns", rows, blocks));
  ASSIGN_OR_RETURN(int64_t size, Product("ConcatColumns", rows, width));
  RETURN_IF_ERROR(Pointer("ConcatColumns", "out", out, size));
  if (size == 0) return absl::OkStatus();
  return DoConcatColumns(rows, blocks, out);
}

absl::Status Device::SplitColumns(int64_t rows, const float* in,
                                  absl::Span<const ColumnBlock> blocks) {
  ASSIGN_OR_RETURN(int64_t width, CheckBlocks<float>("SplitColumns", rows, blocks));
  ASSIGN_OR_RETURN(int64_t size, Product("SplitColumns", rows, width));
  RETURN_IF_ERROR(Pointer("SplitColumns", "in", in, size));
  if (size == 0) return absl::OkStatus();
  return DoSplitColumns(rows, in, blocks);
}

// ---- Convolution and pooling -------------------------------------------------------------------

absl::StatusOr<Window2DOutput> ComputeWindow2DOutput(const Window2D& window) {
  return CheckWindow("ComputeWindow2DOutput", window);
}

absl::Status Device::Conv2D(const Window2D& window, int64_t out_channels, const float* input,
                            const float* filter, float* output) {
  constexpr char kOp[] = "Conv2D";
  ASSIGN_OR_RETURN(Window2DOutput out, CheckWindow(kOp, window));
  RETURN_IF_ERROR(NonNegative(kOp, "out_channels", out_channels));
  ASSIGN_OR_RETURN(WindowSizes sizes, Sizes(kOp, window, out, out_channels));
  const bool work = sizes.output > 0;
  RETURN_IF_ERROR(Pointer(kOp, "input", input, work ? sizes.input : 0));
  RETURN_IF_ERROR(Pointer(kOp, "filter", filter, work ? sizes.filter : 0));
  RETURN_IF_ERROR(Pointer(kOp, "output", output, sizes.output));
  if (!work) return absl::OkStatus();
  // No input channels: every sum is empty.
  if (window.channels == 0) return DoZero(output, sizes.output * sizeof(float));
  return DoConv2D(window, out, out_channels, input, filter, output);
}

absl::Status Device::Conv2DGrad(const Window2D& window, int64_t out_channels, const float* input,
                                const float* filter, const float* d_output, float* d_input,
                                float* d_filter) {
  constexpr char kOp[] = "Conv2DGrad";
  ASSIGN_OR_RETURN(Window2DOutput out, CheckWindow(kOp, window));
  RETURN_IF_ERROR(NonNegative(kOp, "out_channels", out_channels));
  ASSIGN_OR_RETURN(WindowSizes sizes, Sizes(kOp, window, out, out_channels));
  const bool want_input = d_input != nullptr && sizes.input > 0;
  const bool want_filter = d_filter != nullptr && sizes.filter > 0;
  const bool work = (want_input || want_filter) && sizes.output > 0;
  RETURN_IF_ERROR(Pointer(kOp, "input", input, work && want_filter ? sizes.input : 0));
  RETURN_IF_ERROR(Pointer(kOp, "filter", filter, work && want_input ? sizes.filter : 0));
  RETURN_IF_ERROR(Pointer(kOp, "d_output", d_output, work ? sizes.output : 0));
  if (!work) {
    // An empty output (no images, or no output channels): both gradients are zero.
    if (want_input) RETURN_IF_ERROR(DoZero(d_input, sizes.input * sizeof(float)));
    if (want_filter) RETURN_IF_ERROR(DoZero(d_filter, sizes.filter * sizeof(float)));
    return absl::OkStatus();
  }
  return DoConv2DGrad(window, out, out_channels, input, filter, d_output,
                      want_input ? d_input : nullptr, want_filter ? d_filter : nullptr);
}

namespace {

// MaxPool2D's argmax is an int32 index within one image.
absl::Status ImageFitsInt32(const char* op, const Window2D& w) {
  const int64_t image = w.height * w.width * w.channels;  // CheckWindow checked the product
  if (image <= INT32_MAX) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": an image of ", w.height, " x ", w.width, " x ", w.channels,
      " elements exceeds the int32 argmax"));
}

}  // namespace

absl::Status Device::MaxPool2D(const Window2D& window, const float* input, float* output,
                               int32_t* argmax) {
  constexpr char kOp[] = "MaxPool2D";
  ASSIGN_OR_RETURN(Window2DOutput out, CheckWindow(kOp, window));
  RETURN_IF_ERROR(ImageFitsInt32(kOp, window));
  ASSIGN_OR_RETURN(WindowSizes sizes, Sizes(kOp, window, out, window.channels));
  RETURN_IF_ERROR(Pointer(kOp, "input", input, sizes.output > 0 ? sizes.input : 0));
  RETURN_IF_ERROR(Pointer(kOp, "output", output, sizes.output));
  RETURN_IF_ERROR(Pointer(kOp, "argmax", argmax, sizes.output));
  if (sizes.output == 0) return absl::OkStatus();
  return DoMaxPool2D(window, out, input, output, argmax);
}

absl::Status Device::MaxPool2DGrad(const Window2D& window, const float* d_output,
                                   const int32_t* argmax, float* d_input) {
  constexpr char kOp[] = "MaxPool2DGrad";
  ASSIGN_OR_RETURN(Window2DOutput out, CheckWindow(kOp, window));
  RETURN_IF_ERROR(ImageFitsInt32(kOp, window));
  ASSIGN_OR_RETURN(WindowSizes sizes, Sizes(kOp, window, out, window.channels));
  const bool work = sizes.input > 0 && sizes.output > 0;
  RETURN_IF_ERROR(Pointer(kOp, "d_output", d_output, work ? sizes.output : 0));
  RETURN_IF_ERROR(Pointer(kOp, "argmax", argmax, work ? sizes.output : 0));
  RETURN_IF_ERROR(Pointer(kOp, "d_input", d_input, sizes.input));
  if (sizes.input == 0) return absl::OkStatus();
  if (!work) return DoZero(d_input, sizes.input * sizeof(float));  // no window covers anything
  return DoMaxPool2DGrad(window, out, d_output, argmax, d_input);
}

// ---- Vectors -----------------------------------------------------------------------------------

absl::Status Device::Axpy(int64_t n, float alpha, const float* x, float* y) {
  RETURN_IF_ERROR(NonNegative("Axpy", "n", n));
  RETURN_IF_ERROR(Pointer("Axpy", "x", x, n));
  RETURN_IF_ERROR(Pointer("Axpy", "y", y, n));
  if (n == 0) return absl::OkStatus();
  return DoAxpy(n, alpha, x, y);
}

absl::Status Device::Scale(int64_t n, float alpha, float* x) {
  RETURN_IF_ERROR(NonNegative("Scale", "n", n));
  RETURN_IF_ERROR(Pointer("Scale", "x", x, n));
  if (n == 0) return absl::OkStatus();
  return DoScale(n, alpha, x);
}

absl::Status Device::RowDot(int64_t rows, int64_t dim, const float* a, const float* b,
                            float* out) {
  RETURN_IF_ERROR(NonNegative("RowDot", "rows", rows));
  RETURN_IF_ERROR(NonNegative("RowDot", "dim", dim));
  ASSIGN_OR_RETURN(int64_t size, Product("RowDot", rows, dim));
  RETURN_IF_ERROR(Pointer("RowDot", "a", a, size));
  RETURN_IF_ERROR(Pointer("RowDot", "b", b, size));
  RETURN_IF_ERROR(Pointer("RowDot", "out", out, rows));
  if (rows == 0) return absl::OkStatus();
  return DoRowDot(rows, dim, a, b, out);
}

absl::Status Device::RowDotGrad(int64_t rows, int64_t dim, const float* a, const float* b,
                                const float* dout, float* da, float* db) {
  RETURN_IF_ERROR(NonNegative("RowDotGrad", "rows", rows));
  RETURN_IF_ERROR(NonNegative("RowDotGrad", "dim", dim));
  ASSIGN_OR_RETURN(int64_t size, Product("RowDotGrad", rows, dim));
  RETURN_IF_ERROR(Pointer("RowDotGrad", "a", a, db == nullptr ? 0 : size));
  RETURN_IF_ERROR(Pointer("RowDotGrad", "b", b, da == nullptr ? 0 : size));
  RETURN_IF_ERROR(Pointer("RowDotGrad", "dout", dout, rows));
  if (size == 0 || (da == nullptr && db == nullptr)) return absl::OkStatus();
  return DoRowDotGrad(rows, dim, a, b, dout, da, db);
}

// ---- Replicas ----------------------------------------------------------------------------------

absl::Status Device::AllReduceSum(absl::Span<float* const> buffers, int64_t n) {
  RETURN_IF_ERROR(NonNegative("AllReduceSum", "n", n));
  if (buffers.empty()) {
    return absl::InvalidArgumentError("AllReduceSum: no buffers (need one per replica)");
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    RETURN_IF_ERROR(Pointer("AllReduceSum", absl::StrCat("buffers[", i, "]").c_str(), buffers[i], n));
    for (size_t j = 0; j < i && n > 0; ++j) {
      if (buffers[i] < buffers[j] + n && buffers[j] < buffers[i] + n) {
        return absl::InvalidArgumentError(
            absl::StrCat("AllReduceSum: buffers[", j, "] and buffers[", i, "] overlap"));
      }
    }
  }
  if (n == 0 || buffers.size() == 1) return absl::OkStatus();
  return DoAllReduceSum(buffers, n);
}

// ---- Factories ---------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const DeviceOptions& options) {
  switch (options.kind) {
    case DeviceOptions::Kind::kAuto:
      // The GPU if this build has CUDA and the machine that GPU (cuda_device_stub.cc, the
      // backend of a build without CUDA, counts none), else the CPU.
      if (options.gpu_ordinal >= 0 &&
          cuda_backend::CudaDeviceCount() > options.gpu_ordinal) {
        return cuda_backend::CreateCudaDevice(options.gpu_ordinal);
      }
      return CreateCpuDevice(options.cpu);
    case DeviceOptions::Kind::kCpu:
      return CreateCpuDevice(options.cpu);
    case DeviceOptions::Kind::kCuda:
      return cuda_backend::CreateCudaDevice(options.gpu_ordinal);
  }
  return absl::InvalidArgumentError("CreateDevice: unknown device kind");
}

}  // namespace pstrain
