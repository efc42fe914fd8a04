// Every op of a backend against the CPU reference (a CPU device without a pool), through the
// device-memory API (Allocate, CopyToDevice, the op, CopyToHost), as a model uses a GPU:
//
//   Backends/BackendTest.*/cpu   the CPU device with a pool splitting every op: always runs, and
//                                checks the harness and the split paths against the reference;
//   Backends/BackendTest.*/cuda  the CUDA device (cuda_kernels.cu, cuBLAS): skips, saying why,
//                                on a machine without a GPU or a build without CUDA.
//
// Exact equality where the backend promises it (copies, Unique, SegmentSum, SumPool, AllReduceSum);
// a relative tolerance where the order of a float sum, a fused multiply-add or the exp/log
// implementation may differ.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/device/cuda_device.h"
#include "worker/device/device.h"
#include "worker/device/device_test_util.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

enum class Backend { kCpu, kCuda };

std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::kCpu ? "cpu" : "cuda";
}

class BackendTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Device>> ref = CreateCpuDevice();
    ASSERT_TRUE(ref.ok()) << ref.status();
    ref_ = *std::move(ref);
    if (GetParam() == Backend::kCpu) {
      pool_ = std::make_unique<ThreadPool>(3);
      CpuDeviceOptions options;
      options.pool = pool_.get();
      options.min_flops_per_piece = 0;
      options.min_bytes_per_piece = 0;
      absl::StatusOr<std::unique_ptr<Device>> dut = CreateCpuDevice(options);
      ASSERT_TRUE(dut.ok()) << dut.status();
      dut_ = *std::move(dut);
      return;
    }
    std::string why;
    if (cuda_backend::CudaDeviceCount(&why) == 0) {
      GTEST_SKIP() << "CUDA kernel checks skipped: " << why
                   << ". They need a CUDA build and a GPU (the cpu variant of this test ran the same checks).";
    }
    DeviceOptions options;
    options.kind = DeviceOptions::Kind::kCuda;
    absl::StatusOr<std::unique_ptr<Device>> dut = CreateDevice(options);
    ASSERT_TRUE(dut.ok()) << dut.status();
    dut_ = *std::move(dut);
    EXPECT_EQ(dut_->name(), "cuda:0");
    EXPECT_FALSE(dut_->host_memory());
  }

  void TearDown() override {
    if (dut_ != nullptr) {
      EXPECT_TRUE(dut_->Synchronize().ok());
    }
    buffers_.clear();  // before the device that owns them
  }

  // A device copy of `v` (owned by the fixture).
  template <typename T>
  T* Put(const std::vector<T>& v) {
    T* p = Alloc<T>(v.size());
    if (p != nullptr) {
      const absl::Status s = dut_->CopyToDevice(v.data(), p, v.size() * sizeof(T));
      EXPECT_TRUE(s.ok()) << s;
    }
    return p;
  }
  template <typename T>
  T* Alloc(size_t n) {
    absl::StatusOr<DeviceBuffer> buffer = dut_->Allocate(n * sizeof(T));
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!buffer.ok()) return nullptr;
    buffers_.push_back(*std::move(buffer));
    return buffers_.back().as<T>();
  }
  template <typename T>
  std::vector<T> Get(const T* p, size_t n) {
    std::vector<T> v(n);
    const absl::Status s = dut_->CopyToHost(p, v.data(), n * sizeof(T));
    EXPECT_TRUE(s.ok()) << s;
    return v;
  }
  // The op's own status, or (ops checked on the device) the next Synchronize's.
  absl::Status OpThenSync(absl::Status op) {
    if (!op.ok()) return op;
    return dut_->Synchronize();
  }

  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Device> ref_;
  std::unique_ptr<Device> dut_;
  std::vector<DeviceBuffer> buffers_;
  std::mt19937 rng_{4321};
};

INSTANTIATE_TEST_SUITE_P(Backends, BackendTest, ::testing::Values(Backend::kCpu, Backend::kCuda),
                         BackendName);

// ---- Memory ------------------------------------------------------------------------------------

TEST_P(BackendTest, CopiesAndZero_RoundTrip) {
  const std::vector<float> host = RandomFloats(1000, &rng_);
  float* a = Put(host);
  float* b = Alloc<float>(host.size());
  ASSERT_TRUE(dut_->CopyOnDevice(a, b, host.size() * 4).ok());
  EXPECT_EQ(Get(b, host.size()), host);
  ASSERT_TRUE(dut_->Zero(b, 400).ok());
  const std::vector<float> zeroed = Get(b, host.size());
  EXPECT_EQ(zeroed[0], 0.0f);
  EXPECT_EQ(zeroed[99], 0.0f);
  EXPECT_EQ(zeroed[100], host[100]);
}

