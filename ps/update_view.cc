#include "ps/update_view.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/wire_reader.h"

namespace pstrain {
namespace {

constexpr int kVarint = 0;
constexpr int kLengthDelimited = 2;

// The wire type each field of UpdateOp is written with; a known field number with another wire
// type is an unknown field, skipped, as protobuf's own parser does.
int OpWireType(int field) {
  switch (field) {
    case 2:  // kind
    case 6:  // dtype
    case 7:  // read_version
      return kVarint;
    default:  // shard, ids, range, values
      return kLengthDelimited;
  }
}

absl::Status ParseRange(const std::vector<absl::string_view>& pieces, RowRange* range) {
  WireReader reader(&pieces, "UpdateRequest (RowRange)");
  while (!reader.Done()) {
    int field = 0, type = 0;
    RETURN_IF_ERROR(reader.ReadTag(&field, &type));
    if ((field == 1 || field == 2) && type == kVarint) {
      uint64_t v = 0;
      RETURN_IF_ERROR(reader.ReadVarint(&v));
      if (field == 1) {
        range->set_row_begin(static_cast<int64_t>(v));
      } else {
        range->set_row_end(static_cast<int64_t>(v));
      }
    } else {
      RETURN_IF_ERROR(reader.Skip(field, type));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseOp(const std::vector<absl::string_view>& pieces, UpdateOpView* op) {
  WireReader reader(&pieces, "UpdateRequest (UpdateOp)");
  std::vector<absl::string_view> bytes;
  while (!reader.Done()) {
    int field = 0, type = 0;
    RETURN_IF_ERROR(reader.ReadTag(&field, &type));
    uint64_t v = 0;
    if (type != OpWireType(field)) {
      RETURN_IF_ERROR(reader.Skip(field, type));
      continue;
    }
    switch (field) {
      case 1:  // shard
        RETURN_IF_ERROR(reader.ReadString(&op->shard_name));
        break;
      case 2:  // kind
        RETURN_IF_ERROR(reader.ReadVarint(&v));
        op->kind = static_cast<UpdateOp::Kind>(static_cast<int32_t>(v));
        break;
      case 3:  // ids
        RETURN_IF_ERROR(reader.ReadBytes(&bytes));
        op->sparse = true;
        op->range.Clear();
        op->ids_copy.reset();
        if (bytes.size() == 1) {
          op->ids = bytes[0];
        } else {  // cut (or empty): the ids are small next to the values, so copy them
          op->ids_copy = std::make_unique<std::string>();
          for (absl::string_view b : bytes) op->ids_copy->append(b.data(), b.size());
          op->ids = *op->ids_copy;
        }
        break;
      case 4:  // range
        RETURN_IF_ERROR(reader.ReadBytes(&bytes));
        op->sparse = false;
        op->ids = absl::string_view();
        op->ids_copy.reset();
        RETURN_IF_ERROR(ParseRange(bytes, &op->range));
        break;
      case 5:  // values
        RETURN_IF_ERROR(reader.ReadBytes(&op->values));
        op->values_bytes = static_cast<int64_t>(WireReader::SizeOf(op->values));
        break;
      case 6:  // dtype
        RETURN_IF_ERROR(reader.ReadVarint(&v));
        op->dtype = static_cast<DataType>(static_cast<int32_t>(v));
        break;
      case 7:  // read_version
        RETURN_IF_ERROR(reader.ReadVarint(&v));
        op->read_version = static_cast<int64_t>(v);
        break;
      default:
        RETURN_IF_ERROR(reader.Skip(field, type));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseUpdateRequest(const std::vector<absl::string_view>& message,
                                std::vector<UpdateOpView>* ops, int64_t* step,
                                bool* return_rows, bool* return_slots) {
  ops->clear();
  if (step != nullptr) *step = 0;
  if (return_rows != nullptr) *return_rows = false;
  if (return_slots != nullptr) *return_slots = false;
  WireReader reader(&message, "UpdateRequest");
  std::vector<absl::string_view> op_pieces;
  while (!reader.Done()) {
    int field = 0, type = 0;
    RETURN_IF_ERROR(reader.ReadTag(&field, &type));
    if (field == 2 && type == kVarint) {  // step
      uint64_t v = 0;
      RETURN_IF_ERROR(reader.ReadVarint(&v));
      if (step != nullptr) *step = static_cast<int64_t>(v);
      continue;
    }
    if ((field == 3 || field == 4) && type == kVarint) {  // return_rows, return_slots
      uint64_t v = 0;
      RETURN_IF_ERROR(reader.ReadVarint(&v));
      bool* flag = field == 3 ? return_rows : return_slots;
      if (flag != nullptr) *flag = v != 0;
      continue;
    }
    if (field != 1 || type != kLengthDelimited) {
      RETURN_IF_ERROR(reader.Skip(field, type));
      continue;
    }
    RETURN_IF_ERROR(reader.ReadBytes(&op_pieces));
    RETURN_IF_ERROR(ParseOp(op_pieces, &ops->emplace_back()));
  }
  return absl::OkStatus();
}

std::vector<UpdateOpView> ViewsOf(const UpdateRequest& request) {
  std::vector<UpdateOpView> views(request.ops_size());
  for (int i = 0; i < request.ops_size(); ++i) {
    const UpdateOp& op = request.ops(i);
    UpdateOpView& v = views[i];
    v.shard_name = op.shard();
    v.kind = op.kind();
    v.dtype = op.dtype();
    v.read_version = op.read_version();
    v.sparse = op.rows_case() == UpdateOp::kIds;
    if (v.sparse) {
      v.ids = op.ids();
    } else {
      v.range = op.range();
    }
    if (!op.values().empty()) v.values.push_back(op.values());
    v.values_bytes = static_cast<int64_t>(op.values().size());
  }
  return views;
}

ValueRows::ValueRows(const std::vector<absl::string_view>& pieces, int64_t row_bytes)
    : row_bytes_(row_bytes) {
  if (row_bytes <= 0) return;
  cut_rows_.reserve(pieces.size() * static_cast<size_t>(row_bytes));  // addresses stay put
  int64_t row = 0;
  size_t piece = 0, at = 0;  // the next unread byte
  while (piece < pieces.size()) {
    const absl::string_view p = pieces[piece];
    const int64_t whole = static_cast<int64_t>(p.size() - at) / row_bytes;
    if (whole > 0) {
      runs_.push_back({row, whole, p.data() + at});
      row += whole;
      at += static_cast<size_t>(whole * row_bytes);
    }
    if (at == p.size()) {
      ++piece;
      at = 0;
      continue;
    }
    // A row cut at this piece's end: gather it from the pieces that follow.
    const size_t start = cut_rows_.size();
    int64_t need = row_bytes;
    while (need > 0 && piece < pieces.size()) {
      const absl::string_view q = pieces[piece];
      const size_t take = std::min<size_t>(static_cast<size_t>(need), q.size() - at);
      cut_rows_.append(q.data() + at, take);
      need -= static_cast<int64_t>(take);
      at += take;
      if (at == q.size()) {
        ++piece;
        at = 0;
      }
    }
    if (need > 0) {  // a partial last row (callers validate sizes first): leave it out
      cut_rows_.resize(start);
      break;
    }
    runs_.push_back({row, 1, cut_rows_.data() + start});
    ++row;
  }
}

std::vector<const char*> ValueRows::RowAddresses() const {
  int64_t rows = 0;
  for (const Run& run : runs_) rows += run.count;
  // Sized once: a 16,384-row push grew it 15 times, ~2.5% of a push's time on the ps.
  std::vector<const char*> out(static_cast<size_t>(rows));
  const char** next = out.data();
  for (const Run& run : runs_) {
    for (int64_t i = 0; i < run.count; ++i) *next++ = run.data + i * row_bytes_;
  }
  return out;
}

}  // namespace pstrain
