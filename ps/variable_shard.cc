#include "ps/variable_shard.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <new>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/id_index.h"
#include "common/status_macros.h"
#include "ps/initializers.h"

namespace pstrain {
namespace {

inline int64_t LoadId(const char* p) {
  int64_t id;
  std::memcpy(&id, p, sizeof(id));
  return id;
}

int64_t TotalRows(const VariableShardDef& def) {
  return def.full_shape_size() == 0 ? 1 : def.full_shape(0);
}

const char* KindName(UpdateOp::Kind kind) {
  switch (kind) {
    case UpdateOp::ASSIGN: return "assign";
    case UpdateOp::ASSIGN_ADD: return "assign_add";
    case UpdateOp::APPLY_GRADIENT: return "apply_gradient";
    default: return "unknown";
  }
}

}  // namespace

VariableShard::VariableShard(VariableShardDef def)
    : def_(std::move(def)) {}

namespace {

// Sparse loops prefetch rows (with their slots' rows) this many 64-byte lines ahead: enough
// misses in flight to cover this machine's memory latency. Measured on 64-byte rows
// (ps_bench's breakdown, alternating builds): lookups, one line a row, gathered 16 rows ahead ran
// 91-101 M rows/s, 32 ahead 107-125, 64 ahead 124-145, 128 ahead 124-142; Adagrad applies, two
// lines a row, best at 32 rows ahead. So a distance in lines, not rows.
constexpr int64_t kPrefetchLines = 64;

// Slot s's table is staggered by (s + 1) times this many 64-byte lines: a shard's tables (values
// unstaggered, up to 3 slots) then all differ modulo 4 KiB and modulo 2 MiB.
constexpr size_t kSlotStaggerLines = 67;

// A request's rows are split into pieces of at least this many for the store's pool (below that,
// waking a thread costs more than it saves: 4096 rows are ~100 us of work).
constexpr int64_t kMinRowsPerPiece = 4096;
// A streamed lookup or read (RowsReady) reports its rows in pieces of about this many bytes.
constexpr int64_t kStreamPieceBytes = 128 << 10;

int64_t Pieces(ThreadPool* pool, int64_t rows) {
  return pool == nullptr ? 1 : std::max<int64_t>(1, rows / kMinRowsPerPiece);
}

}  // namespace

template <typename Fn>
void VariableShard::ForEachRow(absl::string_view ids, int64_t begin, int64_t end, bool with_slots,
                               Fn fn) const {
  const int64_t offset = row_offset();
  auto row_of = [&](int64_t i) { return LoadId(ids.data() + 8 * i) - offset; };
  const int64_t lines = std::max<int64_t>(1, (row_bytes_ + 63) / 64) *
                        (with_slots ? 1 + static_cast<int64_t>(slots_.size()) : 1);
  const int64_t ahead = std::max<int64_t>(2, kPrefetchLines / lines);  // rows
  for (int64_t i = begin; i < std::min(end, begin + ahead); ++i) {
    Prefetch(row_of(i), with_slots);
  }
  for (int64_t i = begin; i < end; ++i) {
    if (i + ahead < end) Prefetch(row_of(i + ahead), with_slots);
    fn(i, row_of(i));
  }
}

template <typename Fn>
void VariableShard::ForEachRowLocked(absl::string_view ids, bool write, bool with_slots,
                                     ThreadPool* pool, Fn fn) const {
  const int64_t n = ids.size() / 8;
  RowLockBypass::Batch batch(&bypass_, write);
  ParallelRanges(pool, n, Pieces(pool, n), [&](int64_t begin, int64_t end) {
    RowLockBypass::Piece piece(&batch);
    ForEachRow(ids, begin, end, with_slots, [&](int64_t i, int64_t row) {
      piece.Run(locks_.get(), row, row_bytes_, [&] { fn(i, row); });
    });
  });
}

absl::StatusOr<std::unique_ptr<VariableShard>> VariableShard::Create(const VariableShardDef& def,
                                                                     bool initialize,
                                                                     MemoryBudget* budget) {
  const std::string who = absl::StrCat("shard \"", def.name(), "\"");
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", why));
  };
  if (def.name().empty()) return absl::InvalidArgumentError("shard definition with an empty name");
  if (def.dtype() != DT_FLOAT32 && def.dtype() != DT_INT64) {
    return invalid(absl::StrCat("dtype ", DataType_Name(def.dtype()),
                                " is not supported (float32, int64)"));
  }
  int64_t width = 1;
  for (int i = 0; i < def.full_shape_size(); ++i) {
    const int64_t d = def.full_shape(i);
    if (d < 0) return invalid(absl::StrCat("full_shape dim ", i, " is negative (", d, ")"));
    if (i > 0) {
      if (d != 0 && width > std::numeric_limits<int32_t>::max() / d) {
        return invalid("row is too wide");
      }
      width *= d;
    }
  }
  const int64_t total_rows = TotalRows(def);
  if (def.row_offset() < 0 || def.num_rows() < 0 ||
      def.row_offset() > total_rows - def.num_rows()) {
    return invalid(absl::StrCat("rows [", def.row_offset(), ", ",
                                def.row_offset() + def.num_rows(), ") are outside the variable's ",
                                total_rows, " rows"));
  }
  if (def.num_shards() < 0 || def.shard_index() < 0 ||
      (def.num_shards() > 0 && def.shard_index() >= def.num_shards())) {
    return invalid(absl::StrCat("shard_index ", def.shard_index(), " out of range for ",
                                def.num_shards(), " shards"));
  }
  RETURN_IF_ERROR(ValidateInitializer(def.initializer()));
  if (def.dtype() == DT_INT64 && def.initializer().kind() != InitializerDef::ZEROS &&
      def.initializer().kind() != InitializerDef::CONSTANT) {
    return invalid("int64 variables take only zeros or constant initializers");
  }