// ---- Dense -------------------------------------------------------------------------------------

TEST_P(BackendTest, Gemm_AllTransposesAndShapes_MatchReference) {
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape& shape : std::vector<Shape>{
           {1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {256, 128, 784}, {256, 10, 128}, {64, 300, 1}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const int64_t m = shape.m, n = shape.n, k = shape.k;
      const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
      const std::vector<float> a = RandomFloats((ta ? k : m) * lda, &rng_);
      const std::vector<float> b = RandomFloats((tb ? n : k) * ldb, &rng_);
      const std::vector<float> c0 = RandomFloats(m * ldc, &rng_);
      for (float beta : {0.0f, 0.5f}) {
        std::vector<float> expected = c0;
        ASSERT_TRUE(ref_->Gemm(ta, tb, m, n, k, 1.5f, a.data(), lda, b.data(), ldb, beta,
                               expected.data(), ldc)
                        .ok());
        float* dc = Put(c0);
        ASSERT_TRUE(
            dut_->Gemm(ta, tb, m, n, k, 1.5f, Put(a), lda, Put(b), ldb, beta, dc, ldc).ok());
        ExpectNear(Get(dc, c0.size()), expected, 1e-4,
                   "gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                       std::to_string(k) + " t" + std::to_string(t));
      }
    }
  }
}

TEST_P(BackendTest, BiasReluSigmoid_MatchReference) {
  const int64_t rows = 300, cols = 37, size = rows * cols;
  const std::vector<float> x = RandomFloats(size, &rng_, -30, 30);
  const std::vector<float> bias = RandomFloats(cols, &rng_);
  const std::vector<float> dy = RandomFloats(size, &rng_);

  std::vector<float> biased = x;
  ASSERT_TRUE(ref_->BiasAdd(rows, cols, bias.data(), biased.data()).ok());
  float* d_x = Put(x);
  ASSERT_TRUE(dut_->BiasAdd(rows, cols, Put(bias), d_x).ok());
  EXPECT_EQ(Get(d_x, size), biased);

  std::vector<float> dbias(cols);
  ASSERT_TRUE(ref_->BiasGrad(rows, cols, dy.data(), dbias.data()).ok());
  float* d_dbias = Alloc<float>(cols);
  float* d_dy = Put(dy);
  ASSERT_TRUE(dut_->BiasGrad(rows, cols, d_dy, d_dbias).ok());
  ExpectNear(Get(d_dbias, cols), dbias, 1e-5, "BiasGrad");

  std::vector<float> relu(size), relu_grad(size), sigmoid(size);
  ASSERT_TRUE(ref_->Relu(size, x.data(), relu.data()).ok());
  ASSERT_TRUE(ref_->ReluGrad(size, relu.data(), dy.data(), relu_grad.data()).ok());
  ASSERT_TRUE(ref_->Sigmoid(size, x.data(), sigmoid.data()).ok());
  float* d_in = Put(x);
  float* d_relu = Alloc<float>(size);
  ASSERT_TRUE(dut_->Relu(size, d_in, d_relu).ok());
  EXPECT_EQ(Get(d_relu, size), relu);
  ASSERT_TRUE(dut_->ReluGrad(size, d_relu, d_dy, d_dy).ok());  // in place
  EXPECT_EQ(Get(d_dy, size), relu_grad);
  ASSERT_TRUE(dut_->Sigmoid(size, d_in, d_in).ok());  // in place
  ExpectNear(Get(d_in, size), sigmoid, 1e-6, "Sigmoid");
}

// ---- Losses ------------------------------------------------------------------------------------

TEST_P(BackendTest, SoftmaxCrossEntropyAndGrad_MatchReference) {
  for (int64_t classes : {1, 10, 100}) {
    const int64_t rows = 513;
    const std::vector<float> logits = RandomFloats(rows * classes, &rng_, -20, 20);
    const std::vector<int32_t> labels = RandomIndex(rows, classes, &rng_);
    std::vector<float> probs(rows * classes), dlogits(rows * classes);
    float loss = 0;
    ASSERT_TRUE(ref_->SoftmaxCrossEntropy(rows, classes, logits.data(), labels.data(),
                                          probs.data(), &loss)
                    .ok());
    ASSERT_TRUE(ref_->SoftmaxCrossEntropyGrad(rows, classes, probs.data(), labels.data(),
                                              dlogits.data())
                    .ok());
    float* d_logits = Put(logits);
    int32_t* d_labels = Put(labels);
    float* d_loss = Alloc<float>(1);
    // probs = logits, dlogits = probs: both in place.
    ASSERT_TRUE(
        dut_->SoftmaxCrossEntropy(rows, classes, d_logits, d_labels, d_logits, d_loss).ok());
    ExpectNear(Get(d_logits, rows * classes), probs, 1e-5, "probs");
    ExpectNear(Get(d_loss, 1), {loss}, 1e-5, "loss");
    ASSERT_TRUE(
        dut_->SoftmaxCrossEntropyGrad(rows, classes, d_logits, d_labels, d_logits).ok());
    ExpectNear(Get(d_logits, rows * classes), dlogits, 1e-6, "dlogits");
  }
}

TEST_P(BackendTest, SigmoidCrossEntropyAndMse_MatchReference) {
  const int64_t n = 70001;
  const std::vector<float> logits = RandomFloats(n, &rng_, -50, 50);
  const std::vector<float> labels = RandomFloats(n, &rng_, 0, 1);
  std::vector<float> dlogits(n), dpred(n);
  float sce = 0, mse = 0;
  ASSERT_TRUE(ref_->SigmoidCrossEntropy(n, logits.data(), labels.data(), &sce, dlogits.data())
                  .ok());
  ASSERT_TRUE(ref_->MeanSquaredError(n, logits.data(), labels.data(), &mse, dpred.data()).ok());
  float* d_logits = Put(logits);
  float* d_labels = Put(labels);
  float* d_loss = Alloc<float>(2);
  float* d_grad = Alloc<float>(n);
  ASSERT_TRUE(dut_->SigmoidCrossEntropy(n, d_logits, d_labels, d_loss, d_grad).ok());
  ExpectNear(Get(d_grad, n), dlogits, 1e-6, "SigmoidCrossEntropy grad");
  ASSERT_TRUE(dut_->MeanSquaredError(n, d_logits, d_labels, d_loss + 1, d_grad).ok());
  ExpectNear(Get(d_grad, n), dpred, 1e-6, "MeanSquaredError grad");
  ExpectNear(Get(d_loss, 2), {sce, mse}, 1e-5, "losses");
  // Forward only, and empty batches: loss 0.
  ASSERT_TRUE(dut_->SigmoidCrossEntropy(n, d_logits, d_labels, d_loss, nullptr).ok());
  ASSERT_TRUE(dut_->MeanSquaredError(0, nullptr, nullptr, d_loss + 1, nullptr).ok());
  ExpectNear(Get(d_loss, 2), {sce, 0.0f}, 1e-5, "forward-only and empty");
  ASSERT_TRUE(dut_->SoftmaxCrossEntropy(0, 10, nullptr, nullptr, nullptr, d_loss).ok());
  EXPECT_EQ(Get(d_loss, 1)[0], 0.0f);
}

TEST_P(BackendTest, SoftmaxCrossEntropy_LabelOutOfRange_InvalidArgument) {
  const std::vector<float> logits = RandomFloats(4 * 3, &rng_);
  float* d_logits = Put(logits);
  int32_t* d_labels = Put(std::vector<int32_t>{0, 2, 3, 1});
  float* d_loss = Alloc<float>(1);
  const absl::Status s =
      OpThenSync(dut_->SoftmaxCrossEntropy(4, 3, d_logits, d_labels, d_logits, d_loss));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("labels[2] = 3 is outside [0, 3)"));
  EXPECT_TRUE(dut_->Synchronize().ok());  // reported once
}

