// One shard of a variable on a ps: its rows, its optimizer and the optimizer's slots beside them.
#ifndef PSTRAIN_PS_VARIABLE_SHARD_H_
#define PSTRAIN_PS_VARIABLE_SHARD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/ps_service.pb.h"
#include "ps/memory_budget.h"
#include "ps/optimizers.h"
#include "ps/row_locks.h"
#include "ps/staleness.h"
#include "common/thread_pool.h"
#include "ps/table_memory.h"
#include "ps/update_view.h"

namespace pstrain {

// Thread-safe: every row is read and written under its row lock (or, for a batch that runs alone
// on the shard, under RowLockBypass's guarantee that nothing else touches it), so concurrent
// updates of one row never lose each other and a lookup never sees half an update. Operations are
// split into a Validate step (no side effects) and an execute step that assumes validated input,
// so a request of many operations can be checked whole before any of it is applied.
class VariableShard {
 public:
  // Validates `def`, reserves its memory in `budget` (may be null), allocates the rows and slots,
  // and initializes them (unless `initialize` is false: then they are zeros, for a caller that
  // overwrites them all, as a restore does). Errors: kInvalidArgument naming the shard and the bad
  // field; kResourceExhausted (the budget, naming the shard and the bytes; or no memory).
  static absl::StatusOr<std::unique_ptr<VariableShard>> Create(const VariableShardDef& def,
                                                               bool initialize = true,
                                                               MemoryBudget* budget = nullptr);

  // The definition (with the optimizer's defaults filled in).
  const VariableShardDef& def() const { return def_; }
  const std::string& name() const { return def_.name(); }
  DataType dtype() const { return def_.dtype(); }
  int64_t width() const { return width_; }          // elements per row
  int64_t row_bytes() const { return row_bytes_; }
  int64_t num_rows() const { return def_.num_rows(); }
  int64_t row_offset() const { return def_.row_offset(); }
  const Optimizer* optimizer() const { return optimizer_.get(); }

  // Lookup: `ids` are int64 global rows. Errors: kInvalidArgument (ids not whole int64s, an id out
  // of this shard's rows).
  absl::Status ValidateLookup(absl::string_view ids) const;
  // Writes one row per id into `out` (ids.size()/8 * row_bytes() bytes).
  // `pool` (may be null): pieces of a large request run on it too (ParallelFor).
  // `ready` (may be empty): called on the calling thread as the rows are written, with n: rows
  // [0, n) of `out` are final (n grows; the last call may come before all are), so a server can
  // send them while the rest are gathered (ReplyAllocator::Ready).
  using RowsReady = std::function<void(int64_t rows)>;
  void Lookup(absl::string_view ids, char* out, ThreadPool* pool = nullptr,
              const RowsReady& ready = nullptr) const;

  // A training lookup or read of step `step` (> 0; 0: not training, ignored) saw the shard now:
  // noted so that the step's gradient, when it comes, knows its staleness (ps/staleness.h).
  // A shard without an optimizer takes no gradients: nothing is noted.
  void NoteTrainingRead(int64_t step) const {
    if (optimizer_ != nullptr) staleness_.NoteRead(step, apply_count_.load());
  }
  // The staleness of the gradients applied so far.
  StalenessTracker::Summary staleness() const { return staleness_.summary(); }

  // Read: a global row range (0,0 = all). Returns the shard-local [begin, end).
  absl::Status ValidateRead(const RowRange& range, int64_t* begin, int64_t* end) const;
  // Copies rows [begin, end) into `out`; `ready` (may be empty) as Lookup's, counting from begin.
  void Read(int64_t begin, int64_t end, char* out, const RowsReady& ready = nullptr) const;
  // Copies the same rows of every slot into `out`, slot after slot (num_slots() * (end - begin) *
  // row_bytes() bytes), each block of rows under its lock as Read's.
  void ReadSlots(int64_t begin, int64_t end, char* out) const;

  // Update: assign, assign-add, or apply a gradient with the shard's optimizer.
  // Errors: kInvalidArgument (values not a whole number of rows, count mismatch, ids out of range,
  // gradients for a variable without an optimizer or of a non-float dtype).
  // `op`'s values may be in pieces (UpdateOpView).
  absl::Status ValidateUpdate(const UpdateOpView& op) const;
  // `step`: the training step that computed a gradient (the request's, 1-based; 0: none given, the
  // shard's count of applied gradients stands in), the learning-rate schedule's argument.
  void Update(const UpdateOpView& op, ThreadPool* pool = nullptr, int64_t step = 0);

