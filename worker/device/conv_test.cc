// Conv2D, MaxPool2D and their gradients on the CPU device: against direct nested loops (the
// definitions in device.h, in double), against central differences of the forward ops, and their
// argument errors. Every test runs without a pool and with a pool that splits every op.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/test_util.h"
#include "common/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/device/device.h"
#include "worker/device/device_test_util.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::Each;
using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- References: device.h's definitions as direct loops ---------------------------------------

int64_t InputSize(const Window2D& w) { return w.batch * w.height * w.width * w.channels; }
int64_t FilterSize(const Window2D& w, int64_t out_channels) {
  return w.window_height * w.window_width * w.channels * out_channels;
}
int64_t OutputSize(const Window2D& w, const Window2DOutput& o, int64_t channels) {
  return w.batch * o.height * o.width * channels;
}

// Image row / column of window position k at output position o, or -1 outside the image.
int64_t At(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t in) {
  const int64_t v = o * stride - pad + k;
  return v >= 0 && v < in ? v : -1;
}

std::vector<double> NaiveConv2D(const Window2D& w, const Window2DOutput& o, int64_t oc,
                                const std::vector<float>& x, const std::vector<float>& f) {
  std::vector<double> y(OutputSize(w, o, oc), 0.0);
  for (int64_t n = 0; n < w.batch; ++n) {
    for (int64_t oy = 0; oy < o.height; ++oy) {
      for (int64_t ox = 0; ox < o.width; ++ox) {
        for (int64_t m = 0; m < oc; ++m) {
          double sum = 0;
          for (int64_t ky = 0; ky < w.window_height; ++ky) {
            const int64_t iy = At(oy, ky, w.stride_height, o.pad_top, w.height);
            for (int64_t kx = 0; kx < w.window_width; ++kx) {
              const int64_t ix = At(ox, kx, w.stride_width, o.pad_left, w.width);
              if (iy < 0 || ix < 0) continue;
              for (int64_t c = 0; c < w.channels; ++c) {
                const int64_t xi = ((n * w.height + iy) * w.width + ix) * w.channels + c;
                const int64_t fi = ((ky * w.window_width + kx) * w.channels + c) * oc + m;
                sum += static_cast<double>(x[xi]) * f[fi];
              }
            }
          }
          y[((n * o.height + oy) * o.width + ox) * oc + m] = sum;
        }
      }
    }
  }
  return y;
}

// Conv2D's gradients by the chain rule, element by element.
void NaiveConv2DGrad(const Window2D& w, const Window2DOutput& o, int64_t oc,
                     const std::vector<float>& x, const std::vector<float>& f,
                     const std::vector<float>& dy, std::vector<double>* dx,
                     std::vector<double>* df) {
  dx->assign(InputSize(w), 0.0);
  df->assign(FilterSize(w, oc), 0.0);
  for (int64_t n = 0; n < w.batch; ++n) {
    for (int64_t oy = 0; oy < o.height; ++oy) {
      for (int64_t ox = 0; ox < o.width; ++ox) {
        for (int64_t m = 0; m < oc; ++m) {
          const double g = dy[((n * o.height + oy) * o.width + ox) * oc + m];
          for (int64_t ky = 0; ky < w.window_height; ++ky) {
            const int64_t iy = At(oy, ky, w.stride_height, o.pad_top, w.height);
            for (int64_t kx = 0; kx < w.window_width; ++kx) {
              const int64_t ix = At(ox, kx, w.stride_width, o.pad_left, w.width);
              if (iy < 0 || ix < 0) continue;
              for (int64_t c = 0; c < w.channels; ++c) {
                const int64_t xi = ((n * w.height + iy) * w.width + ix) * w.channels + c;
                const int64_t fi = ((ky * w.window_width + kx) * w.channels + c) * oc + m;
                (*dx)[xi] += g * f[fi];
                (*df)[fi] += g * x[xi];
              }
            }
          }
        }
      }
    }
  }
}

