// Where the tabular model's rows come from and who reads which, decided once by the coordinator's
// scan of the data, and shipped to every worker as JSON:
//
//   files     --data (a CSV file, a directory of them, or a glob; plain or gzip), then the
//             validation files (--validation_data) and the test files (the spec's
//             split.test_data), each list sorted by path
//   splits    a data file's row is test by the spec's split (a column's text at or after a value,
//             or a seeded fraction), else validation by a seeded fraction (unless validation
//             files are given), else training; a validation or test file's rows are all that
//             split. The seeded draws hash (seed, file index, line), so every process agrees.
//   stats     the training split's statistics (transforms.h) and row counts per split
//   shares    each worker's part of the training rows, as TF shards a dataset by worker: with at
//             least as many data files as workers, worker w reads files w, w + W, ...; otherwise
//             every file is cut into 8 W row ranges of about equal training rows, and worker w
//             reads ranges w, w + W, ... of each (the same number of training rows per worker,
//             from all over the file: a file sorted by time gives each worker every period)
//   units     the ranges evaluation closures read (<= 4 MiB of a plain file; a gzip file whole)
//
// The scan reads every file once, checks every row (a bad row is an error naming the file, line
// and column, or with skip_bad_rows is counted and skipped by every reader alike), and records
// where rows start (every row of a small file, about every 64 KiB of a large one) to cut ranges.
#ifndef PSTRAIN_MODELS_TABULAR_DATA_PLAN_H_
#define PSTRAIN_MODELS_TABULAR_DATA_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/tabular/feature_spec.h"
#include "models/tabular/transforms.h"
#include "nlohmann/json.hpp"

namespace pstrain {
namespace tabular {

enum class Split : int { kTrain = 0, kValidation = 1, kTest = 2 };
const char* SplitName(Split split);
// What a file holds: data (split by the spec), only validation or test rows, or (a job that
// follows its data: a file that arrived after the first) only training rows.
enum class FileRole : int { kData = 0, kValidation = 1, kTest = 2, kStream = 3 };

// The files matching `pattern`: a file, a directory (its regular files not starting with '.' or
// '_', sorted), or a glob (sorted). Errors: kNotFound naming the pattern when nothing matches.
absl::StatusOr<std::vector<std::string>> ResolveFiles(const std::string& pattern);

// A record's position in a file.
struct RowMark {
  int64_t offset = 0;          // the record's first byte (decompressed)
  int64_t line = 1;            // its line
  int64_t row = 0;             // its index among the file's records (0-based)
  int64_t train_before = 0;    // training rows before it in the file
};

struct FileInfo {
  std::string path;
  FileRole role = FileRole::kData;
  int index = 0;         // among the files of its role (the split hashes' file index)
  bool gzip = false;
  int64_t rows = 0;      // records, without the header
  int64_t train_rows = 0;
  int64_t end = 0;       // one past the last record
  std::vector<RowMark> marks;  // the first record's always; coordinator only (not shipped)
};

// Rows [begin, end) of a file, by byte offsets of record starts.
struct Range {
  int file = 0;  // into DataPlan::files
  int64_t begin = 0, end = 0;
  int64_t first_line = 1;
  int64_t rows = 0;
  int64_t train_rows = 0;
};

struct ScanOptions {
  std::string data;             // file, directory or glob
  std::string validation_data;  // "": a seeded fraction of the data files' rows
  double validation_fraction = 0.1;
  uint64_t seed = 1;
  int workers = 1;
  bool skip_bad_rows = false;
  // The training ranges are about 64 KiB of a plain file, smaller where that makes fewer than
  // this many (down to the row marks' spacing: every row of a small file). Default 1.
  int64_t min_ranges = 1;
};

struct DataPlan {
  std::vector<FileInfo> files;
  Stats stats;
  int64_t rows[3] = {0, 0, 0};  // by Split
  int64_t bad_rows = 0;
  std::vector<std::string> bad_row_examples;  // the first few, "file:line: what"
  // Per worker: its training ranges, each about 64 KiB of a plain file (a gzip range whole).
  std::vector<std::vector<Range>> shares;
  std::vector<std::string> notes;  // e.g. a worker whose share had no training rows

  // The ranges holding rows of `split` (validation or test), for evaluation closures.
  std::vector<Range> EvalUnits(Split split) const;

  // What workers need (no marks).
  nlohmann::json ToJson() const;
  static absl::StatusOr<DataPlan> FromJson(const nlohmann::json& j, size_t num_features);
};

// Which split a record of `file` at `line` belongs to.
Split SplitOf(const Spec& spec, const Transformer& transformer, const FileInfo& file,
              absl::Span<const absl::string_view> fields, const ColumnMap& columns, int64_t line,
              double validation_fraction, bool validation_files, uint64_t seed);

// A job that follows its data (online training, docs/online.md): files that arrive while it runs.
// Each is read as Scan reads a data file (its header, every row checked, its marks) and cut into
// training ranges of about 64 KiB; every row of it trains (kStream: a stream is scored before it
// is trained on, progressive validation, instead of holding rows out). `file->path` is the
// caller's; `number` is its index in the worker's numbering of files (Range::file) and the split
// hashes' file index. Bad rows as Scan's (skip_bad_rows: counted into *bad_rows).
absl::StatusOr<std::vector<Range>> ScanArrival(const Spec& spec, const ScanOptions& options,
                                               int number, FileInfo* file, int64_t* bad_rows);

// A training range with its file, as text for the split ledger's descriptor, and back. Errors
// (Parse): kInvalidArgument for malformed text.
std::string FollowedSplitDescriptor(const FileInfo& file, const Range& range);
absl::Status ParseFollowedSplit(const std::string& descriptor, FileInfo* file, Range* range);

// Scans every file: headers, splits, statistics, bad rows, shares. Errors: kNotFound (no data,
// naming the pattern), kInvalidArgument naming the file, line and column of the first bad row
// (unless skip_bad_rows), a header without a column the spec needs, an empty file (no header),
// no training or no test rows; I/O errors naming the file.
absl::StatusOr<DataPlan> Scan(const Spec& spec, const ScanOptions& options);

}  // namespace tabular
}  // namespace pstrain

#endif  // PSTRAIN_MODELS_TABULAR_DATA_PLAN_H_
