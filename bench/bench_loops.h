// What the benchmarks share: JSON output lines, timed loops (one call at a time, or N calls kept in
// flight), and the process's CPU time, so that each figure can say how many cores it took.
#ifndef PSTRAIN_BENCH_BENCH_LOOPS_H_
#define PSTRAIN_BENCH_BENCH_LOOPS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "ps/ps_client.h"

namespace pstrain {

double Round(double x, int digits = 3);
// The median of `v` (the mean of the middle two for an even count); 0 when empty.
double Median(std::vector<double> v);
// One JSON object on its own line on stdout.
void Emit(const nlohmann::json& line);
// Prints "bench: <what>: <status>" and exits 1.
[[noreturn]] void Die(const absl::Status& status, absl::string_view what);
// User + system CPU seconds of this process so far.
double ProcessCpuSeconds();

struct Timing {
  absl::Duration warmup;
  absl::Duration duration;
};

// What a timed run did.
struct RunResult {
  int64_t calls = 0;       // completed in the timed window
  double seconds = 0;      // length of the timed window
  double cpu_cores = 0;    // process CPU time (client + server + gRPC) / window
  absl::Status status;

  double per_sec() const { return calls / seconds; }
  double us_per_call() const { return seconds * 1e6 / std::max<int64_t>(calls, 1); }
};

// Calls `call` back to back on this thread: untimed for the warm-up, then timed.
RunResult RunSerial(const Timing& timing, const std::function<absl::Status()>& call);

// Keeps `slots` async calls in flight: each slot re-issues its next call from the completion of
// the previous one. Counts completions in a timed window that opens after the warm-up, then stops
// re-issuing and waits for the calls in flight to drain.
class InFlightLoop {
 public:
  // issue(slot, done): starts the slot's next call; `done` must run exactly once.
  using Issue = std::function<void(int slot, PsClient::Done done)>;

  static RunResult Run(const Timing& timing, int slots, Issue issue);

 private:
  InFlightLoop(int slots, Issue issue) : issue_(std::move(issue)), active_(slots) {}
  void Start(int slot);
  void OnDone(int slot, absl::Status status);

  const Issue issue_;
  std::atomic<int64_t> completed_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> active_;
  absl::Notification drained_;
  absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// Slot `slot` of `slots` owns requests slot, slot + slots, ... of `sets`, and cycles over them: no
// request is ever used by two calls at once, and every id set is used.
class SlotCursor {
 public:
  SlotCursor(int slots, int sets) : slots_(slots), sets_(sets), next_(slots) {
    for (int s = 0; s < slots; ++s) next_[s] = s;
  }
  int Next(int slot) {
    const int r = next_[slot];
    next_[slot] = r + slots_ < sets_ ? r + slots_ : slot;
    return r;
  }

 private:
  const int slots_;
  const int sets_;
  std::vector<int> next_;  // each touched only by its slot's (serial) calls
};

}  // namespace pstrain

#endif  // PSTRAIN_BENCH_BENCH_LOOPS_H_
