#include "partitioners/sharding.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

// a * b for a, b >= 0, saturating at the int64 maximum.
int64_t SaturatingMul(int64_t a, int64_t b) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (a != 0 && b > kMax / a) return kMax;
  return a * b;
}

}  // namespace

std::vector<int64_t> SplitRows(int64_t num_rows, int num_shards) {
  if (num_shards < 1 || num_rows < 0) return {};
  const int64_t base = num_rows / num_shards;
  const int64_t extras = num_rows % num_shards;
  std::vector<int64_t> rows(num_shards, base);
  for (int64_t i = 0; i < extras; ++i) ++rows[i];
  return rows;
}

ShardLayout::ShardLayout(int64_t num_rows, int num_shards)
    : num_rows_(num_rows),
      num_shards_(num_shards),
      ids_per_shard_(num_rows / num_shards),
      extras_(num_rows % num_shards),
      split_(extras_ * (ids_per_shard_ + 1)),
      divisor_(std::max<int64_t>(ids_per_shard_, 1)) {}

absl::StatusOr<ShardLayout> ShardLayout::Create(int64_t num_rows, int num_shards) {
  if (num_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard layout: num_rows must be >= 0, got ", num_rows));
  }
  if (num_shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard layout: num_shards must be >= 1, got ", num_shards));
  }
  if (num_shards > std::max<int64_t>(num_rows, 1)) {
    return absl::InvalidArgumentError(absl::StrCat("shard layout: ", num_shards,
                                                   " shards for ", num_rows,
                                                   " rows; a shard needs at least one row"));
  }
  return ShardLayout(num_rows, num_shards);
}

std::vector<int64_t> ShardLayout::AllRows() const { return SplitRows(num_rows_, num_shards_); }

absl::StatusOr<std::vector<ShardPlacement>> ShardPlacer::Place(const std::string& name,
                                                               const Shape& shape, DType dtype,
                                                               int num_shards, int num_ps,
                                                               int64_t bytes_per_string) {
  if (name.empty()) return absl::InvalidArgumentError("place: variable name is empty");
  const std::string what = absl::StrCat("place \"", name, "\"");
  absl::Status shape_ok = ValidateShape(shape, what);
  if (!shape_ok.ok()) return shape_ok;
  if (dtype != DType::kFloat32 && dtype != DType::kInt64 && dtype != DType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": invalid dtype ", static_cast<int>(dtype)));
  }
  if (dtype == DType::kString && bytes_per_string < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": bytes_per_string must be >= 1, got ", bytes_per_string));
  }
  if (num_ps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": num_ps must be >= 1, got ", num_ps));
  }
  if (shape.empty() && num_shards != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": a rank-0 variable can't be partitioned, got num_shards=", num_shards));
  }
  const int64_t num_rows = shape.empty() ? 1 : shape[0];
  absl::StatusOr<ShardLayout> layout = ShardLayout::Create(num_rows, num_shards);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", layout.status().message()));
  }
  const int64_t bytes_per_row =
      SaturatingMul(RowWidth(shape), BytesPerElement(dtype, bytes_per_string));

  std::vector<ShardPlacement> placements(num_shards);
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < num_shards; ++i) {
    ShardPlacement& p = placements[i];
    p.name = num_shards > 1 ? absl::StrCat(name, "/part_", i) : name;
    p.shard = i;
    p.row_offset = layout->row_offset(i);
    p.rows = layout->rows(i);
    p.full_shape = shape;
    p.shape = shape;
    if (!p.shape.empty()) p.shape[0] = p.rows;
    p.bytes = SaturatingMul(p.rows, bytes_per_row);
    p.ps = static_cast<int>(next_ % num_ps);
    ++next_;
  }
  return placements;
}

absl::StatusOr<std::vector<int>> ShardPlacer::PlaceKeyed(int num_shards, int num_ps) {
  if (num_shards < 1 || num_ps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("placing ", num_shards, " shard(s) on ", num_ps,
                                                   " ps task(s): both must be at least 1"));
  }
  absl::MutexLock lock(&mu_);
  std::vector<int> ps(num_shards);
  for (int i = 0; i < num_shards; ++i) ps[i] = static_cast<int>(next_++ % num_ps);
  return ps;
}

int64_t ShardPlacer::num_placed() const {
  absl::MutexLock lock(&mu_);
  return next_;
}

}  // namespace pstrain
