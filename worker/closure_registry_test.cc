#include "worker/closure_registry.h"

#include <cstdint>
#include <limits>

#include "common/test_util.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

ClosureRegistry Builtins() {
  ClosureRegistry registry;
  EXPECT_TRUE(RegisterBuiltinClosures(&registry).ok());
  return registry;
}

std::vector<int64_t> Take(Dataset& dataset, int most) {
  std::vector<int64_t> out;
  std::vector<Tensor> element;
  while (static_cast<int>(out.size()) < most) {
    absl::StatusOr<bool> more = dataset.Next(&element);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    out.push_back(element.at(0).scalar<int64_t>());
  }
  return out;
}

TEST(BuiltinClosuresTest, RangeIsShardedOverWorkers) {
  const ClosureRegistry registry = Builtins();
  const DatasetFn* range = registry.FindDataset("range");
  ASSERT_NE(range, nullptr);
  const std::vector<Tensor> ten = {Tensor::Scalar<int64_t>(10)};
  auto worker1 = (*range)(1, 3, ten);
  ASSERT_TRUE(worker1.ok()) << worker1.status();
  EXPECT_EQ(Take(**worker1, 100), (std::vector<int64_t>{1, 4, 7}));
  auto worker2 = (*range)(2, 3, ten);
  ASSERT_TRUE(worker2.ok());
  EXPECT_EQ(Take(**worker2, 100), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ((*range)(3, 3, ten).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BuiltinClosuresTest, RangeOfAnyLengthHoldsNothing) {
  // n comes from a request: 2^63 - 1 elements are made one at a time, none held ahead.
  const ClosureRegistry registry = Builtins();
  const int64_t max = std::numeric_limits<int64_t>::max();
  auto huge = (*registry.FindDataset("range"))(0, 1, {Tensor::Scalar<int64_t>(max)});
  ASSERT_TRUE(huge.ok());
  EXPECT_EQ(Take(**huge, 3), (std::vector<int64_t>{0, 1, 2}));
  auto tail = (*registry.FindDataset("range"))(2, 4, {Tensor::Scalar<int64_t>(max)});
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(Take(**tail, 2), (std::vector<int64_t>{2, 6}));
}

TEST(BuiltinClosuresTest, AddRangeRefusesSimulatedWorkOverTheLimit) {
  const ClosureRegistry registry = Builtins();
  ClosureContext ctx;
  const std::vector<Tensor> args = {Tensor::Scalar<int64_t>(0), Tensor::Scalar<int64_t>(10),
                                    Tensor::Scalar<int64_t>(int64_t{1} << 40)};
  absl::StatusOr<std::vector<Tensor>> out = (*registry.FindClosure("add_range"))(ctx, args);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("work_us"), std::string::npos) << out.status();
}

}  // namespace
}  // namespace pstrain
