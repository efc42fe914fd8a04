// A progress line for training loops:
//   step 1200/10000 (12.0%)  5234.1 ex/s  loss 0.4312  elapsed 1m05s  eta 2m48s
// Examples/s and loss are over a recent window (default the last 10 s); the ETA is the remaining
// steps at the window's step rate. On a terminal one line is rewritten in place ('\r') at most
// ~10 times a second; elsewhere (a log file, a pipe) plain lines are written at most every 5 s.
#ifndef PSTRAIN_TRAINER_PROGRESS_H_
#define PSTRAIN_TRAINER_PROGRESS_H_

#include <unistd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pstrain {

struct ProgressOptions {
  // The step the run ends at, for "step N/T", the percentage and the ETA. Default 0: unknown
  // (neither is shown).
  int64_t total_steps = 0;
  // The step and the examples count the run starts from (a run resumed from a checkpoint), so
  // rates count only this run's work. Default 0 and 0.
  int64_t initial_step = 0;
  int64_t initial_examples = 0;
  // The examples/s shown: the examples counted times this. A synchronous worker counts its own
  // part of each batch; the chief of N shows about the job's rate with N. Default 1.
  double examples_scale = 1;

  // Where lines go: `out` if set, else the file descriptor `fd`. Default: fd 2 (stderr).
  std::ostream* out = nullptr;
  int fd = STDERR_FILENO;
  // Whether the output is a terminal (rewrite one line with '\r') or not (plain lines).
  // Default (unset): isatty(fd) when writing to `fd`, false when writing to `out`.
  std::optional<bool> is_tty;

  // On a terminal, the least time between two rewrites of the line. Default 100 ms.
  absl::Duration tty_interval = absl::Milliseconds(100);
  // Elsewhere, the least time between two lines. Default 5 s.
  absl::Duration line_interval = absl::Seconds(5);
  // How far back examples/s, the loss mean and the ETA's step rate look. Default 10 s.
  absl::Duration window = absl::Seconds(10);

  // The time now. Default (empty): absl::Now.
  std::function<absl::Time()> clock;
  // A note appended to each line (e.g. the data dealt: "splits 120/900, 3 again"), read when the
  // line is drawn; empty: none. Default: none.
  std::function<std::string()> note;
};

// Reports the progress of one training run. Write errors on the output are ignored (progress is
// best effort). Thread-safe.
class ProgressReporter {
 public:
  // Starts the clock for "elapsed".
  // Errors: kInvalidArgument (naming the field) if total_steps, initial_step or initial_examples is
  // negative, an interval is negative, window is not positive, or fd is negative with no `out`.
  static absl::StatusOr<std::unique_ptr<ProgressReporter>> Create(ProgressOptions options = {});

  // Calls Finish() if it was not called.
  virtual ~ProgressReporter() = default;

  // Records that the run is at `step` with `examples_done` examples processed in all (both
  // counted from the start of training, not per call) and the latest batch loss `loss`; prints
  // the line if the interval since the last one has passed (the first Update always prints).
  // Ignored after Finish().
  virtual void Update(int64_t step, int64_t examples_done, double loss) = 0;

  // Prints the final line (examples/s over the whole run, "done" in place of the ETA) and ends
  // it with a newline. Later calls do nothing.
  virtual void Finish() = 0;

  // Prints `line` on a line of its own (a validation's result, say): on a terminal over the
  // progress line, which the next Update draws again below it.
  virtual void Message(const std::string& line) = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_TRAINER_PROGRESS_H_
