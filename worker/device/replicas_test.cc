#include "worker/device/replicas.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/device/cuda_device.h"
#include "worker/device/device.h"
#include "worker/device/device_test_util.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<ReplicaGroup> MakeGroup(DeviceOptions::Kind kind, int replicas) {
  ReplicaGroupOptions options;
  options.kind = kind;
  options.num_replicas = replicas;
  absl::StatusOr<std::unique_ptr<ReplicaGroup>> group = ReplicaGroup::Create(options);
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? *std::move(group) : nullptr;
}

// ---- A small regression net, the step each replica runs ----------------------------------------
//
// pred = relu(x W1 + b1) w2 + b2 (one output), loss = mean squared error. The parameters and the
// gradient are one flat buffer: W1 [kIn, kHid], b1 [kHid], w2 [kHid], b2 [1].
constexpr int64_t kIn = 6, kHid = 9;
constexpr int64_t kParams = kIn * kHid + kHid + kHid + 1;

// Writes the gradient of the mean loss over `rows` examples into `grad` (device memory of `d`,
// kParams floats); x, t and params are host memory, copied in.
absl::Status Gradient(Device* d, const std::vector<float>& params, const float* x, const float* t,
                      int64_t rows, float* grad) {
  auto alloc = [&](int64_t floats) { return d->Allocate(floats * sizeof(float)); };
  absl::StatusOr<DeviceBuffer> p = alloc(kParams), dx = alloc(rows * kIn), dt = alloc(rows),
                               h = alloc(rows * kHid), pred = alloc(rows), loss = alloc(1),
                               gh = alloc(rows * kHid);
  for (auto* b : {&p, &dx, &dt, &h, &pred, &loss, &gh}) {
    if (!b->ok()) return b->status();
  }
  float* w1 = p->as<float>();
  float* b1 = w1 + kIn * kHid;
  float* w2 = b1 + kHid;
  float* b2 = w2 + kHid;
  float* g_w1 = grad;
  float* g_b1 = g_w1 + kIn * kHid;
  float* g_w2 = g_b1 + kHid;
  float* g_b2 = g_w2 + kHid;
  absl::Status s = d->CopyToDevice(params.data(), w1, kParams * 4);
  if (s.ok()) s = d->CopyToDevice(x, dx->data(), rows * kIn * 4);
  if (s.ok()) s = d->CopyToDevice(t, dt->data(), rows * 4);
  if (s.ok()) s = d->Gemm(false, false, rows, kHid, kIn, 1, dx->as<float>(), kIn, w1, kHid, 0,
                          h->as<float>(), kHid);
  if (s.ok()) s = d->BiasAdd(rows, kHid, b1, h->as<float>());
  if (s.ok()) s = d->Relu(rows * kHid, h->as<float>(), h->as<float>());
  if (s.ok()) s = d->Gemm(false, false, rows, 1, kHid, 1, h->as<float>(), kHid, w2, 1, 0,
                          pred->as<float>(), 1);
  if (s.ok()) s = d->BiasAdd(rows, 1, b2, pred->as<float>());
  if (s.ok()) s = d->MeanSquaredError(rows, pred->as<float>(), dt->as<float>(), loss->as<float>(),
                                      pred->as<float>());
  // pred now holds dloss/dpred.
  if (s.ok()) s = d->Gemm(true, false, kHid, 1, rows, 1, h->as<float>(), kHid, pred->as<float>(),
                          1, 0, g_w2, 1);
  if (s.ok()) s = d->BiasGrad(rows, 1, pred->as<float>(), g_b2);
  if (s.ok()) s = d->Gemm(false, true, rows, kHid, 1, 1, pred->as<float>(), 1, w2, 1, 0,
                          gh->as<float>(), kHid);
  if (s.ok()) s = d->ReluGrad(rows * kHid, h->as<float>(), gh->as<float>(), gh->as<float>());
  if (s.ok()) s = d->Gemm(true, false, kIn, kHid, rows, 1, dx->as<float>(), kIn, gh->as<float>(),
                          kHid, 0, g_w1, kHid);
  if (s.ok()) s = d->BiasGrad(rows, kHid, gh->as<float>(), g_b1);
  if (s.ok()) s = d->Synchronize();  // before the scratch buffers go
  return s;
}