// ---- Embeddings --------------------------------------------------------------------------------

TEST_P(BackendTest, Unique_DuplicatesNegativeAndHugeIds_MatchReferenceExactly) {
  for (int64_t n : {1, 2, 1000, 100000}) {
    std::uniform_int_distribution<int64_t> small(0, std::max<int64_t>(1, n / 4));
    std::vector<int64_t> ids(n);
    for (int64_t i = 0; i < n; ++i) {
      ids[i] = small(rng_);
      if (i % 7 == 3) ids[i] = -ids[i] - 1;
      if (i % 11 == 5) ids[i] += int64_t{1} << 40;
    }
    std::vector<int64_t> unique(n);
    std::vector<int32_t> index(n);
    absl::StatusOr<int64_t> count = ref_->Unique(n, ids.data(), unique.data(), index.data());
    ASSERT_TRUE(count.ok());
    unique.resize(*count);

    int64_t* d_unique = Alloc<int64_t>(n);
    int32_t* d_index = Alloc<int32_t>(n);
    absl::StatusOr<int64_t> d_count = dut_->Unique(n, Put(ids), d_unique, d_index);
    ASSERT_TRUE(d_count.ok()) << d_count.status();
    ASSERT_EQ(*d_count, *count) << "n " << n;
    EXPECT_EQ(Get(d_unique, *count), unique) << "n " << n;
    EXPECT_EQ(Get(d_index, n), index) << "n " << n;
  }
}

