#include "models/devices.h"

#include <thread>
#include <vector>

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

WorkerDevices Cpu(int replicas) {
  WorkerDevices devices;
  devices.kind = DeviceOptions::Kind::kCpu;
  devices.replicas = replicas;
  return devices;
}

TEST(ReplicaGroupsTest, Get_SameDevices_SameGroup) {
  ReplicaGroups groups;
  absl::StatusOr<ReplicaGroup*> first = groups.Get(Cpu(/*replicas=*/2));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->num_replicas(), 2);
  EXPECT_FALSE((*first)->on_gpus());
  absl::StatusOr<ReplicaGroup*> again = groups.Get(Cpu(/*replicas=*/2));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *first);
}

TEST(ReplicaGroupsTest, Get_OtherDevices_OtherGroup) {
  ReplicaGroups groups;
  absl::StatusOr<ReplicaGroup*> two = groups.Get(Cpu(/*replicas=*/2));
  absl::StatusOr<ReplicaGroup*> three = groups.Get(Cpu(/*replicas=*/3));
  ASSERT_TRUE(two.ok() && three.ok());
  EXPECT_NE(*two, *three);
  EXPECT_EQ((*three)->num_replicas(), 3);
}

TEST(ReplicaGroupsTest, Get_TwoOwners_NothingShared) {
  ReplicaGroups a, b;
  absl::StatusOr<ReplicaGroup*> from_a = a.Get(Cpu(/*replicas=*/1));
  absl::StatusOr<ReplicaGroup*> from_b = b.Get(Cpu(/*replicas=*/1));
  ASSERT_TRUE(from_a.ok() && from_b.ok());
  EXPECT_NE(*from_a, *from_b);
}

TEST(ReplicaGroupsTest, Get_ManyThreadsAtOnce_OneGroup) {
  ReplicaGroups groups;
  std::vector<ReplicaGroup*> got(8, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&groups, &got, t] {
      absl::StatusOr<ReplicaGroup*> group = groups.Get(Cpu(/*replicas=*/4));
      if (group.ok()) got[t] = *group;
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_NE(got[0], nullptr);
  for (ReplicaGroup* g : got) EXPECT_EQ(g, got[0]);
}

TEST(ReplicaGroupsTest, Cpu_IsTheOneReplicaCpuGroupsDevice) {
  ReplicaGroups groups;
  absl::StatusOr<Device*> cpu = groups.Cpu();
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<ReplicaGroup*> group = groups.Get(Cpu(/*replicas=*/1));
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(*cpu, (*group)->device(0));
}

TEST(ReplicaGroupsTest, Get_CudaWithoutGpu_FailedPreconditionThenTriesAgain) {
  ReplicaGroupOptions probe;
  probe.kind = DeviceOptions::Kind::kCuda;
  if (ReplicaGroup::Create(probe).ok()) GTEST_SKIP() << "this machine has a GPU";
  ReplicaGroups groups;
  WorkerDevices cuda;
  cuda.kind = DeviceOptions::Kind::kCuda;
  EXPECT_THAT(groups.Get(cuda), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("GPU")));
  // The failure is not remembered as a group.
  EXPECT_THAT(groups.Get(cuda), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("GPU")));
}

TEST(DevicesTest, DeviceArgs_RoundTrip) {
  WorkerDevices devices = Cpu(/*replicas=*/3);
  const std::vector<Tensor> args = DeviceArgs(devices);
  absl::StatusOr<WorkerDevices> back = DevicesFromArgs(args, /*first=*/0, "test/closure");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, DeviceOptions::Kind::kCpu);
  EXPECT_EQ(back->replicas, 3);
}

TEST(DevicesTest, DevicesFromArgs_BadKind_InvalidArgumentNamingTheClosure) {
  const std::vector<Tensor> args = {Tensor::Scalar<int64_t>(7), Tensor::Scalar<int64_t>(1)};
  EXPECT_THAT(DevicesFromArgs(args, /*first=*/0, "test/closure"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("test/closure")));
}

TEST(DevicesTest, ParseDeviceKind_Unknown_InvalidArgumentListingChoices) {
  EXPECT_THAT(ParseDeviceKind("tpu"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("auto, cpu, cuda")));
  ASSERT_TRUE(ParseDeviceKind("cuda").ok());
  EXPECT_EQ(DeviceKindName(*ParseDeviceKind("cuda")), "cuda");
}

}  // namespace
}  // namespace pstrain
