// device_bench: the CPU device's ops on the models' shapes, beside what the machine can do, one JSON
// object per line.
//
//   bazel run --config=opt //worker/device:device_bench                  # everything, ~1 minute
//   bazel run --config=opt //worker/device:device_bench -- --only=gemm --seconds=0.2
//
// Every line has name, value, best, unit: value is the rate over the whole timed period, best the
// rate of the fastest single step. On a shared machine (this one has 2 cores and other builds) the
// gap between them is the other work's doing; "context" gives the load average at the start.
// Figures:
//   limit.fma_peak.*   GFLOP/s of independent vector FMAs (the Gemm kernel's vector type) on 1
//                      thread and on every CPU: the compute roof.
//   limit.memcpy       GB/s of a 64 MiB memcpy (bytes copied): the memory roof.
//   gemm.<shape>.*     GFLOP/s (2 m n k per product) of Device::Gemm on 1 thread and with a pool
//                      (all CPUs), of the textbook i-j-p triple loop, and of the i-p-j loop order
//                      (the compiler vectorizes its inner loop), each with its fraction of peak.
//                      Shapes are the Fashion-MNIST MLP 784-256-128-10 at batch 256, forward
//                      (fwd1..3) and backward (dW = X^T dY: "tn"; dX = dY W^T: "nt").
//   mlp_step           examples/s of one forward + backward pass of that MLP (Gemm, BiasAdd, Relu,
//                      softmax cross-entropy and their gradients), 1 thread and with the pool.
//   embedding.*        the click model's sparse path: batch 4096 x 26 features, dim 16, ids drawn
//                      from a skewed distribution over 1M: Unique (M ids/s), GatherRows and
//                      SegmentSum (GB/s of the [n, dim] side, compare with memcpy), SumPool.
//   allreduce.*        GB/s of AllReduceSum over 2 and 4 replicas of 1M floats (bytes of one
//                      buffer per second).
//   conv.*             GFLOP/s (2 flops per multiply-add of the direct definition) of Conv2D and
//                      Conv2DGrad at batch 128: the seed CNN's 3x3 convolution of 28x28x1 images
//                      into 32 channels (d_filter only, as a first layer), and a 3x3 convolution of
//                      13x13x32 into 64 (both gradients), 1 thread and with the pool.
//   max_pool.*         GB/s (input + output + argmax bytes) of MaxPool2D and MaxPool2DGrad, 2x2
//                      stride 2 over [128, 26, 26, 32]: compare with memcpy.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/thread_pool.h"
#include "nlohmann/json.hpp"
#include "worker/device/device.h"

ABSL_FLAG(double, seconds, 0.5, "Timed seconds per measurement (after a warm-up of a fifth).");
ABSL_FLAG(std::vector<std::string>, only, {},
          "Run only these groups (default all): limits, gemm, mlp, embedding, allreduce, conv.");