TEST_P(BackendTest, GatherRows_ScalarAndVectorRows_MatchReferenceExactly) {
  for (int64_t dim : {1, 3, 4, 16, 64, 130}) {
    const int64_t num_rows = 500, n = 3000;
    const std::vector<float> table = RandomFloats(num_rows * dim, &rng_);
    const std::vector<int32_t> index = RandomIndex(n, num_rows, &rng_);
    std::vector<float> expected(n * dim);
    ASSERT_TRUE(
        ref_->GatherRows(num_rows, dim, table.data(), index.data(), n, expected.data()).ok());
    float* d_out = Alloc<float>(n * dim);
    ASSERT_TRUE(dut_->GatherRows(num_rows, dim, Put(table), Put(index), n, d_out).ok());
    EXPECT_EQ(Get(d_out, n * dim), expected) << "dim " << dim;
  }
}

TEST_P(BackendTest, GatherRows_IndexOutOfRange_InvalidArgument) {
  float* d_table = Put(RandomFloats(4 * 8, &rng_));
  int32_t* d_index = Put(std::vector<int32_t>{0, 3, -1, 2});
  float* d_out = Alloc<float>(4 * 8);
  const absl::Status s = OpThenSync(dut_->GatherRows(4, 8, d_table, d_index, 4, d_out));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("GatherRows: index[2] = -1 is outside [0, 4)"));
  EXPECT_TRUE(dut_->Synchronize().ok());  // reported once; the device goes on working
}

TEST_P(BackendTest, SumPoolAndGrad_MatchReferenceExactly) {
  const int64_t batch = 257, features = 5, dim = 24;
  const std::vector<float> in = RandomFloats(batch * features * dim, &rng_);
  const std::vector<float> dout = RandomFloats(batch * dim, &rng_);
  std::vector<float> out(batch * dim), din(batch * features * dim);
  ASSERT_TRUE(ref_->SumPool(batch, features, dim, in.data(), out.data()).ok());
  ASSERT_TRUE(ref_->SumPoolGrad(batch, features, dim, dout.data(), din.data()).ok());
  float* d_out = Alloc<float>(out.size());
  float* d_din = Alloc<float>(din.size());
  ASSERT_TRUE(dut_->SumPool(batch, features, dim, Put(in), d_out).ok());
  ASSERT_TRUE(dut_->SumPoolGrad(batch, features, dim, Put(dout), d_din).ok());
  EXPECT_EQ(Get(d_out, out.size()), out);
  EXPECT_EQ(Get(d_din, din.size()), din);
}

TEST_P(BackendTest, SegmentSum_DuplicatesAndUnusedRows_MatchReferenceExactly) {
  struct Case {
    int64_t n, dim, num_unique;
  };
  for (const Case& c : std::vector<Case>{
           {1, 1, 1}, {5000, 16, 37}, {20000, 3, 20000}, {10000, 64, 1}, {0, 8, 5}}) {
    const std::vector<float> grads = RandomFloats(c.n * c.dim, &rng_);
    // Only even rows are used: the odd ones must come out zero.
    std::vector<int32_t> index = RandomIndex(c.n, c.num_unique, &rng_);
    if (c.num_unique > 1) {
      for (int32_t& u : index) u -= u % 2;
    }
    std::vector<float> expected(c.num_unique * c.dim);
    ASSERT_TRUE(ref_->SegmentSum(c.n, c.dim, grads.data(), index.data(), c.num_unique,
                                 expected.data())
                    .ok());
    float* d_out = Put(RandomFloats(c.num_unique * c.dim, &rng_));  // overwritten
    ASSERT_TRUE(
        dut_->SegmentSum(c.n, c.dim, Put(grads), Put(index), c.num_unique, d_out).ok());
    EXPECT_EQ(Get(d_out, expected.size()), expected) << "n " << c.n << " dim " << c.dim;
  }
}

TEST_P(BackendTest, SegmentSum_IndexOutOfRange_InvalidArgument) {
  float* d_grads = Put(RandomFloats(3 * 4, &rng_));
  int32_t* d_index = Put(std::vector<int32_t>{1, 5, 0});
  float* d_out = Alloc<float>(2 * 4);
  const absl::Status s = OpThenSync(dut_->SegmentSum(3, 4, d_grads, d_index, 2, d_out));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("SegmentSum: index[1] = 5 is outside [0, 2)"));
}