  std::unique_ptr<VariableShard> shard(new VariableShard(def));
  shard->width_ = width;
  shard->row_bytes_ = width * (def.dtype() == DT_FLOAT32 ? 4 : 8);
  shard->locks_ = std::make_unique<RowLocks>(std::max<int64_t>(def.num_rows(), 1), shard->row_bytes_);
  if (def.has_optimizer()) {
    if (def.dtype() != DT_FLOAT32) return invalid("only float32 variables can have an optimizer");
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = Optimizer::Create(def.optimizer());
    if (!optimizer.ok()) return invalid(optimizer.status().message());
    shard->optimizer_ = std::move(*optimizer);
    *shard->def_.mutable_optimizer() = shard->optimizer_->def();
  }

  const int64_t elements = def.num_rows() * width;
  if (width != 0 && def.num_rows() > std::numeric_limits<int64_t>::max() / 8 / width) {
    return invalid("too large");
  }
  const int64_t bytes = def.num_rows() * shard->row_bytes_;
  const int num_slots = shard->optimizer_ == nullptr ? 0 : shard->optimizer_->num_slots();
  shard->reservation_ = BudgetReservation(budget);
  RETURN_IF_ERROR(shard->reservation_.Add(bytes + num_slots * elements * 4, who));
  shard->values_ = TableMemory(static_cast<size_t>(bytes));
  if (shard->values_.data() == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(who, ": out of memory for ", def.num_rows(), " rows of ", width));
  }
  const int64_t first_element = def.row_offset() * width;
  if (!initialize) {
    // The caller fills every row and slot itself (a restore): skip the work.
  } else if (def.dtype() == DT_FLOAT32) {
    InitializeFloat(def.initializer(), first_element, elements,
                    reinterpret_cast<float*>(shard->values_.data()));
  } else {
    InitializeInt64(def.initializer(), first_element, elements,
                    reinterpret_cast<int64_t*>(shard->values_.data()));
  }
  if (shard->optimizer_ != nullptr) {
    for (int s = 0; s < shard->optimizer_->num_slots(); ++s) {
      // Each slot table starts some cache lines after the values' and the other slots' (see
      // TableMemory): row i of each is then not on the same cache sets and memory banks.
      TableMemory slot(static_cast<size_t>(elements) * sizeof(float),
                       /*stagger_lines=*/kSlotStaggerLines * (s + 1));
      if (slot.data() == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat(who, ": out of memory for slots"));
      }
      const float init = shard->optimizer_->slot_initial_value(s);
      float* f = reinterpret_cast<float*>(slot.data());
      if (initialize && init != 0.0f) {
        for (int64_t i = 0; i < elements; ++i) f[i] = init;
      }
      shard->slots_.push_back(std::move(slot));
    }
  }
  return shard;
}