// One data-parallel step on `group`: each replica's gradient of its part, weighted by its share,
// all-reduced. Returns every replica's buffer after the all-reduce.
std::vector<std::vector<float>> ReplicatedGradient(ReplicaGroup* group,
                                                   const std::vector<float>& params,
                                                   const std::vector<float>& x,
                                                   const std::vector<float>& t, int64_t batch) {
  const int n = group->num_replicas();
  std::vector<DeviceBuffer> grads(n);
  std::vector<float*> buffers(n);
  for (int r = 0; r < n; ++r) {
    absl::StatusOr<DeviceBuffer> buffer = group->device(r)->Allocate(kParams * 4);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!buffer.ok()) return {};
    grads[r] = *std::move(buffer);
    buffers[r] = grads[r].as<float>();
  }
  const absl::Status run = group->Run([&](int r, Device* device) -> absl::Status {
    const BatchSlice part = group->Slice(batch, r);
    absl::Status s = Gradient(device, params, x.data() + part.begin * kIn, t.data() + part.begin,
                              part.size, buffers[r]);
    if (s.ok()) s = device->Scale(kParams, static_cast<float>(group->Weight(batch, r)), buffers[r]);
    return s;
  });
  EXPECT_TRUE(run.ok()) << run;
  const absl::Status reduce = group->AllReduceSum(buffers, kParams);
  EXPECT_TRUE(reduce.ok()) << reduce;
  std::vector<std::vector<float>> out(n, std::vector<float>(kParams));
  for (int r = 0; r < n; ++r) {
    const absl::Status s = group->device(r)->CopyToHost(buffers[r], out[r].data(), kParams * 4);
    EXPECT_TRUE(s.ok()) << s;
  }
  return out;
}

// ---- Split -------------------------------------------------------------------------------------

TEST(ReplicaGroupTest, Split_EveryBatchAndReplicaCount_ContiguousNearlyEqualParts) {
  for (int replicas = 1; replicas <= 5; ++replicas) {
    for (int64_t batch = 0; batch <= 23; ++batch) {
      int64_t next = 0;
      for (int r = 0; r < replicas; ++r) {
        const BatchSlice part = ReplicaGroup::Split(batch, replicas, r);
        EXPECT_EQ(part.begin, next) << batch << " / " << replicas << " r " << r;
        EXPECT_EQ(part.size, batch / replicas + (r < batch % replicas ? 1 : 0));
        next += part.size;
      }
      EXPECT_EQ(next, batch);
    }
  }
  EXPECT_EQ(ReplicaGroup::Split(10, 3, 3).size, 0);  // no such replica
}

// ---- CPU replicas ------------------------------------------------------------------------------

TEST(ReplicaGroupTest, CpuDefault_OneReplica) {
  std::unique_ptr<ReplicaGroup> group = MakeGroup(DeviceOptions::Kind::kCpu, /*replicas=*/0);
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->num_replicas(), 1);
  EXPECT_FALSE(group->on_gpus());
  EXPECT_EQ(group->device(0)->name(), "cpu");
  EXPECT_EQ(group->ToString(), "cpu x 1 replicas");
}

TEST(ReplicaGroupTest, CpuAllReduceSum_OneToFourReplicas_EveryBufferHoldsTheSum) {
  std::mt19937 rng(7);
  for (int replicas = 1; replicas <= 4; ++replicas) {
    std::unique_ptr<ReplicaGroup> group = MakeGroup(DeviceOptions::Kind::kCpu, replicas);
    ASSERT_NE(group, nullptr);
    ASSERT_EQ(group->num_replicas(), replicas);
    for (int64_t n : {1, 1000, 70000}) {
      std::vector<std::vector<float>> data;
      std::vector<float> expected(n, 0.0f);
      for (int r = 0; r < replicas; ++r) {
        data.push_back(RandomFloats(n, &rng));
        for (int64_t j = 0; j < n; ++j) expected[j] += data[r][j];  // in replica order
      }
      std::vector<float*> buffers;
      for (std::vector<float>& d : data) buffers.push_back(d.data());
      ASSERT_TRUE(group->AllReduceSum(buffers, n).ok());
      for (int r = 0; r < replicas; ++r) {
        EXPECT_EQ(data[r], expected) << replicas << " replicas, replica " << r << ", n " << n;
      }
    }
  }
}

