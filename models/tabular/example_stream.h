// The tabular model's rows as examples, streamed: a worker never holds more of its data than
//
//   - a shuffle buffer of `shuffle_buffer` examples (tf.data's shuffle: a batch draws uniformly
//     from the buffer, each draw replaced by the next row read), and
//   - `interleave` open range readers (tf.data's interleave: the next row comes from each open
//     range in turn; a range that ends is replaced by the next in this epoch's order, a seeded
//     permutation of the worker's ranges), each with a CSV buffer of its range's size (about
//     64 KiB; gzip: 1 MiB) or its longest record.
//
// When the worker's whole share fits in the buffer, the first pass reads it into the buffer and
// every epoch then draws a fresh permutation of it (tf.data's cache + a full shuffle: no file is
// read again). Otherwise every epoch streams the share again. So a worker's memory for data is at
// most shuffle_buffer * (8 * slots + 4 * dense inputs + 4) bytes plus interleave * 80 KiB,
// whatever the data's size (docs/feature-spec.md, "Data larger than a worker's memory").
//
// One epoch of a worker is one pass over its share (data_plan.h); the first Next() starts at the
// epoch the step it is asked for falls in (a worker that starts or restarts mid-job begins that
// epoch's pass over its share afresh: at-least-once closures, not exactly-once examples).
#ifndef PSTRAIN_MODELS_TABULAR_EXAMPLE_STREAM_H_
#define PSTRAIN_MODELS_TABULAR_EXAMPLE_STREAM_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/split_ledger.h"
#include "models/data/csv_records.h"
#include "models/tabular/data_plan.h"
#include "models/tabular/transforms.h"

namespace pstrain {
namespace tabular {

// Examples in the layout's arrays.
struct Batch {
  int64_t n = 0;
  std::vector<int64_t> keys;   // n * num_slots
  std::vector<float> dense;    // n * num_dense
  std::vector<float> labels;   // n
  std::vector<int64_t> ids;    // n row ids (coordinator/split_ledger.h, RowId); DealtStream only
  void Resize(int64_t rows, const ExampleLayout& layout);
  ExampleRef At(int64_t i, const ExampleLayout& layout);
};

// How the readers of one job see its data: the plan, the transformer, and each file's columns
// (read from its header once, then cached). Thread-safe.
class DataContext {
 public:
  struct Options {
    uint64_t seed = 1;
    double validation_fraction = 0.1;
    bool skip_bad_rows = false;
  };
  // `spec`, `plan` must outlive the context.
  DataContext(const Spec& spec, const DataPlan& plan, Options options);

  const Spec& spec() const { return spec_; }
  const DataPlan& plan() const { return plan_; }
  const Transformer& transformer() const { return transformer_; }
  const Options& options() const { return options_; }
  bool validation_files() const { return validation_files_; }
  // The columns of file `file`. Errors: the header's (MapColumns), I/O.
  absl::StatusOr<ColumnMap> Columns(int file);
  // File `file`: the plan's, or one that arrived since (a job that follows its data; AddFile);
  // null when unknown. The pointer stays valid as long as the context.
  const FileInfo* File(int file);
  // A file that arrived since the plan, numbered `file` (past the plan's). Adding the same file
  // again is a no-op. Errors: kInvalidArgument for a number of the plan's or another file's.
  absl::Status AddFile(int file, FileInfo info);

  // Rows skipped as bad so far, by every reader of this context.
  int64_t bad_rows() const { return bad_rows_.load(); }
  void CountBadRow() { bad_rows_.fetch_add(1); }

 private:
  const Spec& spec_;
  const DataPlan& plan_;
  const Options options_;
  const Transformer transformer_;
  bool validation_files_ = false;
  std::atomic<int64_t> bad_rows_{0};
  absl::Mutex mu_;
  std::map<int, ColumnMap> columns_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::unique_ptr<FileInfo>> arrived_ ABSL_GUARDED_BY(mu_);  // by number
};

// The rows of one split in one range, as examples. Not thread-safe.
class RangeReader {
 public:
  static absl::StatusOr<std::unique_ptr<RangeReader>> Open(DataContext* context,
                                                           const Range& range, Split split);
  // The next row of the split into `out`; false at the range's end. Errors: a bad row ("file:line:
  // what") unless the context skips them; I/O.
  absl::StatusOr<bool> Next(ExampleRef out);

 private:
  RangeReader(DataContext* context, const Range& range, Split split)
      : context_(context), range_(range), split_(split) {}
  DataContext* const context_;
  const Range range_;
  const Split split_;
  const FileInfo* file_ = nullptr;
  ColumnMap columns_;
  std::unique_ptr<data::CsvRecordReader> reader_;
};

// A worker's training examples, its share read in shuffled, interleaved ranges. Thread-safe.
class TrainStream {
 public:
  struct Options {
    int worker = 0;
    int64_t steps_per_epoch = 1;  // of the whole job (for the epoch a first step falls in)
    int64_t shuffle_buffer = 65536;
    int interleave = 64;
  };
  TrainStream(DataContext* context, std::vector<Range> share, Options options);

  // The next `n` examples. `step`: the job's step asking (the first call picks the epoch).
  // Errors: RangeReader's; kFailedPrecondition when the share has no training rows.
  absl::Status Next(int64_t step, int64_t n, Batch* out);

