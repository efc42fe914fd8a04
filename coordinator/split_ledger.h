// The coordinator's ledger of a job's training data, dealt to workers on demand (TF's tf.data
// service "distributed epoch", ShardingPolicy.DYNAMIC, with an exactly-once guarantee TF's
// at-most-once lacks).
//
// The data is a list of splits (a split: a byte range of a file, as the model's data plan cuts it),
// each with its count of training rows. Every epoch deals each split once, in a seeded random order
// of its own; the next epoch's splits follow the last epoch's without a pause. A worker is dealt
// splits with a closure (coordinator/closure_dealer.h), until it holds `hold_rows` rows not yet
// trained; its closures train batches drawn from the rows it holds and report each trained row's
// id (RowId); a closure is dealt at least enough for its own batch beside those of the worker's
// closures in flight. A split is done when each of its rows was reported by a closure that
// completed.
//
// A worker that fails or restarts (WorkerLost) has its unfinished splits dealt again, to whichever
// worker asks next, with the rows already reported as trained left out: only rows that no
// completed closure reported are trained again. So:
//   - no failure: every training row exactly once per epoch;
//   - failures: every row at least once per epoch; a row twice only when it was in a batch that a
//     failed worker trained (its gradients reached the ps) but whose closure did not complete (the
//     reply was lost with the worker), so at most the failed worker's closures in flight times the
//     batch size. rows_twice counts them (reports of rows already reported).
//
// A worker holding no rows takes no closure while other workers' rows remain and nothing is left
// to deal (CanTake), so the epoch's last rows are trained by the workers that hold them; a slow
// worker asks less often and is dealt fewer splits. PendingSteps() says how many more batches the
// held rows need once the model's own steps ran out (short batches at the end).
//
// Thread-safe (its own lock; the coordinator calls the dealer methods under its own).
#ifndef PSTRAIN_COORDINATOR_SPLIT_LEDGER_H_
#define PSTRAIN_COORDINATOR_SPLIT_LEDGER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/tensor.h"
#include "coordinator/closure_dealer.h"

namespace pstrain {

struct SplitLedgerOptions {
  // Training rows of each split, in the data plan's order. Required (at least one row in all).
  std::vector<int64_t> split_rows;
  // Passes over the data. Default 1.
  int epochs = 1;
  // Seeds each epoch's order of the splits. Default 1.
  uint64_t seed = 1;
  // Workers (ids 0 .. num_workers - 1). Default 1.
  int num_workers = 1;
  // Rows a closure trains at most (its batch). Default 256.
  int64_t batch_size = 256;
  // A worker is dealt more splits while it holds fewer rows not yet trained than this. Default
  // 8192. Larger: a bigger shuffle buffer's worth; smaller: a short tail when a worker is slow.
  int64_t hold_rows = 8192;
  // Which output of a completed closure lists the rows it trained (int64 RowIds). Default 3.
  int rows_output = 3;
  // A job that follows its data (online training): more splits arrive while it runs (Append),
  // each dealt once, in arrival order, with its descriptor (what a worker needs to read it; the
  // ledger doesn't look inside). epochs must be 1 and split_rows may start empty. The data never
  // runs out: a worker that holds no rows takes no closure until more arrive, so the model
  // schedules a closure only once there are rows for it (RowsLeft, ClosuresCompleted). Deal()
  // then makes two arguments: the deal, and a string tensor of the dealt splits' descriptors.
  bool follow = false;
};

// One split as dealt: its id (epoch * splits + split) and the rows of it already trained, which the
// worker leaves out.
struct DealtSplit {
  int64_t id = 0;
  std::vector<int64_t> skip;  // row indices among the split's training rows, ascending
};

// A trained row's id, as closures report it: the dealt split's id and the row's index among the
// split's training rows.
inline int64_t RowId(int64_t dealt_split, int64_t row) { return (dealt_split << 32) | row; }
inline int64_t RowIdSplit(int64_t row_id) { return row_id >> 32; }
inline int64_t RowIdRow(int64_t row_id) { return row_id & 0xffffffffLL; }

// What a closure brings its worker: the splits dealt with it, and how many deals with splits the
// worker has had in all (`seq`, this one's included): closures run in any order on a worker, and
// one that finds the worker's rows run dry waits for the deals up to its `seq` to arrive (the rows
// the ledger counts the worker as holding), so batches come short only at the end of the data.
struct Deal {
  int64_t seq = 0;
  std::vector<DealtSplit> splits;
};

// The extra argument Deal() makes, and its reading on the worker. Errors (ParseDeal):
// kInvalidArgument for a malformed tensor.
Tensor EncodeDeal(const Deal& deal);
absl::StatusOr<Deal> ParseDeal(const Tensor& t);

class SplitLedger final : public ClosureDealer {
 public:
  // Errors: kInvalidArgument for options out of range (no rows, epochs or workers < 1, a split
  // with a negative count or over 2^32 rows, batch_size or hold_rows < 1).
  static absl::StatusOr<std::shared_ptr<SplitLedger>> Create(SplitLedgerOptions options);

