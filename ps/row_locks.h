// Striped spin locks over blocks of rows: updates to the same row are serialized, different rows
// almost never wait for each other (no lock over a whole shard or store on the hot path).
//
// Rows are grouped into blocks of at least kMinBlockBytes (one row when rows are that wide), so a
// dense range takes one lock per block instead of one per row: a variable of width 1 would
// otherwise pay a lock per float.
#ifndef PSTRAIN_PS_ROW_LOCKS_H_
#define PSTRAIN_PS_ROW_LOCKS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"

namespace pstrain {

// Thread-safe.
class RowLocks {
 public:
  static constexpr int64_t kMaxStripes = 4096;
  static constexpr int64_t kMinBlockBytes = 256;

  RowLocks(int64_t num_rows, int64_t row_bytes) {
    while ((int64_t{1} << shift_) * std::max<int64_t>(row_bytes, 1) < kMinBlockBytes) ++shift_;
    const int64_t blocks = (num_rows >> shift_) + 1;
    stripes_ = 1;
    while (stripes_ < blocks && stripes_ < kMaxStripes) stripes_ <<= 1;
    locks_ = std::make_unique<std::atomic<bool>[]>(stripes_);
    for (int64_t i = 0; i < stripes_; ++i) locks_[i].store(false, std::memory_order_relaxed);
  }

  // Rows per block: a range [b, e) is covered by the blocks of b, b + rows_per_block(), ...
  int64_t rows_per_block() const { return int64_t{1} << shift_; }

  void Lock(int64_t row) {
    std::atomic<bool>& l = Stripe(row);
    for (int spins = 0;; ++spins) {
      if (!l.exchange(true, std::memory_order_acquire)) return;
      while (l.load(std::memory_order_relaxed)) {
        // Held for a row's or block's update; yield if the holder was descheduled.
        if (++spins > 64) std::this_thread::yield();
      }
    }
  }
  void Unlock(int64_t row) { Stripe(row).store(false, std::memory_order_release); }

 private:
  std::atomic<bool>& Stripe(int64_t row) { return locks_[(row >> shift_) & (stripes_ - 1)]; }

  int shift_ = 0;
  int64_t stripes_ = 1;
  std::unique_ptr<std::atomic<bool>[]> locks_;
};

// Holds one row's (block's) lock for a scope.
class RowLockGuard {
 public:
  RowLockGuard(RowLocks* locks, int64_t row) : locks_(locks), row_(row) { locks_->Lock(row_); }
  ~RowLockGuard() { locks_->Unlock(row_); }
  RowLockGuard(const RowLockGuard&) = delete;
  RowLockGuard& operator=(const RowLockGuard&) = delete;

 private:
  RowLocks* locks_;
  int64_t row_;
};

// Lets one batch of row operations on a shard skip the row locks while no other operation could
// see or change its rows. On one thread the locks cost little, but with two threads on one request
// a sparse apply ran ~40% faster without them (docs/benchmarks.md, "Measurements behind the ps
// design").
//
// A batch is a reader (it only reads rows) or a writer. A writer whose pieces run at once must give
// them distinct rows (a sparse apply sums repeated ids first). A writer bypasses only while no
// other operation runs on the shard; readers bypass together, while no writer does (several
// lookups in flight all skip the locks). Every other operation takes row locks and registers as a
// locked reader or writer; one that conflicts with the bypassing batches waits until each of the
// batches' pieces has seen it (pieces look every kCheckBytes bytes of rows, a few microseconds) and
// switched to locks for the rest of its rows. So the bypass holds a reader up for no longer than
// that, and no row is ever read or written by two operations at once without its lock.
//
// Except between writers, which take turns (a shard's updates, sparse and dense): a writer batch
// that finds another writer batch bypassing, and nothing registered, waits for that batch to end
// and then bypasses in turn. Sparse rows take one lock each, an atomic exchange: a full fence that
// waits for the row writes before it. With 4 pushes in flight on the 2-core VM, two sparse applies
// turned to row locks ran at ~0.85x the speed of the same applies one after the other
// (docs/benchmarks.md, "The data plane against ps-lite"). So a shard applies one update batch at a
// time, as ps-lite's server applies every push on one thread: one core applies some 20-30M 64-byte
// Adagrad rows a second, about what a 10 GbE link carries. A waiting push loses the time of the
// batches ahead of it (no order among the waiters: each that wakes tries again). Dense ranges wait
// too: two of them on one shard in lock mode swept the same rows in the same order, a lock per
// block of rows and an optimizer call per block, and with 4 dense pushes in flight on the 2-core
// VM they ran ~3% slower than the same pushes one after the other (each still split over the ps's
// pool). A reader that registers meanwhile still turns the running writer to locks, and the
// waiting writer then takes locks too.
//
// Thread-safe. Usage, for a batch cut into pieces that may run on several threads:
//   RowLockBypass::Batch batch(&bypass, writer);
//   ... in each piece:  RowLockBypass::Piece piece(&batch);
//                       for each row: piece.Run(&locks, row, bytes, work)
//                       (or: if (piece.Bypassing(bytes)) {work} else {lock; work; unlock})
// A thread must not start another operation on the same shard inside a Batch's scope: the inner
// one would wait for a bypass that only the outer one can end.
class RowLockBypass {
 public:
  static constexpr int64_t kCheckBytes = 16 << 10;