absl::Status VariableShard::ValidateIds(absl::string_view ids, absl::string_view what) const {
  if (ids.size() % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("shard \"", name(), "\": ", what, " ids are ",
                                                   ids.size(), " bytes, not whole int64s"));
  }
  const int64_t begin = row_offset();
  const int64_t end = row_offset() + num_rows();
  for (size_t i = 0; i < ids.size(); i += 8) {
    const int64_t id = LoadId(ids.data() + i);
    if (id < begin || id >= end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard \"", name(), "\": ", what, " id ", id, " (position ", i / 8,
          ") is out of range; this shard holds rows [", begin, ", ", end, ") of variable \"",
          def_.variable(), "\" with ", TotalRows(def_), " rows"));
    }
  }
  return absl::OkStatus();
}

absl::Status VariableShard::ValidateLookup(absl::string_view ids) const {
  return ValidateIds(ids, "lookup");
}

void VariableShard::Lookup(absl::string_view ids, char* out, ThreadPool* pool,
                           const RowsReady& ready) const {
  const int64_t n = ids.size() / 8;
  const char* values = values_.data();
  auto copy = [&](int64_t i, int64_t row) {
    std::memcpy(out + i * row_bytes_, values + row * row_bytes_, row_bytes_);
  };
  if (!ready || n == 0 || row_bytes_ == 0) {
    ForEachRowLocked(ids, /*write=*/false, /*with_slots=*/false, pool, copy);
    return;
  }
  // Streamed: small pieces claimed in order by every thread; after each of its own, the calling
  // thread reports the finished prefix (its report may send it: the pool's threads go on
  // gathering meanwhile).
  const int64_t rows_per_piece = std::max<int64_t>(1, kStreamPieceBytes / row_bytes_);
  const int64_t pieces = (n + rows_per_piece - 1) / rows_per_piece;
  std::unique_ptr<std::atomic<bool>[]> finished(new std::atomic<bool>[pieces]);
  for (int64_t p = 0; p < pieces; ++p) finished[p].store(false, std::memory_order_relaxed);
  const std::thread::id caller = std::this_thread::get_id();
  int64_t prefix = 0;  // pieces known finished, in order (the calling thread's)
  RowLockBypass::Batch batch(&bypass_, /*write=*/false);
  ParallelFor(pool, pieces, [&](int64_t p) {
    {
      RowLockBypass::Piece piece(&batch);
      ForEachRow(ids, p * rows_per_piece, std::min(n, (p + 1) * rows_per_piece),
                 /*with_slots=*/false, [&](int64_t i, int64_t row) {
                   piece.Run(locks_.get(), row, row_bytes_, [&] { copy(i, row); });
                 });
    }
    finished[p].store(true, std::memory_order_release);
    if (std::this_thread::get_id() != caller) return;
    const int64_t before = prefix;
    while (prefix < pieces && finished[prefix].load(std::memory_order_acquire)) ++prefix;
    if (prefix > before) ready(std::min(n, prefix * rows_per_piece));
  });
}

absl::Status VariableShard::ValidateRange(const RowRange& range, int64_t* begin,
                                          int64_t* end) const {
  if (range.row_begin() == 0 && range.row_end() == 0) {
    *begin = 0;
    *end = num_rows();
    return absl::OkStatus();
  }
  const int64_t lo = row_offset();
  const int64_t hi = row_offset() + num_rows();
  if (range.row_begin() < lo || range.row_end() > hi || range.row_begin() > range.row_end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard \"", name(), "\": row range [", range.row_begin(), ", ",
                     range.row_end(), ") is not within this shard's rows [", lo, ", ", hi, ")"));
  }
  *begin = range.row_begin() - lo;
  *end = range.row_end() - lo;
  return absl::OkStatus();
}

absl::Status VariableShard::ValidateRead(const RowRange& range, int64_t* begin,
                                         int64_t* end) const {
  return ValidateRange(range, begin, end);
}

