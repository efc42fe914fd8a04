#include "ps/update_view.h"

#include <cstring>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {


std::string Ids(std::vector<int64_t> ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 8);
}

UpdateRequest Request() {
  UpdateRequest request;
  UpdateOp* sparse = request.add_ops();
  sparse->set_shard("emb/part_0");
  sparse->set_kind(UpdateOp::APPLY_GRADIENT);
  sparse->set_ids(Ids({3, 1, 300, 70000}));
  std::string values(4 * 12, '\0');
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<char>(i * 7);
  sparse->set_values(values);
  sparse->set_dtype(DT_FLOAT32);
  UpdateOp* dense = request.add_ops();
  dense->set_shard("bias");
  dense->set_kind(UpdateOp::ASSIGN_ADD);
  dense->mutable_range()->set_row_begin(2);
  dense->mutable_range()->set_row_end(5);
  dense->set_values(std::string(3 * 8, 'v'));
  dense->set_dtype(DT_INT64);
  UpdateOp* whole = request.add_ops();  // the whole shard: range (0, 0), fields left default
  whole->set_shard("w");
  whole->mutable_range();
  return request;
}

void ExpectSame(const std::vector<UpdateOpView>& got, const UpdateRequest& want) {
  ASSERT_EQ(got.size(), static_cast<size_t>(want.ops_size()));
  for (int i = 0; i < want.ops_size(); ++i) {
    const UpdateOp& w = want.ops(i);
    const UpdateOpView& g = got[i];
    EXPECT_EQ(g.shard(), w.shard());
    EXPECT_EQ(g.kind, w.kind());
    EXPECT_EQ(g.dtype, w.dtype());
    EXPECT_EQ(g.sparse, w.rows_case() == UpdateOp::kIds);
    EXPECT_EQ(std::string(g.ids), w.ids());
    EXPECT_EQ(g.range.row_begin(), w.range().row_begin());
    EXPECT_EQ(g.range.row_end(), w.range().row_end());
    EXPECT_EQ(JoinPieces(g.values), w.values());
    EXPECT_EQ(g.values_bytes, static_cast<int64_t>(w.values().size()));
  }
}

TEST(UpdateViewTest, ParsesTheWireFormatWhereverItIsCut) {
  const UpdateRequest request = Request();
  const std::string wire = request.SerializeAsString();
  for (size_t n = 1; n <= wire.size(); ++n) {
    const std::vector<absl::string_view> pieces = CutIntoPieces(wire, n);
    std::vector<UpdateOpView> ops;
    ASSERT_TRUE(ParseUpdateRequest(pieces, &ops).ok()) << n;
    ExpectSame(ops, request);
    // Values in one piece are views of the message, not copies.
    if (n == wire.size()) {
      ASSERT_EQ(ops[0].values.size(), 1u);
      EXPECT_GE(ops[0].values[0].data(), wire.data());
      EXPECT_LT(ops[0].values[0].data(), wire.data() + wire.size());
    }
  }
  ExpectSame(ViewsOf(request), request);
}

// Short ids cut between pieces are copied into the op; the views must stay right as later ops are
// parsed and the vector of ops grows (a short copy lives inside the string object, which moves).
// The fields a push that is also a read carries: each op's read_version and the request's
// return_rows (and its step), wherever the message is cut.
TEST(UpdateViewTest, ReadVersionAndReturnRows_Parsed) {
  UpdateRequest request = Request();
  request.mutable_ops(2)->set_read_version(123456789012);
  request.set_step(41);
  request.set_return_rows(true);
  const std::string wire = request.SerializeAsString();
  for (size_t n = 1; n <= wire.size(); ++n) {
    std::vector<UpdateOpView> ops;
    int64_t step = 0;
    bool return_rows = false;
    ASSERT_TRUE(
        ParseUpdateRequest(CutIntoPieces(wire, n), &ops, &step, &return_rows).ok()) << n;
    ASSERT_EQ(ops.size(), 3u);
    EXPECT_EQ(ops[0].read_version, 0);
    EXPECT_EQ(ops[2].read_version, 123456789012);
    EXPECT_EQ(step, 41);
    EXPECT_TRUE(return_rows);
  }
  EXPECT_EQ(ViewsOf(request)[2].read_version, 123456789012);
  std::vector<UpdateOpView> ops;
  bool return_rows = true;
  ASSERT_TRUE(
      ParseUpdateRequest({Request().SerializeAsString()}, &ops, nullptr, &return_rows).ok());
  EXPECT_FALSE(return_rows);
}

TEST(UpdateViewTest, ShortIdsCutBetweenPiecesSurviveMoreOps) {
  UpdateRequest request;
  for (int i = 0; i < 9; ++i) {
    UpdateOp* op = request.add_ops();
    op->set_shard("t/part_" + std::to_string(i));
    op->set_kind(UpdateOp::APPLY_GRADIENT);
    op->set_ids(Ids({1000 + i}));  // 8 bytes: a short string
    op->set_values(std::string(4, static_cast<char>('a' + i)));
    op->set_dtype(DT_FLOAT32);
  }
  const std::string wire = request.SerializeAsString();
  for (size_t n = 1; n <= 8; ++n) {
    std::vector<UpdateOpView> ops;
    ASSERT_TRUE(ParseUpdateRequest(CutIntoPieces(wire, n), &ops).ok()) << n;
    ExpectSame(ops, request);
  }
}

