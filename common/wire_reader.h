// Reads protobuf's wire format from a message held in pieces (gRPC's received slices) without
// copying it: a length-delimited field comes back as the pieces it spans. The ps parses its big
// requests and replies this way so that megabytes of rows are not first copied into strings.
#ifndef PSTRAIN_COMMON_WIRE_READER_H_
#define PSTRAIN_COMMON_WIRE_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pstrain {

class WireReader {
 public:
  // `pieces` must outlive the reader and the views it returns. `what` names the message in errors.
  WireReader(const std::vector<absl::string_view>* pieces, std::string what)
      : pieces_(pieces), what_(std::move(what)) {}

  // Whether the message has no more fields.
  bool Done();
  // The next field's number and wire type. Errors: kInvalidArgument on a cut or bad tag.
  absl::Status ReadTag(int* field, int* wire_type);
  // A varint field's value (wire type 0).
  absl::Status ReadVarint(uint64_t* value);
  // A length-delimited field (wire type 2) as the pieces it spans, in order (none if empty).
  absl::Status ReadBytes(std::vector<absl::string_view>* out);
  // The same, copied into one string (for short fields such as names).
  absl::Status ReadString(std::string* out);
  // Skips field `field` of `wire_type` (an unknown field, as protobuf's parser does): a group
  // (wire type 3) up to its matching end, nested at most kMaxGroupDepth deep. An end-group tag
  // (wire type 4) with no group open, and wire types 6 and 7, are errors.
  absl::Status Skip(int field, int wire_type);

  // Protobuf's default recursion limit.
  static constexpr int kMaxGroupDepth = 100;

  // The total size of `pieces`.
  static size_t SizeOf(const std::vector<absl::string_view>& pieces);

 private:
  bool NextPiece();
  absl::Status Error(absl::string_view problem) const;
  absl::Status SkipFixed(uint64_t bytes);
  absl::Status SkipGroup(int field, int depth);

  const std::vector<absl::string_view>* pieces_;
  std::string what_;
  size_t piece_ = 0;  // the cursor: byte `at_` of piece `piece_`
  size_t at_ = 0;
  size_t offset_ = 0;  // bytes read so far, for errors
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_WIRE_READER_H_