TEST(ReplicaGroupTest, CpuDataParallelStep_OneToFourReplicas_MatchesFullBatchGradient) {
  std::mt19937 rng(11);
  const std::vector<float> params = RandomFloats(kParams, &rng, -0.5f, 0.5f);
  absl::StatusOr<std::unique_ptr<Device>> single = CreateCpuDevice();
  ASSERT_TRUE(single.ok());
  for (int64_t batch : {37, 3}) {  // 3 < 4 replicas: an empty part contributes nothing
    const std::vector<float> x = RandomFloats(batch * kIn, &rng);
    const std::vector<float> t = RandomFloats(batch, &rng);
    std::vector<float> expected(kParams);
    ASSERT_TRUE(Gradient(single->get(), params, x.data(), t.data(), batch, expected.data()).ok());
    for (int replicas = 1; replicas <= 4; ++replicas) {
      std::unique_ptr<ReplicaGroup> group = MakeGroup(DeviceOptions::Kind::kCpu, replicas);
      ASSERT_NE(group, nullptr);
      const std::vector<std::vector<float>> grads =
          ReplicatedGradient(group.get(), params, x, t, batch);
      ASSERT_EQ(grads.size(), replicas);
      for (int r = 0; r < replicas; ++r) {
        ExpectNear(grads[r], expected, 1e-5,
                   "batch " + std::to_string(batch) + ", " + std::to_string(replicas) +
                       " replicas, replica " + std::to_string(r));
      }
    }
  }
}

TEST(ReplicaGroupTest, Run_ReplicasRunConcurrently_LowestFailingReplicaReported) {
  std::unique_ptr<ReplicaGroup> group = MakeGroup(DeviceOptions::Kind::kCpu, /*replicas=*/3);
  ASSERT_NE(group, nullptr);
  absl::Mutex mu;
  int arrived = 0;
  const absl::Status s = group->Run([&](int r, Device*) -> absl::Status {
    absl::MutexLock lock(&mu);
    ++arrived;
    // Every replica waits for all three: only possible if they run at once.
    if (!mu.AwaitWithTimeout(absl::Condition(
                                 +[](int* a) { return *a == 3; }, &arrived),
                             absl::Seconds(30))) {
      return absl::DeadlineExceededError("replicas did not run concurrently");
    }
    if (r == 0) return absl::OkStatus();
    return absl::InternalError("replica " + std::to_string(r) + " failed");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("replica 1 failed"));
}

TEST(ReplicaGroupTest, AllReduceSum_WrongBufferCountOrOverlap_InvalidArgument) {
  std::unique_ptr<ReplicaGroup> group = MakeGroup(DeviceOptions::Kind::kCpu, /*replicas=*/2);
  ASSERT_NE(group, nullptr);
  std::vector<float> a(8), b(8);
  absl::Status s = group->AllReduceSum({a.data()}, 8);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("1 buffers for 2 replicas"));
  s = group->AllReduceSum({a.data(), a.data() + 4}, 8);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("overlap"));
}

TEST(ReplicaGroupTest, Create_NegativeReplicas_InvalidArgument) {
  ReplicaGroupOptions options;
  options.num_replicas = -1;
  absl::StatusOr<std::unique_ptr<ReplicaGroup>> group = ReplicaGroup::Create(options);
  EXPECT_EQ(group.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(group.status().message(), HasSubstr("num_replicas"));
}

TEST(ReplicaGroupTest, AutoWithoutGpu_CpuReplicas_CudaFailedPrecondition) {
  std::string why;
  if (cuda_backend::CudaDeviceCount(&why) > 0) {
    GTEST_SKIP() << "this machine has a GPU: the no-GPU fallback is not observable here";
  }
  std::unique_ptr<ReplicaGroup> group = MakeGroup(DeviceOptions::Kind::kAuto, /*replicas=*/2);
  ASSERT_NE(group, nullptr);
  EXPECT_FALSE(group->on_gpus());
  EXPECT_EQ(group->ToString(), "cpu x 2 replicas");
  ReplicaGroupOptions options;
  options.kind = DeviceOptions::Kind::kCuda;
  absl::StatusOr<std::unique_ptr<ReplicaGroup>> cuda = ReplicaGroup::Create(options);
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(cuda.status().message(), HasSubstr("no CUDA"));
}

// ---- GPU replicas (skip without a GPU) ---------------------------------------------------------

class GpuReplicaGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    gpus_ = cuda_backend::CudaDeviceCount(&why);
    if (gpus_ == 0) {
      GTEST_SKIP() << "GPU replica checks skipped: " << why
                   << ". They need a CUDA build and a GPU (the CPU replica tests above always run).";
    }
  }
  int gpus_ = 0;
};