  // Number of gradients applied so far (Adam's t).
  int64_t apply_count() const { return apply_count_.load(); }
  // Raw access for checkpoints and tests: values and each slot, row-major, num_rows * width.
  const char* values_data() const { return values_.data(); }
  const float* slot_data(int slot) const { return Slot(slot); }
  int num_slots() const { return static_cast<int>(slots_.size()); }
  // For filling a shard that no one else sees yet (a restore stages a new shard, then swaps it in).
  char* mutable_values_data() { return values_.data(); }
  float* mutable_slot_data(int slot) { return Slot(slot); }
  void set_apply_count(int64_t n) { apply_count_.store(n); }

 private:
  explicit VariableShard(VariableShardDef def);
  absl::Status ValidateIds(absl::string_view ids, absl::string_view what) const;
  absl::Status ValidateRange(const RowRange& range, int64_t* begin, int64_t* end) const;
  // Applies one row update (kind) at local row `row` from `src` (row_bytes bytes). The caller holds
  // the row's lock.
  void UpdateRowLocked(UpdateOp::Kind kind, int64_t row, const char* src,
                       const StepScalars& scalars);
  // Prefetches local row `row`'s values (and slots, for gradients) into the cache. Always inlined:
  // GCC deems a function that only prefetches side-effect free and deletes out-of-line calls to it.
  __attribute__((always_inline)) inline void Prefetch(int64_t row, bool with_slots) const {
    const char* v = values_.data() + row * row_bytes_;
    if (!with_slots) {
      for (int64_t b = 0; b < row_bytes_; b += 64) __builtin_prefetch(v + b);
      return;
    }
    // Read prefetches, though the rows are then written: a write prefetch needs PREFETCHW, which
    // GCC targets only when told the CPU has it (-march=native) and otherwise drops entirely.
    for (int64_t b = 0; b < row_bytes_; b += 64) __builtin_prefetch(v + b);
    for (const TableMemory& slot : slots_) {
      const char* p = slot.data() + row * row_bytes_;
      for (int64_t b = 0; b < row_bytes_; b += 64) __builtin_prefetch(p + b);
    }
  }
  // Calls fn(i, local row of ids[i]) for i in [begin, end) in order, prefetching rows (and slots)
  // kPrefetchLines cache lines ahead.
  template <typename Fn>
  void ForEachRow(absl::string_view ids, int64_t begin, int64_t end, bool with_slots, Fn fn) const;
  // Calls fn(i, local row of ids[i]) for every position, in pieces over `pool` (may be null), each
  // row under its lock unless the call bypasses the locks (RowLockBypass: a `write` call's rows
  // must then be distinct if `pool` is given).
  template <typename Fn>
  void ForEachRowLocked(absl::string_view ids, bool write, bool with_slots, ThreadPool* pool,
                        Fn fn) const;
  // Gradient apply for sparse ids, summing repeated ids first; grads[i] is position i's row.
  void ApplySparseGradient(absl::string_view ids, const char* const* grads, ThreadPool* pool,
                           int64_t step);
  // The scalars of the next gradient applied, computed at request step `step` (see Update). A
  // dense gradient (a range of rows) has its staleness counted (from `read_version` when it is
  // given: UpdateOp.read_version), and its rate scaled as the optimizer's staleness_scaling says.
  StepScalars NextScalars(int64_t step, bool dense, int64_t read_version = 0);

  VariableShardDef def_;
  int64_t width_ = 0;
  int64_t row_bytes_ = 0;
  std::unique_ptr<Optimizer> optimizer_;
  float* Slot(int slot) const { return reinterpret_cast<float*>(slots_[slot].data()); }

  BudgetReservation reservation_;  // values and slots, in the ps's budget
  TableMemory values_;
  std::vector<TableMemory> slots_;
  std::unique_ptr<RowLocks> locks_;  // set by Create, once row_bytes_ is known
  mutable RowLockBypass bypass_;      // every row access goes through it
  std::atomic<int64_t> apply_count_{0};
  mutable StalenessTracker staleness_;
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_VARIABLE_SHARD_H_