void NaiveMaxPool2D(const Window2D& w, const Window2DOutput& o, const std::vector<float>& x,
                    std::vector<float>* y, std::vector<int32_t>* arg) {
  y->assign(OutputSize(w, o, w.channels), kNaN);
  arg->assign(y->size(), -1);
  for (int64_t n = 0; n < w.batch; ++n) {
    for (int64_t oy = 0; oy < o.height; ++oy) {
      for (int64_t ox = 0; ox < o.width; ++ox) {
        for (int64_t c = 0; c < w.channels; ++c) {
          const int64_t out = ((n * o.height + oy) * o.width + ox) * w.channels + c;
          for (int64_t ky = 0; ky < w.window_height; ++ky) {
            const int64_t iy = At(oy, ky, w.stride_height, o.pad_top, w.height);
            for (int64_t kx = 0; kx < w.window_width; ++kx) {
              const int64_t ix = At(ox, kx, w.stride_width, o.pad_left, w.width);
              if (iy < 0 || ix < 0) continue;
              const int64_t in_image = (iy * w.width + ix) * w.channels + c;
              const float v = x[n * w.height * w.width * w.channels + in_image];
              if ((*arg)[out] < 0 || v > (*y)[out]) {
                (*y)[out] = v;
                (*arg)[out] = static_cast<int32_t>(in_image);
              }
            }
          }
        }
      }
    }
  }
}

std::vector<double> NaiveMaxPool2DGrad(const Window2D& w, const Window2DOutput& o,
                                       const std::vector<float>& dy,
                                       const std::vector<int32_t>& arg) {
  std::vector<double> dx(InputSize(w), 0.0);
  const int64_t image = w.height * w.width * w.channels;
  const int64_t out_image = o.height * o.width * w.channels;
  for (int64_t i = 0; i < OutputSize(w, o, w.channels); ++i) {
    dx[i / out_image * image + arg[i]] += dy[i];
  }
  return dx;
}

std::string Describe(const Window2D& w, int64_t oc) {
  return absl::StrCat("[", w.batch, ",", w.height, ",", w.width, ",", w.channels, "] window ",
                      w.window_height, "x", w.window_width, " stride ", w.stride_height, "x",
                      w.stride_width, w.padding == Padding::kSame ? " same" : " valid",
                      " out_channels ", oc);
}

Window2D Make(int64_t batch, int64_t height, int64_t width, int64_t channels, int64_t wh,
              int64_t ww, int64_t sh, int64_t sw, Padding padding) {
  Window2D w;
  w.batch = batch;
  w.height = height;
  w.width = width;
  w.channels = channels;
  w.window_height = wh;
  w.window_width = ww;
  w.stride_height = sh;
  w.stride_width = sw;
  w.padding = padding;
  return w;
}

// Shapes with batch > 1, several channels, odd and non-square sizes, strides that do and don't
// divide the image, both paddings, 1x1 windows (no column matrix) and windows as large as the
// image.
std::vector<Window2D> Shapes() {
  std::vector<Window2D> shapes;
  for (Padding p : {Padding::kValid, Padding::kSame}) {
    shapes.push_back(Make(/*batch=*/3, 7, 9, /*channels=*/1, 3, 3, 1, 1, p));
    shapes.push_back(Make(2, 6, 5, 3, 3, 3, 2, 2, p));
    shapes.push_back(Make(2, 8, 7, 2, 2, 3, 3, 2, p));
    shapes.push_back(Make(1, 5, 5, 4, 5, 5, 1, 1, p));
    shapes.push_back(Make(4, 4, 6, 5, 1, 1, 1, 1, p));
    shapes.push_back(Make(2, 7, 5, 3, 1, 1, 2, 3, p));
    shapes.push_back(Make(2, 11, 10, 2, 4, 2, 2, 3, p));
  }
  // The seed model's first layer.
  shapes.push_back(Make(5, 28, 28, 1, 3, 3, 1, 1, Padding::kValid));
  return shapes;
}

// ---- The fixture -------------------------------------------------------------------------------

struct DeviceParam {
  std::string name;
  int pool_threads;  // 0: no pool
};

class ConvTest : public ::testing::TestWithParam<DeviceParam> {
 protected:
  void SetUp() override {
    CpuDeviceOptions options;
    if (GetParam().pool_threads > 0) {
      pool_ = std::make_unique<ThreadPool>(GetParam().pool_threads);
      options.pool = pool_.get();
      options.min_flops_per_piece = 0;
      options.min_bytes_per_piece = 0;
    }
    absl::StatusOr<std::unique_ptr<Device>> device = CreateCpuDevice(options);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
  }