TEST_F(GpuReplicaGroupTest, AllGpus_NcclAllReduceSum_MatchesCpuSum) {
  std::unique_ptr<ReplicaGroup> group = MakeGroup(DeviceOptions::Kind::kCuda, /*replicas=*/0);
  ASSERT_NE(group, nullptr);
  ASSERT_EQ(group->num_replicas(), gpus_);
  EXPECT_TRUE(group->on_gpus());
  std::mt19937 rng(17);
  const int64_t n = 1 << 20;
  std::vector<std::vector<float>> data;
  std::vector<float> expected(n, 0.0f);
  std::vector<DeviceBuffer> owned;
  std::vector<float*> buffers;
  for (int r = 0; r < gpus_; ++r) {
    data.push_back(RandomFloats(n, &rng));
    for (int64_t j = 0; j < n; ++j) expected[j] += data[r][j];
    absl::StatusOr<DeviceBuffer> buffer = group->device(r)->Allocate(n * 4);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    ASSERT_TRUE(group->device(r)->CopyToDevice(data[r].data(), buffer->data(), n * 4).ok());
    buffers.push_back(buffer->as<float>());
    owned.push_back(*std::move(buffer));
  }
  ASSERT_TRUE(group->AllReduceSum(buffers, n).ok());
  for (int r = 0; r < gpus_; ++r) {
    std::vector<float> out(n);
    ASSERT_TRUE(group->device(r)->CopyToHost(buffers[r], out.data(), n * 4).ok());
    ExpectNear(out, expected, 1e-5, "GPU replica " + std::to_string(r));
  }
}

TEST(ReplicaGroupTest, RunAndSum_CpuReplicas_SumLandsInTheHostBuffer) {
  for (const int replicas : {1, 3}) {
    std::unique_ptr<ReplicaGroup> group = MakeGroup(DeviceOptions::Kind::kCpu, replicas);
    ASSERT_NE(group, nullptr);
    std::vector<float> grads(5, -1.0f);
    std::vector<float*> seen(replicas);
    ASSERT_TRUE(group
                    ->RunAndSum(grads.data(), 5,
                                [&](int r, Device* device, float* replica_grads) {
                                  seen[r] = replica_grads;
                                  for (int i = 0; i < 5; ++i) replica_grads[i] = (r + 1) * i;
                                  return absl::OkStatus();
                                })
                    .ok());
    const float total = replicas * (replicas + 1) / 2.0f;  // 1 + 2 + ... + replicas
    for (int i = 0; i < 5; ++i) EXPECT_EQ(grads[i], total * i) << replicas << " replicas, " << i;
    EXPECT_EQ(seen[0], grads.data()) << "the CPU's replica 0 writes the host buffer itself";
  }
  std::unique_ptr<ReplicaGroup> group = MakeGroup(DeviceOptions::Kind::kCpu, 2);
  std::vector<float> grads(3);
  EXPECT_EQ(group
                ->RunAndSum(grads.data(), 3,
                            [](int r, Device*, float*) {
                              return r == 1 ? absl::InvalidArgumentError("replica 1 failed")
                                            : absl::OkStatus();
                            })
                .message(),
            "replica 1 failed");
}

TEST_F(GpuReplicaGroupTest, AllGpus_DataParallelStep_MatchesCpuFullBatchGradient) {
  std::mt19937 rng(19);
  const int64_t batch = 101;
  const std::vector<float> params = RandomFloats(kParams, &rng, -0.5f, 0.5f);
  const std::vector<float> x = RandomFloats(batch * kIn, &rng);
  const std::vector<float> t = RandomFloats(batch, &rng);
  absl::StatusOr<std::unique_ptr<Device>> cpu = CreateCpuDevice();
  ASSERT_TRUE(cpu.ok());
  std::vector<float> expected(kParams);
  ASSERT_TRUE(Gradient(cpu->get(), params, x.data(), t.data(), batch, expected.data()).ok());
  std::unique_ptr<ReplicaGroup> group = MakeGroup(DeviceOptions::Kind::kCuda, /*replicas=*/0);
  ASSERT_NE(group, nullptr);
  const std::vector<std::vector<float>> grads =
      ReplicatedGradient(group.get(), params, x, t, batch);
  ASSERT_EQ(grads.size(), gpus_);
  for (int r = 0; r < gpus_; ++r) {
    ExpectNear(grads[r], expected, 1e-4, "GPU replica " + std::to_string(r));
  }
}

}  // namespace
}  // namespace pstrain