TEST(UpdateViewTest, UnknownFieldsAreSkippedAndTheLastOfARepeatedFieldWins) {
  UpdateRequest request;
  UpdateOp* op = request.add_ops();
  op->set_shard("a");
  op->set_ids(Ids({1}));
  op->set_values("12345678");
  // Append to the op (its length grows): field 9 varint, then shard "b", then a range, which
  // replaces the ids as the oneof's last member.
  UpdateOp tail;
  tail.set_shard("b");
  tail.mutable_range()->set_row_end(4);
  const std::string extra = std::string("\x48\x05", 2) + tail.SerializeAsString();
  // Build the op by hand: its original bytes plus `extra`, in one ops field.
  const std::string op_bytes = request.ops(0).SerializeAsString() + extra;
  std::string message = "\x0a";
  message += static_cast<char>(op_bytes.size());
  message += op_bytes;
  message += std::string("\x10\x01", 2);  // UpdateRequest field 2 (unknown): skipped
  std::vector<UpdateOpView> ops;
  ASSERT_TRUE(ParseUpdateRequest({message}, &ops).ok());
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].shard(), "b");
  EXPECT_FALSE(ops[0].sparse);
  EXPECT_EQ(ops[0].range.row_end(), 4);
  EXPECT_EQ(JoinPieces(ops[0].values), "12345678");
  // As protobuf itself reads it.
  UpdateRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(message));
  EXPECT_EQ(parsed.ops(0).shard(), "b");
  EXPECT_EQ(parsed.ops(0).rows_case(), UpdateOp::kRange);
}

TEST(UpdateViewTest, MalformedMessagesAreInvalidArgumentNamingUpdateRequest) {
  const std::string wire = Request().SerializeAsString();
  for (size_t len : {size_t{1}, size_t{5}, wire.size() - 1}) {
    std::vector<UpdateOpView> ops;
    const absl::Status s = ParseUpdateRequest({absl::string_view(wire).substr(0, len)}, &ops);
    ASSERT_FALSE(s.ok()) << len;
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("UpdateRequest"), std::string::npos) << s.message();
  }
  // An end of group with none open.
  std::vector<UpdateOpView> ops;
  const absl::Status s = ParseUpdateRequest({std::string("\x0c", 1)}, &ops);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("UpdateRequest"), std::string::npos) << s.message();
}

TEST(UpdateViewTest, AFieldOfAnotherWireTypeIsUnknownAsProtobufReadsIt) {
  // ops as a varint, an op's shard as a fixed32 and a group in its place: protobuf keeps them as
  // unknown fields, and so does the view.
  const std::string message("\x08\x01\x0a\x0b\x0d\x01\x02\x03\x04\x0b\x08\x01\x0c\x10\x03", 15);
  UpdateRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(message));
  ASSERT_EQ(parsed.ops_size(), 1);
  std::vector<UpdateOpView> ops;
  ASSERT_TRUE(ParseUpdateRequest({message}, &ops).ok());
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].shard_name, "");
  EXPECT_EQ(ops[0].kind, parsed.ops(0).kind());
  EXPECT_EQ(ops[0].kind, UpdateOp::Kind(3));
}

TEST(ValueRowsTest, EveryRowAtOneAddressWithItsBytesWhereverThePiecesAreCut) {
  const int64_t row_bytes = 12;
  std::string values(row_bytes * 9, '\0');
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<char>(i);
  for (size_t n = 1; n <= values.size() + 1; ++n) {
    const std::vector<absl::string_view> pieces = CutIntoPieces(values, n);
    const ValueRows rows(pieces, row_bytes);
    const std::vector<const char*> at = rows.RowAddresses();
    ASSERT_EQ(at.size(), 9u) << n;
    for (int64_t r = 0; r < 9; ++r) {
      EXPECT_EQ(std::string(at[r], row_bytes), values.substr(r * row_bytes, row_bytes))
          << "row " << r << ", pieces of " << n;
    }
    // ForRange covers rows [2, 7) exactly once, in order.
    std::string seen;
    int64_t next = 2;
    rows.ForRange(2, 7, [&](int64_t first, int64_t count, const char* data) {
      EXPECT_EQ(first, next);
      next = first + count;
      seen.append(data, count * row_bytes);
    });
    EXPECT_EQ(next, 7);
    EXPECT_EQ(seen, values.substr(2 * row_bytes, 5 * row_bytes)) << n;
  }
  // Rows within a piece are not copied.
  const ValueRows one({values}, row_bytes);
  ASSERT_EQ(one.runs().size(), 1u);
  EXPECT_EQ(one.runs()[0].data, values.data());
}

}  // namespace
}  // namespace pstrain