  int64_t epoch() const;

  // Bytes the shuffle buffer holds at most; whether the share fits in it (read once, then drawn
  // from memory every epoch).
  int64_t BufferBytes() const;
  bool cached() const { return cached_; }

 private:
  void StartEpoch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads one training example into buffer slot `slot`; false when the epoch's rows are done.
  absl::StatusOr<bool> ReadInto(int64_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ExampleRef Slot(int64_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies buffer slot `from` into `dst`.
  void CopySlot(int64_t from, ExampleRef dst) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  DataContext* const context_;
  const std::vector<Range> share_;
  const Options options_;
  const ExampleLayout& layout_;
  int64_t capacity_ = 0;
  bool cached_ = false;  // the share fits in the buffer

  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> order_ ABSL_GUARDED_BY(mu_);  // this epoch's ranges
  size_t next_range_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::unique_ptr<RangeReader>> open_ ABSL_GUARDED_BY(mu_);
  size_t turn_ ABSL_GUARDED_BY(mu_) = 0;
  bool input_done_ ABSL_GUARDED_BY(mu_) = false;
  int64_t read_this_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // The shuffle buffer: `size_` examples.
  std::vector<int64_t> keys_ ABSL_GUARDED_BY(mu_);
  std::vector<float> dense_ ABSL_GUARDED_BY(mu_);
  std::vector<float> labels_ ABSL_GUARDED_BY(mu_);
  int64_t size_ ABSL_GUARDED_BY(mu_) = 0;
  // Cached: the whole share is in the buffer; this epoch's permutation of it and the next draw.
  bool loaded_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int64_t> permutation_ ABSL_GUARDED_BY(mu_);
  int64_t cursor_ ABSL_GUARDED_BY(mu_) = 0;
};

// A worker's training examples from the splits the coordinator deals it (coordinator/
// split_ledger.h): each closure brings the splits dealt with it (AddSplits), whose rows are read
// into a shuffle buffer of `shuffle_buffer` examples, `interleave` splits at a time, and each batch
// draws uniformly from the buffer (as TrainStream). Each example keeps its row id, which the closure
// reports once it trained the batch; a closure that fails puts its batch back (PutBack). A batch is
// short, or empty, when the buffer runs dry: the worker holds no more of the epoch's rows (the
// ledger deals more with the next closure). Thread-safe.
class DealtStream {
 public:
  struct Options {
    int worker = 0;
    int64_t shuffle_buffer = 65536;
    int interleave = 64;
  };
  // `splits`: the plan's training ranges, which a dealt split's id indexes (id % splits.size()).
  DealtStream(DataContext* context, std::vector<Range> splits, Options options);

  // Takes the splits dealt with a closure. Errors: kInvalidArgument for an id out of range.
  absl::Status AddSplits(const Deal& deal);
  // A job that follows its data: the splits dealt with a closure, each with its range (as many;
  // their files known to the context, DataContext::AddFile). Errors: kInvalidArgument for lists
  // of other lengths.
  absl::Status AddSplits(const Deal& deal, const std::vector<Range>& ranges);
  // Up to `n` examples (fewer when the worker's rows run out) into `out`, ids included, for the
  // closure that brought deal `seq` (or came after it with none): first waits until every deal up
  // to `seq` arrived (closures run in any order), up to `wait`; a deal still missing then is given
  // up on (logged). Errors: RangeReader's.
  absl::Status Next(int64_t n, int64_t seq, Batch* out,
                    absl::Duration wait = absl::Seconds(10));
  // A batch taken by Next whose closure failed goes back into the buffer.
  void PutBack(const Batch& batch);

 private:
  struct OpenSplit {
    int64_t id = 0;
    std::vector<int64_t> skip;  // ascending
    size_t next_skip = 0;
    int64_t row = 0;            // the next row's index among the split's training rows
    std::unique_ptr<RangeReader> reader;
  };
  // Reads one example into the buffer's end; false when no dealt row is left to read.
  absl::StatusOr<bool> ReadOneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GrowLocked(int64_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ExampleRef SlotLocked(int64_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  DataContext* const context_;
  const std::vector<Range> splits_;
  const Options options_;
  const ExampleLayout& layout_;

  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  std::deque<DealtSplit> dealt_ ABSL_GUARDED_BY(mu_);  // not opened yet
  std::map<int64_t, Range> followed_ ABSL_GUARDED_BY(mu_);  // follow mode: dealt ids' ranges
  std::set<int64_t> deals_ ABSL_GUARDED_BY(mu_);       // seqs arrived beyond arrived_
  int64_t arrived_ ABSL_GUARDED_BY(mu_) = 0;           // every deal up to this one arrived
  std::vector<OpenSplit> open_ ABSL_GUARDED_BY(mu_);
  size_t turn_ ABSL_GUARDED_BY(mu_) = 0;
  // The buffer: `size_` examples (capacity grows past shuffle_buffer only for a batch put back).
  std::vector<int64_t> keys_ ABSL_GUARDED_BY(mu_);
  std::vector<float> dense_ ABSL_GUARDED_BY(mu_);
  std::vector<float> labels_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> ids_ ABSL_GUARDED_BY(mu_);
  int64_t size_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tabular
}  // namespace pstrain

#endif  // PSTRAIN_MODELS_TABULAR_EXAMPLE_STREAM_H_