namespace pstrain {
namespace {

using json = nlohmann::json;

inline void Clobber(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

void Emit(json line) { std::cout << line.dump() << std::endl; }

bool Enabled(const std::string& group) {
  const std::vector<std::string> only = absl::GetFlag(FLAGS_only);
  return only.empty() || std::find(only.begin(), only.end(), group) != only.end();
}

// A measured rate: over the whole timed period, and of the fastest single step. On a shared machine
// (other processes on the cores) the first shows what a user would get right now and the second
// what the code does when it has the core.
struct Rate {
  double mean = 0;
  double best = 0;
  Rate operator/(double d) const { return {mean / d, best / d}; }
};

// Runs `step` (returning the units of work it did) for a warm-up, then for --seconds.
Rate UnitsPerSec(const std::function<double()>& step) {
  const absl::Duration timed = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  const absl::Time warm_end = absl::Now() + timed / 5;
  while (absl::Now() < warm_end) step();
  const absl::Time start = absl::Now();
  double units = 0, best = 0;
  absl::Time now = start;
  do {
    const absl::Time before = now;
    const double did = step();
    units += did;
    now = absl::Now();
    best = std::max(best, did / std::max(1e-9, absl::ToDoubleSeconds(now - before)));
  } while (now < start + timed);
  return {units / absl::ToDoubleSeconds(now - start), best};
}

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::cerr << s << std::endl;
    std::abort();
  }
}

int AvailableCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

// ---- Limits ------------------------------------------------------------------------------------

#if defined(__AVX512F__)
constexpr int kLanes = 16;
#elif defined(__AVX__)
constexpr int kLanes = 8;
#else
constexpr int kLanes = 4;
#endif
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

// FLOPs of `iters` rounds of 12 independent vector FMA chains (enough to cover 2 FMA ports x 4
// cycles of latency).
__attribute__((noinline)) double FmaChains(int64_t iters, float* sink) {
  constexpr int kChains = 12;
  Vec acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = Vec{} + static_cast<float>(c);
  Vec x = Vec{} + 0.999f, y = Vec{} + 1e-4f;
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * x + y;
    asm volatile("" : "+v"(x));  // keep the loop from being folded
  }
  float s = 0;
  for (int c = 0; c < kChains; ++c) s += acc[c][0];
  *sink = s;
  return 2.0 * kChains * kLanes * iters;
}

// GFLOP/s of `threads` threads each running FMA chains (the sum of their rates).
Rate MeasurePeakGflops(int threads) {
  std::vector<Rate> rates(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&rates, t] {
      float sink = 0;
      rates[t] = UnitsPerSec([&] { return FmaChains(1 << 14, &sink); });
      Clobber(&sink);
    });
  }
  for (std::thread& w : workers) w.join();
  Rate total;
  for (const Rate& r : rates) {
    total.mean += r.mean;
    total.best += r.best;
  }
  return total / 1e9;
}

Rate MeasureMemcpyGBps(int64_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes, 2);
  return UnitsPerSec([&] {
           std::memcpy(dst.data(), src.data(), bytes);
           Clobber(dst.data());
           return static_cast<double>(bytes);
         }) /
         1e9;
}

// One JSON line for a rate: value = the mean rate, best = the fastest step's.
void EmitRate(const std::string& name, const Rate& rate, const std::string& unit,
              json extra = json::object()) {
  json line = {{"name", name}, {"value", rate.mean}, {"best", rate.best}, {"unit", unit}};
  line.update(extra);
  Emit(line);
}

// ---- Gemm --------------------------------------------------------------------------------------

struct Shape {
  std::string name;
  bool trans_a, trans_b;
  int64_t m, n, k;
};

// The textbook loop: C[i][j] = sum over p, a dot product per element (B read down a column).
void NaiveIjp(const Shape& s, const float* a, const float* b, float* c) {
  const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      float sum = 0;
      for (int64_t p = 0; p < s.k; ++p) {
        sum += (s.trans_a ? a[p * lda + i] : a[i * lda + p]) *
               (s.trans_b ? b[j * ldb + p] : b[p * ldb + j]);
      }
      c[i * s.n + j] = sum;
    }
  }
}

// The loop order a careful first version uses: C's row i += A[i][p] * B's row p, the inner loop a
// vectorizable axpy over j (B^T is read down a column, which it cannot help).
void NaiveIpj(const Shape& s, const float* a, const float* b, float* __restrict c) {
  const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
  for (int64_t i = 0; i < s.m; ++i) {
    float* __restrict row = c + i * s.n;
    std::fill(row, row + s.n, 0.0f);
    for (int64_t p = 0; p < s.k; ++p) {
      const float av = s.trans_a ? a[p * lda + i] : a[i * lda + p];
      if (s.trans_b) {
        for (int64_t j = 0; j < s.n; ++j) row[j] += av * b[j * ldb + p];
      } else {
        const float* __restrict brow = b + p * ldb;
        for (int64_t j = 0; j < s.n; ++j) row[j] += av * brow[j];
      }
    }
  }
}