TEST_P(BackendTest, UniqueGatherSegmentSum_EmbeddingStep_MatchesReference) {
  // The sparse feature flow: ids -> Unique -> gather the pulled rows -> (model) -> SegmentSum.
  const int64_t batch = 512, features = 6, dim = 32, n = batch * features;
  std::vector<int64_t> ids(n);
  std::uniform_int_distribution<int64_t> zipfish(0, 300);
  for (int64_t& id : ids) id = zipfish(rng_) * zipfish(rng_) / 50;  // skewed, many duplicates
  std::vector<int64_t> unique(n);
  std::vector<int32_t> index(n);
  absl::StatusOr<int64_t> count = ref_->Unique(n, ids.data(), unique.data(), index.data());
  ASSERT_TRUE(count.ok());
  const std::vector<float> pulled = RandomFloats(*count * dim, &rng_);
  std::vector<float> gathered(n * dim), grads(*count * dim);
  ASSERT_TRUE(ref_->GatherRows(*count, dim, pulled.data(), index.data(), n, gathered.data()).ok());
  ASSERT_TRUE(ref_->SegmentSum(n, dim, gathered.data(), index.data(), *count, grads.data()).ok());

  int64_t* d_unique = Alloc<int64_t>(n);
  int32_t* d_index = Alloc<int32_t>(n);
  float* d_gathered = Alloc<float>(n * dim);
  float* d_grads = Alloc<float>(*count * dim);
  absl::StatusOr<int64_t> d_count = dut_->Unique(n, Put(ids), d_unique, d_index);
  ASSERT_TRUE(d_count.ok());
  ASSERT_EQ(*d_count, *count);
  ASSERT_TRUE(dut_->GatherRows(*count, dim, Put(pulled), d_index, n, d_gathered).ok());
  ASSERT_TRUE(dut_->SegmentSum(n, dim, d_gathered, d_index, *count, d_grads).ok());
  EXPECT_EQ(Get(d_grads, grads.size()), grads);
}

TEST_P(BackendTest, ConcatAndSplitColumns_MatchReferenceExactly) {
  const int64_t rows = 100;
  const std::vector<float> a = RandomFloats(rows * 5, &rng_), b = RandomFloats(rows * 12, &rng_);
  std::vector<float> expected(rows * 7);
  const std::vector<Device::ConstColumnBlock> ref_blocks = {{a.data(), 3, 5}, {b.data(), 4, 12}};
  ASSERT_TRUE(ref_->ConcatColumns(rows, ref_blocks, expected.data()).ok());
  float* d_a = Put(a);
  float* d_b = Put(b);
  float* d_out = Alloc<float>(rows * 7);
  const std::vector<Device::ConstColumnBlock> blocks = {{d_a, 3, 5}, {d_b, 4, 12}};
  ASSERT_TRUE(dut_->ConcatColumns(rows, blocks, d_out).ok());
  EXPECT_EQ(Get(d_out, rows * 7), expected);

  float* d_a2 = Alloc<float>(rows * 3);
  float* d_b2 = Alloc<float>(rows * 4);
  const std::vector<Device::ColumnBlock> split = {{d_a2, 3, 3}, {d_b2, 4, 4}};
  ASSERT_TRUE(dut_->SplitColumns(rows, d_out, split).ok());
  const std::vector<float> a2 = Get(d_a2, rows * 3), b2 = Get(d_b2, rows * 4);
  for (int64_t r = 0; r < rows; ++r) {
    for (int j = 0; j < 3; ++j) ASSERT_EQ(a2[r * 3 + j], a[r * 5 + j]);
    for (int j = 0; j < 4; ++j) ASSERT_EQ(b2[r * 4 + j], b[r * 12 + j]);
  }
}

// ---- Convolution and pooling -------------------------------------------------------------------

Window2D Window(int64_t batch, int64_t height, int64_t width, int64_t channels, int64_t window,
                int64_t stride, Padding padding) {
  Window2D w;
  w.batch = batch;
  w.height = height;
  w.width = width;
  w.channels = channels;
  w.window_height = w.window_width = window;
  w.stride_height = w.stride_width = stride;
  w.padding = padding;
  return w;
}

