// What a scheduled closure can carry beside its own arguments: a share of something the coordinator
// deals out as workers ask for it (coordinator/split_ledger.h deals an epoch's data splits). The
// coordinator consults a closure's dealer when it picks a worker for it, when the closure ends, and
// when a worker fails:
//
//   queued --CanTake(w)?--> Deal(w): extra args --run on w--> Completed(w, outputs)
//                                                         \--> Returned(w)   (no success: the closure
//                                                                             goes back, or fails)
//   a worker found failed or restarted ----------------------> WorkerLost(w)
//
// Every call comes with the coordinator's lock held: a dealer must be quick, must not block, and
// must not call back into the coordinator. Calls for one dealer are serialized by that lock.
#ifndef PSTRAIN_COORDINATOR_CLOSURE_DEALER_H_
#define PSTRAIN_COORDINATOR_CLOSURE_DEALER_H_

#include <vector>

#include "common/metrics.h"
#include "common/tensor.h"

namespace pstrain {

class ClosureDealer {
 public:
  virtual ~ClosureDealer() = default;
  // Whether worker `worker` should take one more of this dealer's closures now. False holds the
  // closure in the queue for another worker (or for this one, once the dealer's state changes: a
  // completion or a lost worker).
  virtual bool CanTake(int worker) = 0;
  // The extra arguments of a closure about to run on `worker`, appended after its own (a closure
  // sent again after a failure is dealt again: its earlier extra arguments are dropped).
  virtual std::vector<Tensor> Deal(int worker) = 0;
  // A closure dealt to `worker` ran there and succeeded, with `outputs`.
  virtual void Completed(int worker, const std::vector<Tensor>& outputs) = 0;
  // A closure dealt to `worker` ended without success (it runs again elsewhere, or fails the job).
  virtual void Returned(int worker) = 0;
  // `worker` failed or restarted: what it held of this dealer's is gone with it.
  virtual void WorkerLost(int worker) = 0;
  // The dealer's own metrics, added to the coordinator's (CoordinatorOptions::metrics). Default:
  // none.
  virtual void AddMetrics(MetricsRegistry::Sink& out) {}
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_CLOSURE_DEALER_H_