void RunGemm(Device* single, Device* pooled, const Rate& peak1, const Rate& peak_all) {
  const std::vector<Shape> shapes = {
      {"fwd1_256x784x256", false, false, 256, 256, 784},
      {"fwd2_256x256x128", false, false, 256, 128, 256},
      {"fwd3_256x128x10", false, false, 256, 10, 128},
      {"dW1_tn_784x256x256", true, false, 784, 256, 256},
      {"dW2_tn_256x128x256", true, false, 256, 128, 256},
      {"dW3_tn_128x10x256", true, false, 128, 10, 256},
      {"dX3_nt_256x128x10", false, true, 256, 128, 10},
      {"dX2_nt_256x256x128", false, true, 256, 256, 128},
      {"dX1_nt_256x784x256", false, true, 256, 784, 256},
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (const Shape& s : shapes) {
    std::vector<float> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
    const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
    const double flops = 2.0 * s.m * s.n * s.k;
    auto measure = [&](const std::function<void()>& run) {
      return UnitsPerSec([&] {
               run();
               Clobber(c.data());
               return flops;
             }) /
             1e9;
    };
    auto device_run = [&](Device* device) {
      return [&, device] {
        Check(device->Gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1, a.data(), lda, b.data(), ldb,
                           0, c.data(), s.n));
      };
    };
    const Rate one = measure(device_run(single));
    const Rate all = measure(device_run(pooled));
    const Rate ijp = measure([&] { NaiveIjp(s, a.data(), b.data(), c.data()); });
    const Rate ipj = measure([&] { NaiveIpj(s, a.data(), b.data(), c.data()); });
    const json shape = {{"m", s.m}, {"n", s.n}, {"k", s.k}, {"trans_a", s.trans_a},
                        {"trans_b", s.trans_b}};
    const std::string base = "gemm." + s.name;
    EmitRate(base + ".device_1thread", one, "GFLOP/s",
             {{"best_of_peak", one.best / peak1.best}, {"shape", shape}});
    EmitRate(base + ".device_pool", all, "GFLOP/s",
             {{"best_of_peak", all.best / peak_all.best},
              {"threads", pooled == single ? 1 : AvailableCpus()},
              {"shape", shape}});
    EmitRate(base + ".naive_ijp", ijp, "GFLOP/s",
             {{"best_of_peak", ijp.best / peak1.best},
              {"device_1thread_speedup_best", one.best / ijp.best},
              {"shape", shape}});
    EmitRate(base + ".naive_ipj", ipj, "GFLOP/s",
             {{"best_of_peak", ipj.best / peak1.best},
              {"device_1thread_speedup_best", one.best / ipj.best},
              {"shape", shape}});
  }
}

// ---- MLP step ----------------------------------------------------------------------------------