  Window2DOutput Output(const Window2D& w) {
    absl::StatusOr<Window2DOutput> out = ComputeWindow2DOutput(w);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : Window2DOutput{};
  }

  // Conv2D's output, float.
  std::vector<float> Conv(const Window2D& w, int64_t oc, const std::vector<float>& x,
                          const std::vector<float>& f) {
    std::vector<float> y(OutputSize(w, Output(w), oc), kNaN);
    const absl::Status s = device_->Conv2D(w, oc, x.data(), f.data(), y.data());
    EXPECT_TRUE(s.ok()) << s;
    return y;
  }

  // MaxPool2D's output.
  std::vector<float> Pool(const Window2D& w, const std::vector<float>& x,
                          std::vector<int32_t>* arg = nullptr) {
    std::vector<float> y(OutputSize(w, Output(w), w.channels), kNaN);
    std::vector<int32_t> a(y.size(), -7);
    const absl::Status s = device_->MaxPool2D(w, x.data(), y.data(), a.data());
    EXPECT_TRUE(s.ok()) << s;
    if (arg != nullptr) *arg = a;
    return y;
  }

  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Device> device_;
  std::mt19937 rng_{2024};
};

INSTANTIATE_TEST_SUITE_P(Pools, ConvTest,
                         ::testing::Values(DeviceParam{"NoPool", 0}, DeviceParam{"Pool3", 3}),
                         [](const ::testing::TestParamInfo<DeviceParam>& info) {
                           return info.param.name;
                         });

// ---- Geometry ----------------------------------------------------------------------------------

TEST(ComputeWindow2DOutputTest, ValidAndSame_AsTensorFlowComputes) {
  struct Case {
    int64_t in, window, stride;
    Padding padding;
    int64_t out, pad_before;
  };
  for (const Case& c : std::vector<Case>{
           {28, 3, 1, Padding::kValid, 26, 0},
           {26, 2, 2, Padding::kValid, 13, 0},
           {7, 2, 2, Padding::kValid, 3, 0},  // the last row is dropped
           {5, 5, 3, Padding::kValid, 1, 0},
           {28, 3, 1, Padding::kSame, 28, 1},
           {5, 3, 2, Padding::kSame, 3, 1},  // pad 2 in all: 1 before, 1 after
           {6, 3, 2, Padding::kSame, 3, 0},  // pad 1 in all: 0 before, 1 after
           {7, 4, 3, Padding::kSame, 3, 1},  // pad 3 in all: 1 before, 2 after
           {4, 1, 3, Padding::kSame, 2, 0},
           {0, 3, 1, Padding::kSame, 0, 0},
       }) {
    Window2D w = Make(/*batch=*/2, /*height=*/c.in, /*width=*/c.in + 1, /*channels=*/3, c.window,
                      /*ww=*/1, c.stride, /*sw=*/1, c.padding);
    absl::StatusOr<Window2DOutput> out = ComputeWindow2DOutput(w);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->height, c.out) << c.in << " " << c.window << " " << c.stride;
    EXPECT_EQ(out->pad_top, c.pad_before) << c.in << " " << c.window << " " << c.stride;
    EXPECT_EQ(out->width, c.in + 1);  // a 1-wide window, stride 1
    EXPECT_EQ(out->pad_left, 0);
  }
}

TEST(ComputeWindow2DOutputTest, BadWindow_InvalidArgumentNamingTheField) {
  Window2D w = Make(1, 4, 4, 1, 3, 3, 1, 1, Padding::kValid);
  w.batch = -1;
  EXPECT_THAT(ComputeWindow2DOutput(w),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("window.batch must be >= 0")));
  w = Make(1, 4, 4, 1, 3, 3, 1, 1, Padding::kValid);
  w.stride_width = 0;
  EXPECT_THAT(ComputeWindow2DOutput(w), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("window.stride_width must be >= 1")));
  w = Make(1, 4, 4, 1, /*wh=*/5, 3, 1, 1, Padding::kValid);
  EXPECT_THAT(ComputeWindow2DOutput(w),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("window.window_height 5"), HasSubstr("height 4"),
                             HasSubstr("kValid"))));
  w.padding = Padding::kSame;  // the same window is fine with padding
  EXPECT_TRUE(ComputeWindow2DOutput(w).ok());
  w = Make(1, int64_t{1} << 40, int64_t{1} << 40, 1, 1, 1, 1, 1, Padding::kValid);
  EXPECT_THAT(ComputeWindow2DOutput(w),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows")));
}

