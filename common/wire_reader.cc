#include "common/wire_reader.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pstrain {

bool WireReader::NextPiece() {
  while (piece_ < pieces_->size() && at_ == (*pieces_)[piece_].size()) {
    ++piece_;
    at_ = 0;
  }
  return piece_ < pieces_->size();
}

bool WireReader::Done() { return !NextPiece(); }

absl::Status WireReader::Error(absl::string_view problem) const {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed ", what_, ": ", problem, " at byte ", offset_));
}

absl::Status WireReader::ReadVarint(uint64_t* value) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    if (shift > 63) return Error("a varint longer than 10 bytes");
    if (!NextPiece()) return Error("a varint cut short");
    const uint8_t b = static_cast<uint8_t>((*pieces_)[piece_][at_++]);
    ++offset_;
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) break;
  }
  *value = v;
  return absl::OkStatus();
}

absl::Status WireReader::ReadTag(int* field, int* wire_type) {
  uint64_t tag = 0;
  if (absl::Status s = ReadVarint(&tag); !s.ok()) return s;
  if ((tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) {
    return Error(absl::StrCat("field number ", tag >> 3, " out of range"));
  }
  *field = static_cast<int>(tag >> 3);
  *wire_type = static_cast<int>(tag & 7);
  return absl::OkStatus();
}

absl::Status WireReader::ReadBytes(std::vector<absl::string_view>* out) {
  out->clear();
  uint64_t length = 0;
  if (absl::Status s = ReadVarint(&length); !s.ok()) return s;
  while (length > 0) {
    if (!NextPiece()) return Error(absl::StrCat("a field cut short by ", length, " bytes"));
    const absl::string_view piece = (*pieces_)[piece_];
    const size_t take = static_cast<size_t>(std::min<uint64_t>(length, piece.size() - at_));
    out->push_back(piece.substr(at_, take));
    at_ += take;
    offset_ += take;
    length -= take;
  }
  return absl::OkStatus();
}

absl::Status WireReader::ReadString(std::string* out) {
  std::vector<absl::string_view> pieces;
  if (absl::Status s = ReadBytes(&pieces); !s.ok()) return s;
  out->clear();
  for (absl::string_view p : pieces) out->append(p.data(), p.size());
  return absl::OkStatus();
}

absl::Status WireReader::Skip(int wire_type) {
  uint64_t skip = 0;
  switch (wire_type) {
    case 0:
      return ReadVarint(&skip);
    case 1:
      skip = 8;
      break;
    case 2: {
      std::vector<absl::string_view> ignored;
      return ReadBytes(&ignored);
    }
    case 5:
      skip = 4;
      break;
    default:
      return Error(absl::StrCat("unsupported wire type ", wire_type));
  }
  while (skip > 0) {
    if (!NextPiece()) return Error("a fixed-size field cut short");
    const size_t take =
        static_cast<size_t>(std::min<uint64_t>(skip, (*pieces_)[piece_].size() - at_));
    at_ += take;
    offset_ += take;
    skip -= take;
  }
  return absl::OkStatus();
}

size_t WireReader::SizeOf(const std::vector<absl::string_view>& pieces) {
  size_t n = 0;
  for (absl::string_view p : pieces) n += p.size();
  return n;
}

}  // namespace pstrain
