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
  // As protobuf reads a tag: a varint of at most 5 bytes, kept to its low 32 bits.
  uint32_t tag = 0;
  for (int i = 0;; ++i) {
    if (i == 5) return Error("a tag longer than 5 bytes");
    if (!NextPiece()) return Error("a tag cut short");
    const uint8_t b = static_cast<uint8_t>((*pieces_)[piece_][at_++]);
    ++offset_;
    tag |= static_cast<uint32_t>(b & 0x7f) << (7 * i);
    if ((b & 0x80) == 0) break;
  }
  if ((tag >> 3) == 0) return Error("field number 0");
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

absl::Status WireReader::SkipFixed(uint64_t bytes) {
  while (bytes > 0) {
    if (!NextPiece()) return Error("a fixed-size field cut short");
    const size_t take =
        static_cast<size_t>(std::min<uint64_t>(bytes, (*pieces_)[piece_].size() - at_));
    at_ += take;
    offset_ += take;
    bytes -= take;
  }
  return absl::OkStatus();
}

absl::Status WireReader::SkipGroup(int field, int depth) {
  if (depth > kMaxGroupDepth) {
    return Error(absl::StrCat("groups nested more than ", kMaxGroupDepth, " deep"));
  }
  while (true) {
    if (Done()) return Error(absl::StrCat("group ", field, " not closed"));
    int inner = 0, type = 0;
    if (absl::Status s = ReadTag(&inner, &type); !s.ok()) return s;
    if (type == 4) {
      if (inner != field) {
        return Error(absl::StrCat("group ", field, " closed by an end of group ", inner));
      }
      return absl::OkStatus();
    }
    absl::Status s = type == 3 ? SkipGroup(inner, depth + 1) : Skip(inner, type);
    if (!s.ok()) return s;
  }
}

absl::Status WireReader::Skip(int field, int wire_type) {
  uint64_t ignored_varint = 0;
  std::vector<absl::string_view> ignored_bytes;
  switch (wire_type) {
    case 0:
      return ReadVarint(&ignored_varint);
    case 1:
      return SkipFixed(8);
    case 2:
      return ReadBytes(&ignored_bytes);
    case 3:
      return SkipGroup(field, 1);
    case 4:
      return Error(absl::StrCat("an end of group ", field, " with no group open"));
    case 5:
      return SkipFixed(4);
    default:
      return Error(absl::StrCat("unsupported wire type ", wire_type));
  }
}

size_t WireReader::SizeOf(const std::vector<absl::string_view>& pieces) {
  size_t n = 0;
  for (absl::string_view p : pieces) n += p.size();
  return n;
}

}  // namespace pstrain