// One forward + backward of 784-256-128-10 at `batch`; examples/s.
Rate MlpExamplesPerSec(Device* d, int64_t batch) {
  const int64_t sizes[] = {784, 256, 128, 10};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-0.1f, 0.1f);
  auto random = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
  };
  std::vector<float> x = random(batch * 784);
  std::vector<int32_t> labels(batch);
  for (int64_t i = 0; i < batch; ++i) labels[i] = i % 10;
  std::vector<std::vector<float>> w, bias, dw, db, act, dact;
  for (int l = 0; l < 3; ++l) {
    w.push_back(random(sizes[l] * sizes[l + 1]));
    bias.push_back(random(sizes[l + 1]));
    dw.emplace_back(sizes[l] * sizes[l + 1]);
    db.emplace_back(sizes[l + 1]);
    act.emplace_back(batch * sizes[l + 1]);
    dact.emplace_back(batch * sizes[l + 1]);
  }
  std::vector<float> probs(batch * 10);
  float loss = 0;
  return UnitsPerSec([&] {
    const float* in = x.data();
    for (int l = 0; l < 3; ++l) {
      const int64_t fan_in = sizes[l], fan_out = sizes[l + 1];
      Check(d->Gemm(false, false, batch, fan_out, fan_in, 1, in, fan_in, w[l].data(), fan_out, 0,
                    act[l].data(), fan_out));
      Check(d->BiasAdd(batch, fan_out, bias[l].data(), act[l].data()));
      if (l < 2) Check(d->Relu(batch * fan_out, act[l].data(), act[l].data()));
      in = act[l].data();
    }
    Check(d->SoftmaxCrossEntropy(batch, 10, act[2].data(), labels.data(), probs.data(), &loss));
    Check(d->SoftmaxCrossEntropyGrad(batch, 10, probs.data(), labels.data(), dact[2].data()));
    for (int l = 2; l >= 0; --l) {
      const int64_t fan_in = sizes[l], fan_out = sizes[l + 1];
      const float* layer_in = l == 0 ? x.data() : act[l - 1].data();
      Check(d->Gemm(true, false, fan_in, fan_out, batch, 1, layer_in, fan_in, dact[l].data(),
                    fan_out, 0, dw[l].data(), fan_out));
      Check(d->BiasGrad(batch, fan_out, dact[l].data(), db[l].data()));
      if (l > 0) {
        Check(d->Gemm(false, true, batch, fan_in, fan_out, 1, dact[l].data(), fan_out,
                      w[l].data(), fan_out, 0, dact[l - 1].data(), fan_in));
        Check(d->ReluGrad(batch * fan_in, act[l - 1].data(), dact[l - 1].data(),
                          dact[l - 1].data()));
      }
    }
    Clobber(dw[0].data());
    return static_cast<double>(batch);
  });
}

void RunMlp(Device* single, Device* pooled) {
  for (int64_t batch : {64, 256}) {
    // 2 flops per weight per example for the forward product and each backward one (dW, and dX
    // except for the first layer).
    const double flops_per_example =
        2.0 * 3 * (784 * 256 + 256 * 128 + 128 * 10) - 2.0 * 784 * 256;
    for (Device* d : {single, pooled}) {
      const Rate rate = MlpExamplesPerSec(d, batch);
      EmitRate("mlp_step.batch" + std::to_string(batch) + (d == single ? ".1thread" : ".pool"),
               rate, "examples/s",
               {{"gemm_gflops_best", rate.best * flops_per_example / 1e9},
                {"step_us_best", 1e6 * batch / rate.best}});
    }
  }
}

// ---- Convolution and pooling -------------------------------------------------------------------

