// The turns one worker's training steps take at the dense part of a model (its fixed variables:
// the layers every example goes through), so that a step's dense gradient is computed on weights
// that already hold the worker's earlier steps' dense updates.
//
// A worker runs many steps at once (the parameter-server strategy keeps up to 16 closures in
// flight per worker) to hide the ps round trips. If each step read the dense weights at its start
// and pushed its gradient at its end, every gradient would be computed on weights that the
// worker's other steps, and the other workers', had changed since: its staleness (ps/staleness.h)
// grows with the steps in flight, about 4 per worker, and it costs accuracy (docs/training.md,
// "Staleness and accuracy"). With turns, the steps still overlap in everything else (reading the
// batch, looking up and pushing embedding rows), but their dense parts do not: a step reads the
// dense weights once it holds a turn and gives the turn back once its dense gradients have landed
// on the ps, so the next step's read sees them. With one turn (the default), a gradient's
// staleness is only the other workers' dense updates that land meanwhile.
//
//   closure:  batch, table lookups ──► Take() ─ dense read ─ compute ─ dense push ─► Release ─► table push
//                                      (waits)  └──────────── the turn ────────────┘
//
// With one turn, the step holding it also has the worker's DenseCache (ps/dense_cache.h): the
// weights as the previous step's push returned them, so a step reads them without a round trip
// to the ps, and the chain of turns costs one round trip per step (the push) instead of two.
//
// Turns are granted in the order steps ask for them (first come, first served), or in step order
// (Take's in_step_order): under a synchronous strategy every worker runs every step and
// all-reduces each step's dense gradients in its turn, so every worker must take them in the same
// order. A worker takes its turns one way or the other, not both. Thread-safe.
#ifndef PSTRAIN_WORKER_DENSE_TURNS_H_
#define PSTRAIN_WORKER_DENSE_TURNS_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ps/dense_cache.h"

namespace pstrain {

struct DenseTurnsOptions {
  // How many steps may hold a turn at once (their dense parts overlap). Default 1; 0: no limit
  // (every step takes a turn at once: the plain asynchronous order). With more than one, no
  // step gets the cache. Turns in step order are one at a time whatever this says.
  int turns = 1;
};

class DenseTurns;

// One step's place at the dense part: empty until Take(); the turn goes back at Release() or
// when the DenseTurn is destroyed (so a step that fails on the way gives it back). Movable.
class DenseTurn {
 public:
  DenseTurn() = default;
  DenseTurn(DenseTurn&& other) noexcept;
  DenseTurn& operator=(DenseTurn&& other) noexcept;
  DenseTurn(const DenseTurn&) = delete;
  DenseTurn& operator=(const DenseTurn&) = delete;
  ~DenseTurn() { Release(); }

  bool held() const { return turns_ != nullptr; }
  // The worker's cache of dense weights, the holder's alone while it holds the turn; null when
  // none is held or several steps may hold turns at once (DenseTurnsOptions::turns != 1).
  DenseCache* cache() const;
  // Gives the turn back (nothing if none is held).
  void Release();

 private:
  friend class DenseTurns;
  DenseTurn(DenseTurns* turns, int64_t step, bool in_step_order)
      : turns_(turns), step_(step), in_step_order_(in_step_order) {}
  DenseTurns* turns_ = nullptr;
  int64_t step_ = 0;
  bool in_step_order_ = false;
};

class DenseTurns {
 public:
  explicit DenseTurns(DenseTurnsOptions options = {}) : options_(options) {}

  // Waits for a turn for `step` (global step) and returns it, held. `in_step_order`: step s's
  // turn waits until step s - 1's has been given back; the first step to take a turn starts the
  // order, so the first step of a run must ask alone (the synchronous strategies run it alone:
  // TrainerOptions::first_step_alone), and every later step must take its turn once.
  DenseTurn Take(int64_t step, bool in_step_order = false);

  const DenseTurnsOptions& options() const { return options_; }
  // Tests: turns held now; whether `n` steps are waiting for a turn within `timeout`.
  int held() const;
  bool AwaitWaiting(int n, absl::Duration timeout) const;

 private:
  friend class DenseTurn;
  void Give(int64_t step, bool in_step_order);

  const DenseTurnsOptions options_;
  DenseCache cache_;  // used by the holder of the one turn only
  mutable absl::Mutex mu_;
  // Below: guarded by mu_.
  int held_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  // First come, first served: tickets handed out and the next one to serve.
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t serving_ ABSL_GUARDED_BY(mu_) = 0;
  // In step order: the step whose turn is next (-1: the first to ask).
  int64_t next_step_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DENSE_TURNS_H_