// ---- Conv2D ------------------------------------------------------------------------------------

TEST_P(ConvTest, Conv2D_ManyShapes_MatchNaive) {
  for (const Window2D& w : Shapes()) {
    for (int64_t oc : {1, 5}) {
      const Window2DOutput o = Output(w);
      const std::vector<float> x = RandomFloats(InputSize(w), &rng_);
      const std::vector<float> f = RandomFloats(FilterSize(w, oc), &rng_);
      const int64_t k = w.window_height * w.window_width * w.channels;
      ExpectNear(Conv(w, oc, x, f), NaiveConv2D(w, o, oc, x, f), 1e-5 * (1 + k),
                 "Conv2D " + Describe(w, oc));
    }
  }
}

TEST_P(ConvTest, Conv2DGrad_ManyShapes_MatchNaive) {
  for (const Window2D& w : Shapes()) {
    for (int64_t oc : {1, 4}) {
      const Window2DOutput o = Output(w);
      const std::vector<float> x = RandomFloats(InputSize(w), &rng_);
      const std::vector<float> f = RandomFloats(FilterSize(w, oc), &rng_);
      const std::vector<float> dy = RandomFloats(OutputSize(w, o, oc), &rng_);
      std::vector<double> want_dx, want_df;
      NaiveConv2DGrad(w, o, oc, x, f, dy, &want_dx, &want_df);
      // Poisoned: every element must be overwritten.
      std::vector<float> dx(x.size(), kNaN), df(f.size(), kNaN);
      ASSERT_TRUE(device_->Conv2DGrad(w, oc, x.data(), f.data(), dy.data(), dx.data(), df.data())
                      .ok());
      const std::string what = Describe(w, oc);
      ExpectNear(dx, want_dx, 1e-5 * (1 + oc * w.window_height * w.window_width),
                 "d_input " + what);
      ExpectNear(df, want_df, 1e-5 * (1 + w.batch * o.height * o.width), "d_filter " + what);
      // Each gradient alone, the other pointer (and what only it reads) null.
      std::vector<float> dx_only(x.size(), kNaN), df_only(f.size(), kNaN);
      ASSERT_TRUE(device_->Conv2DGrad(w, oc, /*input=*/nullptr, f.data(), dy.data(),
                                      dx_only.data(), /*d_filter=*/nullptr)
                      .ok());
      ASSERT_TRUE(device_->Conv2DGrad(w, oc, x.data(), /*filter=*/nullptr, dy.data(),
                                      /*d_input=*/nullptr, df_only.data())
                      .ok());
      EXPECT_EQ(dx_only, dx) << what;
      EXPECT_EQ(df_only, df) << what;
    }
  }
}

TEST_P(ConvTest, Conv2D_ColumnsOverScratchBound_ChunksMatchNaive) {
  // One image's column matrix is 30 x 30 x 144 floats (518 KB): 16 images fit the CPU's 8 MiB,
  // so 40 images run in three groups, and d_filter sums over the groups.
  const Window2D w = Make(/*batch=*/40, 32, 32, /*channels=*/16, 3, 3, 1, 1, Padding::kValid);
  const int64_t oc = 3;
  const Window2DOutput o = Output(w);
  const std::vector<float> x = RandomFloats(InputSize(w), &rng_);
  const std::vector<float> f = RandomFloats(FilterSize(w, oc), &rng_);
  const std::vector<float> dy = RandomFloats(OutputSize(w, o, oc), &rng_);
  ExpectNear(Conv(w, oc, x, f), NaiveConv2D(w, o, oc, x, f), 1e-5 * 145, "Conv2D");
  std::vector<double> want_dx, want_df;
  NaiveConv2DGrad(w, o, oc, x, f, dy, &want_dx, &want_df);
  std::vector<float> dx(x.size(), kNaN), df(f.size(), kNaN);
  ASSERT_TRUE(
      device_->Conv2DGrad(w, oc, x.data(), f.data(), dy.data(), dx.data(), df.data()).ok());
  ExpectNear(dx, want_dx, 1e-4, "d_input");
  ExpectNear(df, want_df, 1e-5 * (1 + 40 * 900), "d_filter");
}