  // ClosureDealer.
  bool CanTake(int worker) override;
  std::vector<Tensor> Deal(int worker) override;
  void Completed(int worker, const std::vector<Tensor>& outputs) override;
  void Returned(int worker) override;
  void WorkerLost(int worker) override;
  // pstrain_data_splits_{done,in_flight,reassigned}, pstrain_data_rows_{trained,twice,left}.
  void AddMetrics(MetricsRegistry::Sink& out) override;

  // Follow mode: splits that arrived, with their training rows and descriptors (as many of each),
  // appended to the order. Errors: kFailedPrecondition unless following; kInvalidArgument for a
  // count out of range or the lists' lengths differing.
  absl::Status Append(const std::vector<int64_t>& split_rows,
                      const std::vector<std::string>& descriptors);
  // Splits known (follow mode: so far).
  int64_t num_splits() const;
  // Closures that completed (Completed) so far: with the count a model scheduled, the closures
  // still to come.
  int64_t ClosuresCompleted() const;

  // What the ledger has seen so far.
  struct Counts {
    int64_t splits = 0;            // per epoch, those with training rows
    int64_t splits_done = 0;       // over all epochs
    int64_t splits_in_flight = 0;  // dealt to a worker, not done
    int64_t splits_reassigned = 0; // dealt again after their worker was lost
    int64_t rows_trained = 0;      // distinct (epoch, row) pairs reported
    int64_t rows_twice = 0;        // reports of a row already reported
    int64_t rows_left = 0;         // of every epoch, not yet reported
    int64_t workers_lost = 0;
    int64_t bad_reports = 0;       // ids out of range (ignored)
    int epoch = 0;                 // the epoch being dealt (epochs when all are dealt)
  };
  Counts counts() const;

  // After the model's steps: how many more closures the rows not yet trained need (a batch per
  // batch_size rows each worker holds, and of the rows not dealt); 0 when every row was trained.
  int64_t PendingSteps() const;

  // The ledger as text, for a checkpoint taken while no closure runs; and a ledger of the same
  // options restored from it (the splits not done are dealt again, the rows trained left out).
  // Another count of epochs is taken: more continue the saved job, fewer if it began no epoch
  // past them. Errors (Restore): kInvalidArgument when the text is malformed or of other data
  // (another count of splits), or began an epoch past this job's last.
  std::string State() const;
  absl::Status Restore(const std::string& state);
  // A ledger that counts the first `epochs` epochs as trained (a checkpoint without a ledger's
  // state, taken at the end of epoch `epochs`). Errors: kFailedPrecondition once anything was
  // dealt; kInvalidArgument for epochs outside [0, epochs].
  absl::Status StartAtEpoch(int epochs);

 private:
  explicit SplitLedger(SplitLedgerOptions options);

  struct Split {
    int worker = -1;          // holding it; -1: waiting to be dealt (again)
    int64_t rows = 0;
    int64_t trained = 0;
    bool dealt_before = false;
    std::vector<bool> seen;   // by row, once a row was reported
  };
  // The next id to deal, or -1 when every epoch is dealt.
  int64_t NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PushEpochLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<int64_t> EpochOrder(int epoch) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Training rows of dealt id `id`.
  int64_t RowsOfLocked(int64_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return split_rows_[static_cast<size_t>(id % num_splits_)];
  }
  bool AllDealtLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SplitLedgerOptions options_;

  mutable absl::Mutex mu_;
  // Below: guarded by mu_.
  std::vector<int64_t> split_rows_ ABSL_GUARDED_BY(mu_);     // by split (follow: grows)
  int64_t num_splits_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> descriptors_ ABSL_GUARDED_BY(mu_);  // follow mode, by split
  int64_t closures_completed_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, Split> open_ ABSL_GUARDED_BY(mu_);  // dealt at least once, not done
  std::deque<int64_t> pool_ ABSL_GUARDED_BY(mu_);       // to deal, front first
  int next_epoch_ ABSL_GUARDED_BY(mu_) = 0;             // epochs not yet in the pool from here
  std::vector<bool> done_ ABSL_GUARDED_BY(mu_);         // by id
  std::vector<int64_t> held_ ABSL_GUARDED_BY(mu_);      // by worker: rows dealt, not trained
  std::vector<int> inflight_ ABSL_GUARDED_BY(mu_);      // by worker: dealt closures running
  std::vector<int64_t> seq_ ABSL_GUARDED_BY(mu_);       // by worker: deals with splits so far
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_SPLIT_LEDGER_H_