  class Batch;

  // One piece of a batch, on one thread, for one scope. A batch may have any number of pieces.
  class Piece {
   public:
    explicit Piece(Batch* batch) : batch_(batch) {
      if (!batch_->bypassing_) return;
      if (batch_->Join()) {
        bypassing_ = true;
        Check();
      } else {
        // The batch's bypass has already ended: this piece is an ordinary locked operation.
        registered_ = true;
        batch_->owner_->EnterLocked(batch_->writer_);
      }
    }
    ~Piece() {
      if (bypassing_) batch_->PieceDone();
      if (registered_) batch_->owner_->Leave(batch_->writer_);
    }
    Piece(const Piece&) = delete;
    Piece& operator=(const Piece&) = delete;

    // Whether the next row (or block of rows), of `bytes` bytes, may skip its lock. Call once
    // per row or block.
    bool Bypassing(int64_t bytes) {
      if (bypassing_ && (bytes_ += bytes) >= kCheckBytes) {
        bytes_ = 0;
        Check();
      }
      return bypassing_;
    }

    // Runs fn() on `row` (or the block of rows starting there, of `bytes` bytes): under the row's
    // lock unless this piece bypasses.
    template <typename Fn>
    void Run(RowLocks* locks, int64_t row, int64_t bytes, Fn&& fn) {
      if (Bypassing(bytes)) {
        fn();
        return;
      }
      RowLockGuard lock(locks, row);
      fn();
    }

   private:
    // Switches to locks if a conflicting operation has registered.
    void Check() {
      if (!batch_->owner_->Conflicts(batch_->writer_)) return;
      // Register as a locked operation first, so no new batch bypasses while this piece runs. It
      // need not wait: the rest of its own batch is no conflict.
      batch_->owner_->Register(batch_->writer_);
      registered_ = true;
      bypassing_ = false;
      batch_->DropHold();
      batch_->PieceDone();
    }

    Batch* const batch_;
    bool bypassing_ = false;
    bool registered_ = false;  // counted as a locked operation
    int64_t bytes_ = 0;        // since the last Check()
  };

  class Batch {
   public:
    // A writer that finds another writer bypassing waits for it to end and then bypasses, instead
    // of turning both to row locks (see the class comment).
    Batch(RowLockBypass* owner, bool writer)
        : owner_(owner), writer_(writer), bypassing_(owner->BeginBatch(writer)) {
      if (!bypassing_) owner_->EnterLocked(writer_);
    }
    ~Batch() {
      if (bypassing_) {
        DropHold();
      } else {
        owner_->Leave(writer_);
      }
    }
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;

   private:
    friend class Piece;
    // The bypass lasts while `holders_` > 0: the batch itself (until it ends or a piece sees a
    // conflict) and each piece still bypassing. A piece joins only while the bypass lasts.
    bool Join() {
      int64_t n = holders_.load(std::memory_order_relaxed);
      while (n > 0) {
        if (holders_.compare_exchange_weak(n, n + 1, std::memory_order_acquire)) return true;
      }
      return false;
    }
    void DropHold() {
      if (!hold_dropped_.exchange(true, std::memory_order_relaxed)) PieceDone();
    }
    void PieceDone() {
      if (holders_.fetch_sub(1, std::memory_order_acq_rel) == 1) owner_->EndBypass(writer_);
    }

    RowLockBypass* const owner_;
    const bool writer_;
    const bool bypassing_;
    std::atomic<int64_t> holders_{1};
    std::atomic<bool> hold_dropped_{false};
  };