// L = sum of output * r: dL/dinput and dL/dfilter are Conv2DGrad with d_output = r, and each
// partial is (L(v + eps) - L(v - eps)) / (2 eps), L computed in double from the float output.
TEST_P(ConvTest, Conv2DGrad_MatchesCentralDifferences) {
  for (const Window2D& w : {Make(2, 5, 6, 3, 3, 2, 2, 1, Padding::kSame),
                            Make(3, 6, 6, 2, 3, 3, 1, 1, Padding::kValid)}) {
    const int64_t oc = 3;
    const Window2DOutput o = Output(w);
    std::vector<float> x = RandomFloats(InputSize(w), &rng_);
    std::vector<float> f = RandomFloats(FilterSize(w, oc), &rng_);
    const std::vector<float> r = RandomFloats(OutputSize(w, o, oc), &rng_);
    auto loss = [&]() {
      const std::vector<float> y = Conv(w, oc, x, f);
      double sum = 0;
      for (size_t i = 0; i < y.size(); ++i) sum += static_cast<double>(y[i]) * r[i];
      return sum;
    };
    std::vector<float> dx(x.size()), df(f.size());
    ASSERT_TRUE(
        device_->Conv2DGrad(w, oc, x.data(), f.data(), r.data(), dx.data(), df.data()).ok());
    constexpr float kEps = 1e-2f;
    auto numeric = [&](std::vector<float>* v, size_t i) {
      const float saved = (*v)[i];
      (*v)[i] = saved + kEps;
      const double plus = loss();
      (*v)[i] = saved - kEps;
      const double minus = loss();
      (*v)[i] = saved;
      return (plus - minus) / (2.0 * kEps);
    };
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(dx[i], numeric(&x, i), 2e-3) << "d_input[" << i << "] " << Describe(w, oc);
    }
    for (size_t i = 0; i < f.size(); ++i) {
      ASSERT_NEAR(df[i], numeric(&f, i), 2e-3) << "d_filter[" << i << "] " << Describe(w, oc);
    }
  }
}

TEST_P(ConvTest, Conv2D_EmptyShapes_ZerosWhereThereIsAnOutput) {
  // No images: nothing read or written; d_filter of an empty batch is zero.
  Window2D w = Make(/*batch=*/0, 5, 5, 2, 3, 3, 1, 1, Padding::kValid);
  EXPECT_TRUE(device_->Conv2D(w, 4, nullptr, nullptr, nullptr).ok());
  std::vector<float> df(3 * 3 * 2 * 4, kNaN);
  EXPECT_TRUE(device_->Conv2DGrad(w, 4, nullptr, nullptr, nullptr, nullptr, df.data()).ok());
  EXPECT_THAT(df, Each(0.0f));
  // No input channels: every output is an empty sum.
  w = Make(2, 5, 5, /*channels=*/0, 3, 3, 1, 1, Padding::kValid);
  std::vector<float> y(2 * 3 * 3 * 4, kNaN);
  EXPECT_TRUE(device_->Conv2D(w, 4, nullptr, nullptr, y.data()).ok());
  EXPECT_THAT(y, Each(0.0f));
  // No output channels: d_input is zero.
  w = Make(2, 5, 5, 2, 3, 3, 1, 1, Padding::kValid);
  std::vector<float> dx(2 * 5 * 5 * 2, kNaN);
  EXPECT_TRUE(device_->Conv2DGrad(w, /*out_channels=*/0, nullptr, nullptr, nullptr, dx.data(),
                                  nullptr)
                  .ok());
  EXPECT_THAT(dx, Each(0.0f));
  // Neither gradient asked for: nothing to do.
  EXPECT_TRUE(device_->Conv2DGrad(w, 4, nullptr, nullptr, nullptr, nullptr, nullptr).ok());
}

