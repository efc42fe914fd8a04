#include "common/zero_copy_message.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "grpcpp/support/slice.h"
#include "proto/ps_service.pb.h"

namespace pstrain {
namespace {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

UpdateRequest Request(size_t values_bytes, int ops) {
  UpdateRequest request;
  for (int i = 0; i < ops; ++i) {
    UpdateOp* op = request.add_ops();
    op->set_shard("emb/part_" + std::to_string(i));
    op->set_kind(UpdateOp::APPLY_GRADIENT);
    std::string ids(8 * 3, '\0');
    for (size_t k = 0; k < ids.size(); ++k) ids[k] = static_cast<char>(k * 7 + i);
    op->set_ids(ids);
    std::string values(values_bytes, '\0');
    for (size_t k = 0; k < values.size(); ++k) values[k] = static_cast<char>(k * 31 + i);
    op->set_values(values);
    op->set_dtype(DT_FLOAT32);
  }
  return request;
}

TEST(ZeroCopyMessageTest, SameBytesAsProtobufAndLargeFieldsAreNotCopied) {
  for (size_t values_bytes : {size_t{0}, size_t{100}, size_t{kZeroCopyMinFieldBytes - 1},
                              size_t{kZeroCopyMinFieldBytes}, size_t{1} << 20}) {
    SCOPED_TRACE(values_bytes);
    const UpdateRequest request = Request(values_bytes, 3);
    bool released = false;
    absl::StatusOr<grpc::ByteBuffer> serialized =
        ZeroCopyMessage(request, [&] { released = true; });
    ASSERT_TRUE(serialized.ok()) << serialized.status();
    grpc::ByteBuffer buffer;
    buffer.Swap(&*serialized);  // (a copy would hold references of its own)
    EXPECT_EQ(Flatten(buffer), request.SerializeAsString());
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(buffer.Dump(&slices).ok());
    int aliased = 0;
    for (const grpc::Slice& s : slices) {
      for (const UpdateOp& op : request.ops()) {
        if (s.begin() == reinterpret_cast<const uint8_t*>(op.values().data())) ++aliased;
      }
    }
    const bool large = values_bytes >= static_cast<size_t>(kZeroCopyMinFieldBytes);
    EXPECT_EQ(aliased, large ? 3 : 0);
    slices.clear();
    // Small messages hold no reference to the request: released at once.
    EXPECT_EQ(released, !large);
    grpc::ByteBuffer copy = buffer;
    buffer.Clear();
    EXPECT_EQ(released, !large);
    copy.Clear();
    EXPECT_TRUE(released);
  }
}

TEST(ZeroCopyMessageTest, ParsesBack) {
  const UpdateRequest request = Request(size_t{3} << 20, 2);
  absl::StatusOr<grpc::ByteBuffer> buffer = ZeroCopyMessage(request, [] {});
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  UpdateRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(*buffer)));
  EXPECT_EQ(parsed.SerializeAsString(), request.SerializeAsString());
}

}  // namespace
}  // namespace pstrain