void RunConv(Device* single, Device* pooled) {
  constexpr int64_t kBatch = 128;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto random = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
  };
  struct ConvShape {
    std::string name;
    int64_t height, width, channels, out_channels;
    bool d_input;  // a first layer needs none
  };
  for (const ConvShape& shape : {ConvShape{"28x28x1_to_32", 28, 28, 1, 32, false},
                                 ConvShape{"13x13x32_to_64", 13, 13, 32, 64, true}}) {
    Window2D w;
    w.batch = kBatch;
    w.height = shape.height;
    w.width = shape.width;
    w.channels = shape.channels;
    w.window_height = w.window_width = 3;
    const absl::StatusOr<Window2DOutput> out = ComputeWindow2DOutput(w);
    Check(out.status());
    const int64_t oc = shape.out_channels;
    const std::vector<float> x = random(kBatch * shape.height * shape.width * shape.channels);
    const std::vector<float> f = random(9 * shape.channels * oc);
    const std::vector<float> dy = random(kBatch * out->height * out->width * oc);
    std::vector<float> y(dy.size()), dx(x.size()), df(f.size());
    const double flops = 2.0 * kBatch * out->height * out->width * 9 * shape.channels * oc;
    for (Device* d : {single, pooled}) {
      const std::string threads = d == single ? ".1thread" : ".pool";
      EmitRate("conv.forward." + shape.name + threads, UnitsPerSec([&] {
                 Check(d->Conv2D(w, oc, x.data(), f.data(), y.data()));
                 Clobber(y.data());
                 return flops;
               }) / 1e9,
               "GFLOP/s");
      const double grads = shape.d_input ? 2 : 1;
      EmitRate("conv.backward." + shape.name + threads, UnitsPerSec([&] {
                 Check(d->Conv2DGrad(w, oc, x.data(), f.data(), dy.data(),
                                     shape.d_input ? dx.data() : nullptr, df.data()));
                 Clobber(df.data());
                 return grads * flops;
               }) / 1e9,
               "GFLOP/s", {{"gradients", shape.d_input ? "d_input, d_filter" : "d_filter"}});
    }
  }
  Window2D w;
  w.batch = kBatch;
  w.height = w.width = 26;
  w.channels = 32;
  w.window_height = w.window_width = w.stride_height = w.stride_width = 2;
  const int64_t in_size = kBatch * 26 * 26 * 32, out_size = kBatch * 13 * 13 * 32;
  const std::vector<float> x = random(in_size), dy = random(out_size);
  std::vector<float> y(out_size), dx(in_size);
  std::vector<int32_t> arg(out_size);
  const double bytes = 4.0 * (in_size + 2 * out_size);
  for (Device* d : {single, pooled}) {
    const std::string threads = d == single ? ".1thread" : ".pool";
    EmitRate("max_pool.forward" + threads, UnitsPerSec([&] {
               Check(d->MaxPool2D(w, x.data(), y.data(), arg.data()));
               Clobber(y.data());
               return bytes;
             }) / 1e9,
             "GB/s");
    EmitRate("max_pool.backward" + threads, UnitsPerSec([&] {
               Check(d->MaxPool2DGrad(w, dy.data(), arg.data(), dx.data()));
               Clobber(dx.data());
               return bytes;
             }) / 1e9,
             "GB/s");
  }
}

// ---- Embeddings --------------------------------------------------------------------------------

void RunEmbedding(Device* single, Device* pooled, const Rate& memcpy_gbps) {
  constexpr int64_t kBatch = 4096, kFeatures = 26, kDim = 16, kVocab = 1 << 20;
  constexpr int64_t n = kBatch * kFeatures;
  // Skewed ids, as click logs have: the cube of a uniform variate concentrates on small ids.
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int64_t> ids(n);
  for (int64_t& id : ids) {
    const double r = u(rng);
    id = static_cast<int64_t>(r * r * r * kVocab) * 2654435761LL;  // scattered values
  }
  std::vector<int64_t> unique(n);
  std::vector<int32_t> index(n);
  int64_t num_unique = 0;
  const Rate ids_per_sec = UnitsPerSec([&] {
    absl::StatusOr<int64_t> count = single->Unique(n, ids.data(), unique.data(), index.data());
    Check(count.status());
    num_unique = *count;
    return static_cast<double>(n);
  });
  EmitRate("embedding.unique", ids_per_sec / 1e6, "M ids/s", {{"ids", n}, {"unique", num_unique}});

  std::vector<float> table(num_unique * kDim, 0.5f), gathered(n * kDim), grads(n * kDim, 0.25f),
      summed(num_unique * kDim), pooled_out(kBatch * kDim);
  const double side_bytes = static_cast<double>(n * kDim * sizeof(float));
  const Rate same_size_memcpy = MeasureMemcpyGBps(static_cast<int64_t>(side_bytes));
  EmitRate("limit.memcpy_same_size", same_size_memcpy, "GB/s",
           {{"bytes", static_cast<int64_t>(side_bytes)}});
  const json shape = {{"n", n}, {"dim", kDim}, {"unique", num_unique}};
  const json limits = {{"memcpy_same_size_gbps_best", same_size_memcpy.best},
                       {"memcpy_64mib_gbps_best", memcpy_gbps.best}};
  for (Device* d : {single, pooled}) {
    const std::string threads = d == single ? "1thread" : "pool";
    const Rate gather = UnitsPerSec([&] {
      Check(d->GatherRows(num_unique, kDim, table.data(), index.data(), n, gathered.data()));
      Clobber(gathered.data());
      return side_bytes;
    });
    json extra = {{"shape", shape}, {"rows_per_s_best", gather.best / (kDim * 4)}};
    extra.update(limits);
    EmitRate("embedding.gather_rows." + threads, gather / 1e9, "GB/s", extra);
    const Rate segsum = UnitsPerSec([&] {
      Check(d->SegmentSum(n, kDim, grads.data(), index.data(), num_unique, summed.data()));
      Clobber(summed.data());
      return side_bytes;
    });
    extra = {{"shape", shape}, {"rows_per_s_best", segsum.best / (kDim * 4)}};
    extra.update(limits);
    EmitRate("embedding.segment_sum." + threads, segsum / 1e9, "GB/s", extra);
    const Rate pool = UnitsPerSec([&] {
      Check(d->SumPool(kBatch, kFeatures, kDim, gathered.data(), pooled_out.data()));
      Clobber(pooled_out.data());
      return side_bytes;
    });
    extra = {{"shape", shape}};
    extra.update(limits);
    EmitRate("embedding.sum_pool." + threads, pool / 1e9, "GB/s", extra);
  }
}

