// An UpdateOp as the ps applies it: the small fields parsed, the rows' bytes left where they
// arrived. The gRPC handler parses UpdateRequest's wire format straight from the received slices
// (ParseUpdateRequest), so a push's megabytes of gradients are never copied into protobuf strings;
// an UpdateRequest already parsed (in-process callers, tests) is viewed as it is (ViewsOf).
#ifndef PSTRAIN_PS_UPDATE_VIEW_H_
#define PSTRAIN_PS_UPDATE_VIEW_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/ps_service.pb.h"

namespace pstrain {

struct UpdateOpView {
  const std::string& shard() const { return shard_name; }  // as UpdateOp's, for lookups by name

  std::string shard_name;
  UpdateOp::Kind kind = UpdateOp::ASSIGN;
  DataType dtype = static_cast<DataType>(0);
  bool sparse = false;    // `ids` names the rows; else `range` does (both 0: the whole shard)
  absl::string_view ids;  // int64 global rows, in one piece (copied into `*ids_copy` if cut)
  RowRange range;
  std::vector<absl::string_view> values;  // the values' bytes, in order, in one or more pieces
  int64_t values_bytes = 0;
  int64_t read_version = 0;  // UpdateOp.read_version
  // Ids cut between pieces, joined. On the heap, so that `ids` stays right when the view moves (a
  // short std::string keeps its bytes inside the object, and a vector of views moves them as it
  // grows); views are move-only for the same reason.
  std::unique_ptr<std::string> ids_copy;
};

// Parses UpdateRequest's wire format from `message` (in pieces, which must outlive `ops`): one view
// per op, in order. As protobuf's own parser: unknown fields are skipped, and of a field given
// twice the last wins. Errors: kInvalidArgument naming what is malformed.
// `step`, `return_rows` and `return_slots` (may be null) get UpdateRequest's fields of those
// names.
absl::Status ParseUpdateRequest(const std::vector<absl::string_view>& message,
                                std::vector<UpdateOpView>* ops, int64_t* step = nullptr,
                                bool* return_rows = nullptr, bool* return_slots = nullptr);

// Views of a parsed request's ops (each bytes field one piece); `request` must outlive them.
std::vector<UpdateOpView> ViewsOf(const UpdateRequest& request);

// The rows of an op's values, `row_bytes` each, as runs of whole rows that are contiguous in one
// piece. A row cut between two pieces is copied whole into a buffer of its own (one row per
// boundary at most), so every row is at one address. Rows may be at any alignment.
class ValueRows {
 public:
  struct Run {
    int64_t first;  // the run's first row
    int64_t count;  // its rows
    const char* data;
  };
  ValueRows(const std::vector<absl::string_view>& pieces, int64_t row_bytes);

  const std::vector<Run>& runs() const { return runs_; }
  // Calls fn(row, count, data) for the runs' parts within rows [begin, end), in order.
  template <typename Fn>
  void ForRange(int64_t begin, int64_t end, Fn fn) const;
  // The address of each row, in order.
  std::vector<const char*> RowAddresses() const;

 private:
  int64_t row_bytes_;
  std::vector<Run> runs_;
  std::string cut_rows_;  // the rows cut between pieces, copied
};

template <typename Fn>
void ValueRows::ForRange(int64_t begin, int64_t end, Fn fn) const {
  // The first run that ends after `begin`.
  size_t lo = 0, hi = runs_.size();
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (runs_[mid].first + runs_[mid].count <= begin) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  for (size_t r = lo; r < runs_.size() && runs_[r].first < end; ++r) {
    const Run& run = runs_[r];
    const int64_t b = std::max(begin, run.first);
    const int64_t e = std::min(end, run.first + run.count);
    if (b < e) fn(b, e - b, run.data + (b - run.first) * row_bytes_);
  }
}

}  // namespace pstrain

#endif  // PSTRAIN_PS_UPDATE_VIEW_H_