  // An operation that takes row locks for its whole scope and never bypasses them (the tests use
  // it for a conflicting operation; the shards' own operations all go through Batch).
  class Locked {
   public:
    Locked(RowLockBypass* owner, bool writer) : owner_(owner), writer_(writer) {
      owner_->EnterLocked(writer_);
    }
    ~Locked() { owner_->Leave(writer_); }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

   private:
    RowLockBypass* const owner_;
    const bool writer_;
  };

 private:
  // bypass_: kNone, kWriter (one writer batch bypasses) or the number of reader batches that do.
  static constexpr int64_t kNone = 0;
  static constexpr int64_t kWriter = -1;

  std::atomic<int64_t>& Count(bool writer) { return writer ? locked_writers_ : locked_readers_; }

  // Whether a new batch bypasses: as TryBypass, except that a writer waits its turn behind a
  // bypassing writer (see the class comment) and then tries again.
  bool BeginBatch(bool writer) {
    for (;;) {
      if (TryBypass(writer)) return true;
      if (!writer || !WaitWhileAWriterBypasses()) return false;
    }
  }

  // Waits while a writer batch bypasses and no locked operation is registered. Returns whether
  // a bypass may now be had: none is held and nothing is registered.
  bool WaitWhileAWriterBypasses() {
    waiting_writers_.fetch_add(1, std::memory_order_seq_cst);
    bool free;
    {
      absl::MutexLock lock(&wait_mu_);
      // (seq_cst: pairs with EndBypass's store, then load, so a waiter either sees the bypass
      // ended or is woken.)
      while (bypass_.load(std::memory_order_seq_cst) == kWriter && !Conflicts(/*writer=*/true)) {
        bypass_ended_.Wait(&wait_mu_);
      }
      free = bypass_.load(std::memory_order_seq_cst) == kNone && !Conflicts(/*writer=*/true);
    }
    waiting_writers_.fetch_sub(1, std::memory_order_relaxed);
    return free;
  }

  void EndBypass(bool writer) {
    if (writer) {
      bypass_.store(kNone, std::memory_order_seq_cst);
    } else if (bypass_.fetch_sub(1, std::memory_order_seq_cst) != 1) {
      return;  // other readers still bypass
    }
    if (waiting_writers_.load(std::memory_order_seq_cst) == 0) return;
    absl::MutexLock lock(&wait_mu_);
    bypass_ended_.SignalAll();
  }

  bool TryBypass(bool writer) {
    // Cheap early outs first: most of the time under contention someone is registered.
    if (locked_writers_.load(std::memory_order_relaxed) != 0) return false;
    if (writer && locked_readers_.load(std::memory_order_relaxed) != 0) return false;
    if (writer) {
      int64_t expected = kNone;
      if (!bypass_.compare_exchange_strong(expected, kWriter, std::memory_order_seq_cst)) {
        return false;
      }
    } else {
      // Readers bypass together: one more joins unless a writer bypasses.
      int64_t n = bypass_.load(std::memory_order_relaxed);
      do {
        if (n == kWriter) return false;
      } while (!bypass_.compare_exchange_weak(n, n + 1, std::memory_order_seq_cst));
    }
    // (seq_cst: pairs with EnterLocked's increment, then load, so one of the two sees the other.)
    if (Conflicts(writer, std::memory_order_seq_cst)) {
      EndBypass(writer);
      return false;
    }
    return true;
  }

  // Whether a registered locked operation conflicts with a bypassing batch of this kind.
  bool Conflicts(bool writer, std::memory_order order = std::memory_order_relaxed) const {
    if (locked_writers_.load(order) != 0) return true;
    return writer && locked_readers_.load(order) != 0;
  }

  void Register(bool writer) { Count(writer).fetch_add(1, std::memory_order_seq_cst); }

  void EnterLocked(bool writer) {
    Register(writer);
    // Wait while a conflicting batch bypasses (a reader lets other readers through).
    for (int spins = 0;; ++spins) {
      const int64_t b = bypass_.load(std::memory_order_seq_cst);
      if (b == kNone || (b != kWriter && !writer)) return;
      if (spins > 16) std::this_thread::yield();
    }
  }

  void Leave(bool writer) { Count(writer).fetch_sub(1, std::memory_order_release); }

  std::atomic<int64_t> bypass_{kNone};
  std::atomic<int64_t> locked_readers_{0};
  std::atomic<int64_t> locked_writers_{0};
  // Writer batches waiting for a bypassing writer to end (WaitWhileAWriterBypasses).
  std::atomic<int64_t> waiting_writers_{0};
  absl::Mutex wait_mu_;
  absl::CondVar bypass_ended_;
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_ROW_LOCKS_H_