TEST_P(BackendTest, Conv2DAndGrad_ShapesAndImageGroups_MatchReference) {
  struct Case {
    Window2D w;
    int64_t out_channels;
  };
  for (const Case& c : std::vector<Case>{
           {Window(64, 28, 28, 1, 3, 1, Padding::kValid), 32},  // the seed model's first layer
           {Window(3, 9, 8, 3, 3, 2, Padding::kSame), 5},
           {Window(4, 6, 7, 8, 1, 1, Padding::kValid), 6},  // 1x1: no column matrix
           // 2 MB of columns per image: more than one group of images on both backends.
           {Window(40, 40, 40, 16, 5, 1, Padding::kValid), 2},
       }) {
    const Window2D& w = c.w;
    const int64_t oc = c.out_channels;
    absl::StatusOr<Window2DOutput> out = ComputeWindow2DOutput(w);
    ASSERT_TRUE(out.ok()) << out.status();
    const int64_t in_size = w.batch * w.height * w.width * w.channels;
    const int64_t filter_size = w.window_height * w.window_width * w.channels * oc;
    const int64_t out_size = w.batch * out->height * out->width * oc;
    const std::vector<float> x = RandomFloats(in_size, &rng_);
    const std::vector<float> f = RandomFloats(filter_size, &rng_);
    const std::vector<float> dy = RandomFloats(out_size, &rng_);
    std::vector<float> y(out_size), dx(in_size), df(filter_size);
    ASSERT_TRUE(ref_->Conv2D(w, oc, x.data(), f.data(), y.data()).ok());
    ASSERT_TRUE(
        ref_->Conv2DGrad(w, oc, x.data(), f.data(), dy.data(), dx.data(), df.data()).ok());
    const float* d_x = Put(x);
    const float* d_f = Put(f);
    float* d_y = Alloc<float>(out_size);
    float* d_dx = Alloc<float>(in_size);
    float* d_df = Alloc<float>(filter_size);
    ASSERT_TRUE(dut_->Conv2D(w, oc, d_x, d_f, d_y).ok());
    ASSERT_TRUE(dut_->Conv2DGrad(w, oc, d_x, d_f, Put(dy), d_dx, d_df).ok());
    const std::string what = "conv " + std::to_string(w.batch) + "x" + std::to_string(w.height) +
                             "x" + std::to_string(w.width) + "x" + std::to_string(w.channels);
    ExpectNear(Get(d_y, out_size), y, 1e-4, what + " output");
    ExpectNear(Get(d_dx, in_size), dx, 1e-4, what + " d_input");
    ExpectNear(Get(d_df, filter_size), df, 1e-4, what + " d_filter");
  }
}

TEST_P(BackendTest, MaxPool2DAndGrad_MatchReferenceExactly) {
  for (const Window2D& w : {Window(64, 26, 26, 32, 2, 2, Padding::kValid),  // the seed model's
                            Window(3, 7, 9, 5, 3, 1, Padding::kSame),       // overlapping
                            Window(2, 11, 10, 3, 3, 2, Padding::kValid)}) {
    absl::StatusOr<Window2DOutput> out = ComputeWindow2DOutput(w);
    ASSERT_TRUE(out.ok()) << out.status();
    const int64_t in_size = w.batch * w.height * w.width * w.channels;
    const int64_t out_size = w.batch * out->height * out->width * w.channels;
    const std::vector<float> x = RandomFloats(in_size, &rng_);
    const std::vector<float> dy = RandomFloats(out_size, &rng_);
    std::vector<float> y(out_size), dx(in_size);
    std::vector<int32_t> arg(out_size);
    ASSERT_TRUE(ref_->MaxPool2D(w, x.data(), y.data(), arg.data()).ok());
    ASSERT_TRUE(ref_->MaxPool2DGrad(w, dy.data(), arg.data(), dx.data()).ok());
    float* d_y = Alloc<float>(out_size);
    int32_t* d_arg = Alloc<int32_t>(out_size);
    float* d_dx = Alloc<float>(in_size);
    ASSERT_TRUE(dut_->MaxPool2D(w, Put(x), d_y, d_arg).ok());
    ASSERT_TRUE(dut_->MaxPool2DGrad(w, Put(dy), d_arg, d_dx).ok());
    EXPECT_EQ(Get(d_y, out_size), y);
    EXPECT_EQ(Get(d_arg, out_size), arg);
    // Both add each element's gradients in output order.
    EXPECT_EQ(Get(d_dx, in_size), dx);
  }
}

TEST_P(BackendTest, MaxPool2DGrad_ArgmaxOutsideWindow_InvalidArgument) {
  const Window2D w = Window(2, 4, 4, 3, 2, 2, Padding::kValid);
  const std::vector<float> x = RandomFloats(2 * 4 * 4 * 3, &rng_);
  std::vector<float> y(2 * 2 * 2 * 3);
  std::vector<int32_t> arg(y.size());
  ASSERT_TRUE(ref_->MaxPool2D(w, x.data(), y.data(), arg.data()).ok());
  arg[12] += 2 * 4 * 3;  // image 1's first output, two rows down: outside its window
  const absl::Status s = OpThenSync(dut_->MaxPool2DGrad(w, Put(RandomFloats(y.size(), &rng_)),
                                                        Put(arg), Alloc<float>(x.size())));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(),
              HasSubstr("MaxPool2DGrad: argmax[12] = " + std::to_string(arg[12]) +
                        " is not an element of its output's window"));
  EXPECT_TRUE(dut_->Synchronize().ok());  // reported once
}

// ---- Vectors -----------------------------------------------------------------------------------