void VariableShard::Read(int64_t begin, int64_t end, char* out, const RowsReady& ready) const {
  const char* values = values_.data();
  const int64_t block = locks_->rows_per_block();
  RowLockBypass::Batch batch(&bypass_, /*writer=*/false);
  RowLockBypass::Piece piece(&batch);
  int64_t reported = begin;  // rows before it were reported ready
  for (int64_t row = begin; row < end;) {
    const int64_t stop = std::min(end, (row / block + 1) * block);  // to the end of row's block
    piece.Run(locks_.get(), row, (stop - row) * row_bytes_, [&] {
      std::memcpy(out + (row - begin) * row_bytes_, values + row * row_bytes_,
                  (stop - row) * row_bytes_);
    });
    row = stop;
    if (ready && (row - reported) * row_bytes_ >= kStreamPieceBytes) {
      ready(row - begin);
      reported = row;
    }
  }
}

void VariableShard::ReadSlots(int64_t begin, int64_t end, char* out) const {
  const int64_t block = locks_->rows_per_block();
  const int64_t slot_bytes = (end - begin) * row_bytes_;
  RowLockBypass::Batch batch(&bypass_, /*writer=*/false);
  RowLockBypass::Piece piece(&batch);
  for (int64_t row = begin; row < end;) {
    const int64_t stop = std::min(end, (row / block + 1) * block);  // to the end of row's block
    piece.Run(locks_.get(), row, (stop - row) * row_bytes_ * num_slots(), [&] {
      for (int k = 0; k < num_slots(); ++k) {
        std::memcpy(out + k * slot_bytes + (row - begin) * row_bytes_,
                    reinterpret_cast<const char*>(Slot(k)) + row * row_bytes_,
                    (stop - row) * row_bytes_);
      }
    });
    row = stop;
  }
}

absl::Status VariableShard::ValidateUpdate(const UpdateOpView& op) const {
  const std::string who = absl::StrCat("shard \"", name(), "\": ", KindName(op.kind));
  if (op.kind != UpdateOp::ASSIGN && op.kind != UpdateOp::ASSIGN_ADD &&
      op.kind != UpdateOp::APPLY_GRADIENT) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard \"", name(), "\": unknown update kind ", static_cast<int>(op.kind)));
  }
  if (op.kind == UpdateOp::APPLY_GRADIENT && optimizer_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": the variable has no optimizer (", DataType_Name(dtype()), ")"));
  }
  if (op.dtype != dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": values are ", DataType_Name(op.dtype),
                                                   " but the variable is ",
                                                   DataType_Name(dtype())));
  }
  if (row_bytes_ == 0) return absl::OkStatus();  // rows of zero width: nothing to check
  if (op.values_bytes % row_bytes_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": values are ", op.values_bytes, " bytes, not a whole number of rows of ", width_,
        " ", dtype() == DT_FLOAT32 ? "float32" : "int64", " (", row_bytes_,
        " bytes); wrong dtype or width?"));
  }
  const int64_t value_rows = op.values_bytes / row_bytes_;
  int64_t target_rows = 0;
  if (op.sparse) {
    RETURN_IF_ERROR(ValidateIds(op.ids, KindName(op.kind)));
    target_rows = op.ids.size() / 8;
  } else {
    int64_t begin = 0, end = 0;
    RETURN_IF_ERROR(ValidateRange(op.range, &begin, &end));
    target_rows = end - begin;
  }
  if (value_rows != target_rows) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", value_rows, " rows of values for ",
                                                   target_rows, " target rows"));
  }
  return absl::OkStatus();
}

void VariableShard::UpdateRowLocked(UpdateOp::Kind kind, int64_t row, const char* src,
                                    const StepScalars& scalars) {
  char* dst = values_.data() + row * row_bytes_;
  switch (kind) {
    case UpdateOp::ASSIGN:
      std::memcpy(dst, src, row_bytes_);
      return;
    case UpdateOp::ASSIGN_ADD:
      if (dtype() == DT_FLOAT32) {
        float* d = reinterpret_cast<float*>(dst);
        for (int64_t i = 0; i < width_; ++i) {
          float v;
          std::memcpy(&v, src + 4 * i, 4);
          d[i] += v;
        }
      } else {
        int64_t* d = reinterpret_cast<int64_t*>(dst);
        for (int64_t i = 0; i < width_; ++i) d[i] += LoadId(src + 8 * i);
      }
      return;
    case UpdateOp::APPLY_GRADIENT: {
      float* slot_rows[4];
      for (size_t s = 0; s < slots_.size(); ++s) {
        slot_rows[s] = Slot(static_cast<int>(s)) + row * width_;
      }
      optimizer_->ApplyRow(reinterpret_cast<float*>(dst), slot_rows,
                           reinterpret_cast<const UnalignedFloat*>(src), width_, scalars);
      return;
    }
    default:
      return;
  }
}

