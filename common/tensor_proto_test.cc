#include "common/tensor_proto.h"

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST(TensorProtoTest, RoundTrip_FloatAndString) {
  TensorProto proto;
  ToProto(Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3}), &proto);
  absl::StatusOr<Tensor> back = FromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape, (Shape{2, 3}));
  EXPECT_EQ(back->data, proto.data());
  ToProto(Tensor::String("text"), &proto);
  ASSERT_TRUE(FromProto(proto).ok());
}

TEST(TensorProtoTest, DataOfTheWrongSize_InvalidArgument) {
  TensorProto proto;
  ToProto(Tensor::FromVector<float>({1, 2}, {2}), &proto);
  proto.add_shape(2);  // [2, 2] needs 16 bytes
  EXPECT_THAT(FromProto(proto), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("needs 4 elements of 4 bytes, got 8 bytes")));
}

// A shape whose element count fits in 64 bits but whose bytes don't (a fuzz finding: the byte
// count overflowed).
TEST(TensorProtoTest, ElementsTimesSizeOverflows_InvalidArgumentNoOverflow) {
  TensorProto proto;
  proto.set_dtype(DT_FLOAT32);
  proto.add_shape(int64_t{7567070729177127168});
  proto.set_data("abcd");
  EXPECT_THAT(FromProto(proto), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("needs 7567070729177127168 elements")));
}

}  // namespace
}  // namespace pstrain