TEST_P(BackendTest, AxpyScaleRowDot_MatchReference) {
  const int64_t rows = 1000, dim = 48, n = rows * dim;
  const std::vector<float> x = RandomFloats(n, &rng_), y = RandomFloats(n, &rng_);
  const std::vector<float> dout = RandomFloats(rows, &rng_);
  std::vector<float> axpy = y, dot(rows), da(n), db(n);
  ASSERT_TRUE(ref_->Axpy(n, 0.25f, x.data(), axpy.data()).ok());
  ASSERT_TRUE(ref_->RowDot(rows, dim, x.data(), y.data(), dot.data()).ok());
  ASSERT_TRUE(ref_->RowDotGrad(rows, dim, x.data(), y.data(), dout.data(), da.data(), db.data())
                  .ok());
  float* d_x = Put(x);
  float* d_y = Put(y);
  float* d_axpy = Put(y);
  ASSERT_TRUE(dut_->Axpy(n, 0.25f, d_x, d_axpy).ok());
  // Not bit-exact: nvcc fuses y + alpha * x into one FMA, the CPU does so only with -march=native.
  const std::vector<float> got = Get(d_axpy, n);
  ExpectNear(got, axpy, 1e-6, "Axpy");
  ASSERT_TRUE(dut_->Scale(n, -2.0f, d_axpy).ok());
  std::vector<float> scaled = got;
  for (float& v : scaled) v *= -2.0f;
  EXPECT_EQ(Get(d_axpy, n), scaled);
  float* d_dot = Alloc<float>(rows);
  ASSERT_TRUE(dut_->RowDot(rows, dim, d_x, d_y, d_dot).ok());
  ExpectNear(Get(d_dot, rows), dot, 1e-5, "RowDot");
  float* d_da = Alloc<float>(n);
  float* d_db = Alloc<float>(n);
  ASSERT_TRUE(dut_->RowDotGrad(rows, dim, d_x, d_y, Put(dout), d_da, d_db).ok());
  EXPECT_EQ(Get(d_da, n), da);
  EXPECT_EQ(Get(d_db, n), db);
}

TEST_P(BackendTest, AllReduceSum_BuffersOnOneDevice_MatchReferenceExactly) {
  for (int replicas = 2; replicas <= 10; replicas += 4) {  // 10: more than one kernel pass
    const int64_t n = 5001;
    std::vector<std::vector<float>> data;
    std::vector<float*> host, device;
    for (int r = 0; r < replicas; ++r) data.push_back(RandomFloats(n, &rng_));
    for (std::vector<float>& d : data) device.push_back(Put(d));
    for (std::vector<float>& d : data) host.push_back(d.data());
    ASSERT_TRUE(ref_->AllReduceSum(host, n).ok());
    ASSERT_TRUE(dut_->AllReduceSum(device, n).ok());
    for (int r = 0; r < replicas; ++r) {
      EXPECT_EQ(Get(device[r], n), data[r]) << replicas << " replicas, replica " << r;
    }
  }
}

// ---- A whole MLP step --------------------------------------------------------------------------