StepScalars VariableShard::NextScalars(int64_t step, bool dense, int64_t read_version) {
  const int64_t t = apply_count_.fetch_add(1) + 1;
  StepScalars scalars = optimizer_->Prepare(t, step > 0 ? step - 1 : t - 1);
  if (!dense) {
    // A sparse gradient touches a few rows: the shard's count of applies says nothing of how
    // stale its rows were. Only its read is dropped.
    staleness_.Forget(step);
    return scalars;
  }
  const int64_t staleness = staleness_.OnApply(step, t - 1, read_version);
  scalars.lr *=
      static_cast<float>(StalenessFactor(def_.optimizer().staleness_scaling(), staleness));
  return scalars;
}

void VariableShard::ApplySparseGradient(absl::string_view ids, const char* const* grads,
                                        ThreadPool* pool, int64_t step) {
  const int64_t n = ids.size() / 8;
  const StepScalars scalars = NextScalars(step, /*dense=*/false);
  // Sum repeated ids first (as TF's sparse apply does): the optimizer sees each row once. Position
  // i applies its own row of the request, except at the few positions in `overrides`, sorted by
  // position: the first position of a repeated id applies the sum (in `sums`), later ones nothing.
  struct Override {
    int64_t pos;
    const float* grad;  // null: skip
  };
  std::vector<Override> overrides;
  std::vector<float> sums;  // the summed rows, width_ floats each
  const std::vector<RepeatFinder::Repeat>& repeats = ThreadRepeatFinder().Find(ids.data(), n);
  if (!repeats.empty()) {
    absl::flat_hash_map<int64_t, int64_t> sum_of;  // first position -> its row in `sums`
    for (const RepeatFinder::Repeat& r : repeats) sum_of.emplace(r.first, 0);
    sums.resize(sum_of.size() * width_);
    int64_t next = 0;
    for (auto& [first, row] : sum_of) {
      row = next++;
      std::memcpy(sums.data() + row * width_, grads[first], row_bytes_);
      overrides.push_back({first, sums.data() + row * width_});
    }
    for (const RepeatFinder::Repeat& r : repeats) {
      float* sum = sums.data() + sum_of[r.first] * width_;
      const UnalignedFloat* g = reinterpret_cast<const UnalignedFloat*>(grads[r.later]);
      for (int64_t k = 0; k < width_; ++k) sum[k] += g[k];
      overrides.push_back({r.later, nullptr});
    }
    std::sort(overrides.begin(), overrides.end(),
              [](const Override& a, const Override& b) { return a.pos < b.pos; });
  }
  // Positions with an override, as a bitmap: the loop below checks one bit per position.
  std::vector<uint64_t> overridden(overrides.empty() ? 0 : (n + 63) / 64);
  for (const Override& o : overrides) overridden[o.pos / 64] |= uint64_t{1} << (o.pos % 64);
  const int num_slots = static_cast<int>(slots_.size());
  float* slot_base[4];
  for (int s = 0; s < num_slots; ++s) slot_base[s] = Slot(s);
  float* const values = reinterpret_cast<float*>(values_.data());
  // The positions now name distinct rows: pieces of them can run at once.
  ForEachRowLocked(ids, /*write=*/true, /*with_slots=*/true, pool, [&](int64_t i, int64_t row) {
    const UnalignedFloat* g = reinterpret_cast<const UnalignedFloat*>(grads[i]);
    if (!overridden.empty() && ((overridden[i / 64] >> (i % 64)) & 1) != 0) {
      g = std::lower_bound(overrides.begin(), overrides.end(), i,
                           [](const Override& o, int64_t pos) { return o.pos < pos; })
              ->grad;
      if (g == nullptr) return;
    }
    float* slot_rows[4];
    for (int s = 0; s < num_slots; ++s) slot_rows[s] = slot_base[s] + row * width_;
    optimizer_->ApplyRow(values + row * width_, slot_rows, g, width_, scalars);
  });
}