TEST_P(ConvTest, Conv2D_BadArguments_InvalidArgumentNothingWritten) {
  const Window2D w = Make(2, 5, 5, 2, 3, 3, 1, 1, Padding::kValid);
  std::vector<float> x(2 * 5 * 5 * 2, 1.0f), f(3 * 3 * 2 * 4, 1.0f), y(2 * 3 * 3 * 4, kNaN);
  EXPECT_THAT(device_->Conv2D(w, /*out_channels=*/-1, x.data(), f.data(), y.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Conv2D: out_channels must be >= 0")));
  EXPECT_THAT(device_->Conv2D(w, 4, x.data(), /*filter=*/nullptr, y.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Conv2D: filter is null but covers 72 elements")));
  EXPECT_THAT(device_->Conv2D(w, 4, /*input=*/nullptr, f.data(), y.data()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("input is null")));
  Window2D bad = w;
  bad.stride_height = 0;
  EXPECT_THAT(device_->Conv2D(bad, 4, x.data(), f.data(), y.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Conv2D: window.stride_height must be >= 1, got 0")));
  bad = w;
  bad.window_width = 6;
  EXPECT_THAT(device_->Conv2D(bad, 4, x.data(), f.data(), y.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Conv2D: window.window_width 6 exceeds the image's width 5")));
  bad = w;
  bad.channels = -2;
  EXPECT_THAT(device_->Conv2D(bad, 4, x.data(), f.data(), y.data()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("window.channels")));
  EXPECT_THAT(y, Each(::testing::IsNan()));

  std::vector<float> dy(y.size(), 1.0f), dx(x.size(), kNaN), df(f.size(), kNaN);
  EXPECT_THAT(device_->Conv2DGrad(w, 4, x.data(), f.data(), /*d_output=*/nullptr, dx.data(),
                                  df.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Conv2DGrad: d_output is null")));
  EXPECT_THAT(device_->Conv2DGrad(w, 4, /*input=*/nullptr, f.data(), dy.data(), dx.data(),
                                  df.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Conv2DGrad: input is null")));
  EXPECT_THAT(device_->Conv2DGrad(w, 4, x.data(), /*filter=*/nullptr, dy.data(), dx.data(),
                                  df.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Conv2DGrad: filter is null")));
  EXPECT_THAT(dx, Each(::testing::IsNan()));
  EXPECT_THAT(df, Each(::testing::IsNan()));
}

// ---- MaxPool2D ---------------------------------------------------------------------------------

TEST_P(ConvTest, MaxPool2D_ManyShapes_MatchNaive) {
  for (const Window2D& w : Shapes()) {
    const Window2DOutput o = Output(w);
    const std::vector<float> x = RandomFloats(InputSize(w), &rng_);
    std::vector<float> want;
    std::vector<int32_t> want_arg, arg;
    NaiveMaxPool2D(w, o, x, &want, &want_arg);
    EXPECT_EQ(Pool(w, x, &arg), want) << Describe(w, w.channels);
    EXPECT_EQ(arg, want_arg) << Describe(w, w.channels);

    const std::vector<float> dy = RandomFloats(want.size(), &rng_);
    std::vector<float> dx(x.size(), kNaN);
    ASSERT_TRUE(device_->MaxPool2DGrad(w, dy.data(), arg.data(), dx.data()).ok());
    ExpectNear(dx, NaiveMaxPool2DGrad(w, o, dy, arg), 1e-6, "MaxPool2DGrad " + Describe(w, 0));
  }
}

TEST_P(ConvTest, MaxPool2D_SeedModelShape_MatchNaive) {
  // The seed model: 2x2, stride 2 over [batch, 26, 26, 32]. Odd sizes drop the last row too.
  for (const Window2D& w : {Make(6, 26, 26, 32, 2, 2, 2, 2, Padding::kValid),
                            Make(3, 13, 11, 7, 2, 2, 2, 2, Padding::kValid)}) {
    const Window2DOutput o = Output(w);
    const std::vector<float> x = RandomFloats(InputSize(w), &rng_);
    std::vector<float> want;
    std::vector<int32_t> want_arg, arg;
    NaiveMaxPool2D(w, o, x, &want, &want_arg);
    EXPECT_EQ(Pool(w, x, &arg), want);
    EXPECT_EQ(arg, want_arg);
  }
}

TEST_P(ConvTest, MaxPool2D_TiesAndSamePadding_FirstInWindowPaddingNeverWins) {
  // All-negative values: a zero from the padding would win if it counted. Ties: the first of the
  // window's row-major order.
  const Window2D w = Make(1, 3, 3, 1, 2, 2, 2, 2, Padding::kSame);  // out 2 x 2, pad after
  const std::vector<float> x = {-5, -1, -3,  //
                                -1, -2, -4,  //
                                -7, -6, -9};
  std::vector<int32_t> arg;
  EXPECT_THAT(Pool(w, x, &arg), ::testing::ElementsAre(-1, -3, -6, -9));
  EXPECT_THAT(arg, ::testing::ElementsAre(1, 2, 7, 8));
}

TEST_P(ConvTest, MaxPool2DGrad_OverlappingWindows_SumsAndMatchesCentralDifferences) {
  // Windows 3x3 with stride 1 and 2 overlap: one element can be the max of several outputs.
  for (const Window2D& w : {Make(2, 6, 7, 3, 3, 3, 1, 1, Padding::kSame),
                            Make(2, 7, 7, 2, 3, 3, 2, 2, Padding::kValid)}) {
    const Window2DOutput o = Output(w);
    std::vector<float> x = RandomFloats(InputSize(w), &rng_);
    const std::vector<float> r = RandomFloats(OutputSize(w, o, w.channels), &rng_);
    std::vector<int32_t> arg;
    Pool(w, x, &arg);
    std::vector<float> dx(x.size(), kNaN);
    ASSERT_TRUE(device_->MaxPool2DGrad(w, r.data(), arg.data(), dx.data()).ok());
    // L at x, and whether the step kept every argmax (else L is not differentiable across it
    // and the element is skipped).
    auto loss = [&](bool* same_argmax) {
      std::vector<int32_t> a;
      const std::vector<float> y = Pool(w, x, &a);
      *same_argmax = a == arg;
      double sum = 0;
      for (size_t i = 0; i < y.size(); ++i) sum += static_cast<double>(y[i]) * r[i];
      return sum;
    };
    constexpr float kEps = 1e-3f;
    int64_t skipped = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float saved = x[i];
      bool same_plus, same_minus;
      x[i] = saved + kEps;
      const double plus = loss(&same_plus);
      x[i] = saved - kEps;
      const double minus = loss(&same_minus);
      x[i] = saved;
      if (!same_plus || !same_minus) {
        ++skipped;
        continue;
      }
      // The pool copies values exactly: the difference is off only by the rounding of x +- eps.
      ASSERT_NEAR(dx[i], (plus - minus) / (2.0 * kEps), 1e-3 * (1 + std::fabs(dx[i])))
          << "d_input[" << i << "] " << Describe(w, 0);
    }
    EXPECT_LT(skipped, static_cast<int64_t>(x.size()) / 20) << Describe(w, 0);
  }
}

TEST_P(ConvTest, MaxPool2D_BadArguments_InvalidArgumentNothingWritten) {
  const Window2D w = Make(2, 4, 4, 3, 2, 2, 2, 2, Padding::kValid);
  const std::vector<float> x = RandomFloats(InputSize(w), &rng_);
  std::vector<float> y(2 * 2 * 2 * 3, kNaN);
  std::vector<int32_t> arg(y.size(), -7);
  EXPECT_THAT(device_->MaxPool2D(w, x.data(), y.data(), /*argmax=*/nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("MaxPool2D: argmax is null but covers 24 elements")));
  Window2D bad = w;
  bad.window_height = 0;
  EXPECT_THAT(device_->MaxPool2D(bad, x.data(), y.data(), arg.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("MaxPool2D: window.window_height must be >= 1")));
  bad = Make(/*batch=*/0, 65536, 65536, 1, 2, 2, 2, 2, Padding::kValid);
  EXPECT_THAT(device_->MaxPool2D(bad, nullptr, nullptr, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("int32 argmax")));
  EXPECT_THAT(y, Each(::testing::IsNan()));
  EXPECT_THAT(arg, Each(-7));

  ASSERT_TRUE(device_->MaxPool2D(w, x.data(), y.data(), arg.data()).ok());
  const std::vector<float> dy(y.size(), 1.0f);
  std::vector<float> dx(x.size(), kNaN);
  EXPECT_THAT(device_->MaxPool2DGrad(w, dy.data(), /*argmax=*/nullptr, dx.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("MaxPool2DGrad: argmax is null")));
  // An argmax in range but in another window, in another channel, or outside the image.
  for (int32_t wrong : {arg[0] + 2 * 3 * 4, arg[0] + 1, -1, 4 * 4 * 3}) {
    std::vector<int32_t> tampered = arg;
    tampered[3 * 4 + 0] = wrong;  // image 0 has 12 outputs: image 1's first
    EXPECT_THAT(device_->MaxPool2DGrad(w, dy.data(), tampered.data(), dx.data()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("MaxPool2DGrad: argmax[12] = "),
                               HasSubstr("not an element of its output's window"))))
        << wrong;
  }
  EXPECT_THAT(dx, Each(::testing::IsNan()));
}

TEST_P(ConvTest, MaxPool2D_EmptyShapes_Ok) {
  const Window2D w = Make(/*batch=*/0, 4, 4, 3, 2, 2, 2, 2, Padding::kValid);
  EXPECT_TRUE(device_->MaxPool2D(w, nullptr, nullptr, nullptr).ok());
  EXPECT_TRUE(device_->MaxPool2DGrad(w, nullptr, nullptr, nullptr).ok());
  const Window2D no_channels = Make(2, 4, 4, /*channels=*/0, 2, 2, 2, 2, Padding::kValid);
  EXPECT_TRUE(device_->MaxPool2D(no_channels, nullptr, nullptr, nullptr).ok());
}

// ---- Together, as the seed model's layers use them --------------------------------------------

TEST_P(ConvTest, ConvBiasReluPool_ChainGradient_MatchesCentralDifferences) {
  // x -> Conv2D(4, 3x3) + bias -> ReLU -> MaxPool(2x2) -> L = sum(pool * r): the filter's gradient
  // through the whole chain, each op's backward fed by the next one's.
  const Window2D conv = Make(2, 9, 8, 2, 3, 3, 1, 1, Padding::kValid);
  const int64_t oc = 4;
  const Window2DOutput co = Output(conv);
  const Window2D pool = Make(2, co.height, co.width, oc, 2, 2, 2, 2, Padding::kValid);
  const Window2DOutput po = Output(pool);
  const std::vector<float> x = RandomFloats(InputSize(conv), &rng_);
  std::vector<float> f = RandomFloats(FilterSize(conv, oc), &rng_);
  const std::vector<float> bias = RandomFloats(oc, &rng_, -0.1f, 0.1f);
  const std::vector<float> r = RandomFloats(OutputSize(pool, po, oc), &rng_);
  const int64_t rows = conv.batch * co.height * co.width;
  std::vector<float> h(rows * oc), p(r.size());
  std::vector<int32_t> arg(r.size());
  // L, and the pattern that makes it piecewise linear: which units are positive after the ReLU
  // and where each max comes from. A step that changes it is skipped.
  auto forward = [&](std::vector<int32_t>* pattern) {
    EXPECT_TRUE(device_->Conv2D(conv, oc, x.data(), f.data(), h.data()).ok());
    EXPECT_TRUE(device_->BiasAdd(rows, oc, bias.data(), h.data()).ok());
    EXPECT_TRUE(device_->Relu(rows * oc, h.data(), h.data()).ok());
    EXPECT_TRUE(device_->MaxPool2D(pool, h.data(), p.data(), arg.data()).ok());
    *pattern = arg;
    for (float v : h) pattern->push_back(v > 0);
    double sum = 0;
    for (size_t i = 0; i < p.size(); ++i) sum += static_cast<double>(p[i]) * r[i];
    return sum;
  };
  std::vector<int32_t> base, pattern;
  forward(&base);
  std::vector<float> dh(h.size()), df(f.size());
  ASSERT_TRUE(device_->MaxPool2DGrad(pool, r.data(), arg.data(), dh.data()).ok());
  ASSERT_TRUE(device_->ReluGrad(rows * oc, h.data(), dh.data(), dh.data()).ok());
  ASSERT_TRUE(
      device_->Conv2DGrad(conv, oc, x.data(), nullptr, dh.data(), nullptr, df.data()).ok());
  constexpr float kEps = 1e-3f;
  int64_t checked = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const float saved = f[i];
    f[i] = saved + kEps;
    const double plus = forward(&pattern);
    bool same = pattern == base;
    f[i] = saved - kEps;
    const double minus = forward(&pattern);
    same = same && pattern == base;
    f[i] = saved;
    if (!same) continue;
    ++checked;
    ASSERT_NEAR(df[i], (plus - minus) / (2.0 * kEps), 1e-2 * (1 + std::fabs(df[i])))
        << "d_filter[" << i << "]";
  }
  EXPECT_GT(checked, static_cast<int64_t>(f.size()) / 2);
}

}  // namespace
}  // namespace pstrain