TEST_P(BackendTest, MlpForwardBackward_MatchesReference) {
  // x [b, in] -> relu(x W1 + b1) [b, hid] -> logits = h W2 + b2 [b, out] -> softmax CE; the
  // gradients of W1, b1, W2, b2. The same code runs on both devices, through device memory.
  const int64_t b = 128, in = 64, hid = 96, out = 10;
  const std::vector<float> x = RandomFloats(b * in, &rng_);
  const std::vector<int32_t> labels = RandomIndex(b, out, &rng_);
  const std::vector<float> w1 = RandomFloats(in * hid, &rng_, -0.2f, 0.2f);
  const std::vector<float> b1 = RandomFloats(hid, &rng_, -0.1f, 0.1f);
  const std::vector<float> w2 = RandomFloats(hid * out, &rng_, -0.2f, 0.2f);
  const std::vector<float> b2 = RandomFloats(out, &rng_, -0.1f, 0.1f);
  struct Result {
    std::vector<float> loss, dw1, db1, dw2, db2;
  };
  auto step = [&](Device* d, auto put, auto alloc, auto get) {
    float* dx = put(x);
    int32_t* dl = put(labels);
    float* dw1 = put(w1);
    float* db1 = put(b1);
    float* dw2 = put(w2);
    float* db2 = put(b2);
    float* h = alloc(b * hid);
    float* logits = alloc(b * out);
    float* loss = alloc(1);
    float* g_w1 = alloc(in * hid);
    float* g_b1 = alloc(hid);
    float* g_w2 = alloc(hid * out);
    float* g_b2 = alloc(out);
    float* g_h = alloc(b * hid);
    EXPECT_TRUE(d->Gemm(false, false, b, hid, in, 1, dx, in, dw1, hid, 0, h, hid).ok());
    EXPECT_TRUE(d->BiasAdd(b, hid, db1, h).ok());
    EXPECT_TRUE(d->Relu(b * hid, h, h).ok());
    EXPECT_TRUE(d->Gemm(false, false, b, out, hid, 1, h, hid, dw2, out, 0, logits, out).ok());
    EXPECT_TRUE(d->BiasAdd(b, out, db2, logits).ok());
    EXPECT_TRUE(d->SoftmaxCrossEntropy(b, out, logits, dl, logits, loss).ok());
    EXPECT_TRUE(d->SoftmaxCrossEntropyGrad(b, out, logits, dl, logits).ok());
    EXPECT_TRUE(d->Gemm(true, false, hid, out, b, 1, h, hid, logits, out, 0, g_w2, out).ok());
    EXPECT_TRUE(d->BiasGrad(b, out, logits, g_b2).ok());
    EXPECT_TRUE(d->Gemm(false, true, b, hid, out, 1, logits, out, dw2, out, 0, g_h, hid).ok());
    EXPECT_TRUE(d->ReluGrad(b * hid, h, g_h, g_h).ok());
    EXPECT_TRUE(d->Gemm(true, false, in, hid, b, 1, dx, in, g_h, hid, 0, g_w1, hid).ok());
    EXPECT_TRUE(d->BiasGrad(b, hid, g_h, g_b1).ok());
    return Result{get(loss, 1), get(g_w1, in * hid), get(g_b1, hid), get(g_w2, hid * out),
                  get(g_b2, out)};
  };
  std::vector<std::vector<float>> ref_floats;
  std::vector<std::vector<int32_t>> ref_ints;
  const Result expected = step(
      ref_.get(),
      [&](const auto& v) {
        using T = typename std::decay_t<decltype(v)>::value_type;
        if constexpr (std::is_same_v<T, float>) {
          ref_floats.push_back(v);
          return ref_floats.back().data();
        } else {
          ref_ints.push_back(v);
          return ref_ints.back().data();
        }
      },
      [&](int64_t n) {
        ref_floats.emplace_back(n);
        return ref_floats.back().data();
      },
      [](const float* p, int64_t n) { return std::vector<float>(p, p + n); });
  const Result actual = step(
      dut_.get(), [&](const auto& v) { return Put(v); },
      [&](int64_t n) { return Alloc<float>(n); },
      [&](const float* p, int64_t n) { return Get(p, n); });
  ExpectNear(actual.loss, expected.loss, 1e-5, "loss");
  ExpectNear(actual.dw1, expected.dw1, 1e-4, "dW1");
  ExpectNear(actual.db1, expected.db1, 1e-4, "db1");
  ExpectNear(actual.dw2, expected.dw2, 1e-4, "dW2");
  ExpectNear(actual.db2, expected.db2, 1e-4, "db2");
}

// ---- Factories ---------------------------------------------------------------------------------

TEST(CudaFactoryTest, AutoWithoutGpu_GivesCpu_CudaFailedPrecondition) {
  std::string why;
  if (cuda_backend::CudaDeviceCount(&why) > 0) {
    GTEST_SKIP() << "this machine has a GPU: the no-GPU fallback is not observable here";
  }
  absl::StatusOr<std::unique_ptr<Device>> automatic = CreateDevice();
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ((*automatic)->name(), "cpu");
  DeviceOptions options;
  options.kind = DeviceOptions::Kind::kCuda;
  absl::StatusOr<std::unique_ptr<Device>> cuda = CreateDevice(options);
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(cuda.status().message(), HasSubstr("no CUDA"));
  EXPECT_THAT(cuda.status().message(), HasSubstr(why));
  EXPECT_THAT(why, HasSubstr(cuda_backend::CudaBuild() ? "no CUDA GPU" : "no CUDA support"));
}

TEST(CudaFactoryTest, NegativeOrdinal_InvalidArgument) {
  DeviceOptions options;
  options.kind = DeviceOptions::Kind::kCuda;
  options.gpu_ordinal = -1;
  absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(options);
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(device.status().message(), HasSubstr("gpu_ordinal"));
}

TEST(CudaFactoryTest, OrdinalPastLastGpu_FailedPrecondition) {
  DeviceOptions options;
  options.kind = DeviceOptions::Kind::kCuda;
  options.gpu_ordinal = 1000;
  absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(options);
  EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(device.status().message(), HasSubstr("cuda:1000"));
  // kAuto falls back to the CPU when the ordinal is past the last GPU.
  options.kind = DeviceOptions::Kind::kAuto;
  device = CreateDevice(options);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->name(), "cpu");
}

}  // namespace
}  // namespace pstrain