void VariableShard::Update(const UpdateOpView& op, ThreadPool* pool, int64_t step) {
  if (row_bytes_ == 0) {  // rows of zero width: nothing to write, but the gradient counts
    if (op.kind == UpdateOp::APPLY_GRADIENT) apply_count_.fetch_add(1);
    return;
  }
  // The values' rows where they arrived: runs of whole rows, rows cut between pieces copied.
  const ValueRows rows(op.values, row_bytes_);
  if (op.sparse) {
    const std::vector<const char*> src = rows.RowAddresses();
    if (op.kind == UpdateOp::APPLY_GRADIENT) {
      ApplySparseGradient(op.ids, src.data(), pool, step);
      return;
    }
    // In order, on this thread: with repeated ids, the last assign wins.
    ForEachRowLocked(op.ids, /*write=*/true, /*with_slots=*/false, /*pool=*/nullptr,
                     [&](int64_t i, int64_t row) {
                       UpdateRowLocked(op.kind, row, src[i], StepScalars());
                     });
    return;
  }
  int64_t begin = 0, end = 0;
  ValidateRange(op.range, &begin, &end).IgnoreError();  // validated by ValidateUpdate
  StepScalars scalars;
  if (op.kind == UpdateOp::APPLY_GRADIENT) {
    scalars = NextScalars(step, /*dense=*/true, op.read_version);
  }
  // Pieces of the range may run at once. A range that runs alone on the shard (it waits its turn
  // behind another writer: RowLockBypass) skips the row locks (its pieces write distinct rows) and
  // is applied in spans of kCheckBytes, each one call of the optimizer; otherwise (a reader came)
  // one lock per block of rows (the blocks' locks keep a block that two pieces share whole). A
  // 1M-float SGD push, 16,384 blocks of 64 floats, took a locked exchange per block before.
  RowLockBypass::Batch batch(&bypass_, /*writer=*/true);
  const int64_t block = locks_->rows_per_block();
  const int64_t span_rows =
      std::max<int64_t>(block, RowLockBypass::kCheckBytes / row_bytes_ / block * block);
  const int64_t piece_rows =
      std::max<int64_t>(1, kMinRowsPerPiece * 64 / std::max<int64_t>(row_bytes_, 1));
  const int64_t pieces = pool == nullptr ? 1 : std::max<int64_t>(1, (end - begin) / piece_rows);
  // Rows [row, stop) of the shard, as the values' runs give them (value row r is shard row
  // begin + r).
  auto apply = [&](int64_t row, int64_t stop) {
    rows.ForRange(row - begin, stop - begin, [&](int64_t first, int64_t count, const char* src) {
      const int64_t r = begin + first;
      if (op.kind == UpdateOp::ASSIGN) {
        std::memcpy(values_.data() + r * row_bytes_, src, count * row_bytes_);
      } else if (op.kind == UpdateOp::APPLY_GRADIENT) {
        // The optimizers are elementwise: consecutive rows are one long row.
        float* slot_rows[4];
        for (size_t k = 0; k < slots_.size(); ++k) {
          slot_rows[k] = Slot(static_cast<int>(k)) + r * width_;
        }
        optimizer_->ApplyRow(reinterpret_cast<float*>(values_.data()) + r * width_, slot_rows,
                             reinterpret_cast<const UnalignedFloat*>(src), count * width_,
                             scalars);
      } else {
        for (int64_t k = 0; k < count; ++k) {
          UpdateRowLocked(op.kind, r + k, src + k * row_bytes_, scalars);
        }
      }
    });
  };
  ParallelRanges(pool, end - begin, pieces, [&](int64_t piece_begin, int64_t piece_end) {
    RowLockBypass::Piece piece(&batch);
    const int64_t last = begin + piece_end;
    for (int64_t row = begin + piece_begin; row < last;) {
      const int64_t span_stop = std::min(last, row + span_rows);
      if (piece.Bypassing((span_stop - row) * row_bytes_)) {
        apply(row, span_stop);
        row = span_stop;
        continue;
      }
      const int64_t stop = std::min(last, (row / block + 1) * block);  // to the end of row's block
      RowLockGuard lock(locks_.get(), row);
      apply(row, stop);
      row = stop;
    }
  });
}

}  // namespace pstrain
