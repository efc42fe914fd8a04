// Gradient staleness on one fixed shard under asynchronous training: how many gradients were
// applied to the shard between the read a gradient was computed on and that gradient's own apply
// (0: nothing came between, as in plain SGD). The ps learns it without any help from the client:
// a training lookup carries its step, and so does the update that step sends, so the shard notes
// its apply count (its version) at each training read and looks it up again when that step's
// gradient arrives. A gradient computed on rows that came back from an earlier push (a push with
// return_rows: worker/dense_turns.h) carries their version itself (UpdateOp.read_version).
//
// It is measured (Summary, exported as metrics by the ps) and, with a StalenessScaling other than
// NONE on the shard's optimizer, it scales that gradient's learning rate (ScaleFor).
#ifndef PSTRAIN_PS_STALENESS_H_
#define PSTRAIN_PS_STALENESS_H_

#include <array>
#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/ps_service.pb.h"

namespace pstrain {

// The factor a gradient of staleness `staleness` (>= 0; -1: unknown, factor 1) multiplies its
// learning rate by under `scaling` (OptimizerDef::StalenessScaling).
double StalenessFactor(OptimizerDef::StalenessScaling scaling, int64_t staleness);

// "none", "inverse", "inverse_sqrt" (as flags and specs write them). Errors: kInvalidArgument
// naming the text and the choices.
absl::StatusOr<OptimizerDef::StalenessScaling> ParseStalenessScaling(absl::string_view text);
const char* StalenessScalingName(OptimizerDef::StalenessScaling scaling);

// Thread-safe (one small lock; a training read and a gradient's apply take it once each).
class StalenessTracker {
 public:
  // Reads noted and not yet matched by their gradient, at most; past it the oldest step's is
  // dropped (a step that failed and was never pushed, or a client that reads without pushing).
  static constexpr size_t kMaxOpenReads = 4096;
  // Staleness is counted exactly up to this many; more count as this many in the summary.
  static constexpr int64_t kMaxCounted = 4095;

  // Step `step` (> 0) read the shard when `version` gradients had been applied to it. A later read
  // by the same step (a step run again) replaces the earlier one.
  void NoteRead(int64_t step, int64_t version);

  // Step `step`'s gradient is applied after `version` others: its staleness (version - the
  // version its read saw, at least 0), or -1 when its read is unknown (step 0, a read never noted
  // or dropped, a gradient sent twice). `read_version` > 0: the version the gradient says it was
  // computed on, which stands instead of a read noted for the step. Counted in the summary when
  // known.
  int64_t OnApply(int64_t step, int64_t version, int64_t read_version = 0);

  // Drops step `step`'s read, if noted (its gradient is not one whose staleness is counted).
  void Forget(int64_t step);

  struct Summary {
    int64_t count = 0;   // gradients whose staleness is known
    int64_t unknown = 0; // gradients applied with a step but no read noted
    double mean = 0;
    int64_t p50 = 0, p90 = 0, p99 = 0, max = 0;
  };
  Summary summary() const;

 private:
  // The smallest staleness with at least q of the counted gradients at or below it.
  int64_t QuantileLocked(double q) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<int64_t, int64_t> open_reads_ ABSL_GUARDED_BY(mu_);  // step -> version read
  std::array<int64_t, kMaxCounted + 1> counts_ ABSL_GUARDED_BY(mu_) = {};
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t unknown_ ABSL_GUARDED_BY(mu_) = 0;
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_STALENESS_H_