// ---- AllReduce ---------------------------------------------------------------------------------

void RunAllReduce(Device* single, Device* pooled) {
  constexpr int64_t n = 1 << 20;
  for (int replicas : {2, 4}) {
    std::vector<std::vector<float>> data(replicas, std::vector<float>(n, 1e-3f));
    std::vector<float*> buffers;
    for (auto& v : data) buffers.push_back(v.data());
    for (Device* d : {single, pooled}) {
      const Rate rate = UnitsPerSec([&] {
        Check(d->AllReduceSum(buffers, n));
        Clobber(buffers[0]);
        return static_cast<double>(n * sizeof(float));
      });
      EmitRate("allreduce.replicas" + std::to_string(replicas) +
                   (d == single ? ".1thread" : ".pool"),
               rate / 1e9, "GB/s", {{"floats", n}});
    }
  }
}

int Main() {
  const int cpus = AvailableCpus();
  std::unique_ptr<ThreadPool> pool;
  CpuDeviceOptions pooled_options;
  if (cpus > 1) {
    pool = std::make_unique<ThreadPool>(cpus - 1);
    pooled_options.pool = pool.get();
  }
  absl::StatusOr<std::unique_ptr<Device>> single = CreateCpuDevice();
  absl::StatusOr<std::unique_ptr<Device>> pooled = CreateCpuDevice(pooled_options);
  Check(single.status());
  Check(pooled.status());

  {
    // How busy the machine is: figures taken beside other work are lower (see Rate).
    std::ifstream loadavg("/proc/loadavg");
    double load1 = 0;
    loadavg >> load1;
    Emit({{"name", "context"}, {"cpus", cpus}, {"loadavg_1min", load1}, {"vector_lanes", kLanes}});
  }
  Rate peak1, peak_all, memcpy_gbps;
  if (Enabled("limits") || Enabled("gemm") || Enabled("embedding")) {
    peak1 = MeasurePeakGflops(1);
    peak_all = MeasurePeakGflops(cpus);
    memcpy_gbps = MeasureMemcpyGBps(int64_t{64} << 20);
    EmitRate("limit.fma_peak.1thread", peak1, "GFLOP/s", {{"vector_lanes", kLanes}});
    EmitRate("limit.fma_peak.all", peak_all, "GFLOP/s", {{"threads", cpus}});
    EmitRate("limit.memcpy", memcpy_gbps, "GB/s", {{"bytes", int64_t{64} << 20}});
  }
  if (Enabled("gemm")) RunGemm(single->get(), pooled->get(), peak1, peak_all);
  if (Enabled("mlp")) RunMlp(single->get(), pooled->get());
  if (Enabled("embedding")) RunEmbedding(single->get(), pooled->get(), memcpy_gbps);
  if (Enabled("allreduce")) RunAllReduce(single->get(), pooled->get());
  if (Enabled("conv")) RunConv(single->get(), pooled->get());
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
