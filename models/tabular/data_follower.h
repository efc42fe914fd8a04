// A tabular job that follows its data (online training, docs/online.md). --data names a directory:
// its first file by name is the job's first data, scanned at setup as a batch job's (the training
// split's statistics, the held-out validation and test rows); every file after it by name is read
// once, every row training, in name order, as it arrives. The follower polls the directory, reads
// each new file through (data_plan.h, ScanArrival: its rows checked, its ranges cut) and hands its
// training ranges to the split ledger (follow mode), which deals them to the workers with their
// descriptors: no worker needs to be told of a new file beforehand.
//
// Writers name files so that names sort in arrival order (a timestamp or a sequence number) and
// make each appear whole: written under a name starting with '.' or '_' (which the follower
// ignores) and renamed. A file that appears with a name sorting before one already read is not
// read (logged once): the order of the files is the order of the data.
//
// Checkpoints keep the files followed, in order (State); a job resumed from one reads them again
// in that order (Restore, before the ledger's own state: their splits get the same ids), then goes
// on with the files that arrived since.
//
// Used by the coordinator's training thread; the counters may be read from any thread.
#ifndef PSTRAIN_MODELS_TABULAR_DATA_FOLLOWER_H_
#define PSTRAIN_MODELS_TABULAR_DATA_FOLLOWER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/split_ledger.h"
#include "models/tabular/data_plan.h"
#include "models/tabular/feature_spec.h"

namespace pstrain {
namespace tabular {

class DataFollower {
 public:
  struct Options {
    std::string dir;                         // the directory followed
    std::string first_file;                  // its first file (scanned at setup)
    int first_number = 0;                    // the number (Range::file) of the first arrival
    absl::Duration poll = absl::Seconds(1);  // how often the directory is listed
    ScanOptions scan;                        // bad rows: as the job's
  };
  // `spec` must outlive the follower; `ledger` follows (SplitLedgerOptions::follow).
  DataFollower(const Spec& spec, Options options, std::shared_ptr<SplitLedger> ledger);

  // Lists the directory (at most every `poll`, unless `now`) and hands each new file's ranges to
  // the ledger. Errors: a file that can't be read, or holds a bad row (unless bad rows are
  // skipped), named with its line; the files before it were taken.
  absl::Status Poll(bool now = false);

  // The files followed, as JSON text; and their reading again, in order (their ranges to the
  // ledger), from such text. Errors (Restore): kInvalidArgument for malformed text; kNotFound or
  // kInvalidArgument naming a followed file that is gone or now reads differently.
  std::string State() const;
  absl::Status Restore(const std::string& state);

  const std::string& dir() const { return options_.dir; }
  int64_t files() const { return files_.load(); }
  int64_t rows() const { return rows_.load(); }
  int64_t bad_rows() const { return bad_rows_.load(); }

 private:
  // Reads `path` as the next arrival and hands its ranges to the ledger.
  absl::Status Take(const std::string& path);

  const Spec& spec_;
  const Options options_;
  const std::shared_ptr<SplitLedger> ledger_;
  std::vector<std::string> followed_;   // in order
  std::set<std::string> out_of_order_;  // logged once each
  absl::Time last_poll_ = absl::InfinitePast();
  std::atomic<int64_t> files_{0}, rows_{0}, bad_rows_{0};
};

}  // namespace tabular
}  // namespace pstrain

#endif  // PSTRAIN_MODELS_TABULAR_DATA_FOLLOWER_H_
