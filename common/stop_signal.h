// A graceful stop for a job's driver (the coordinator binary): the first SIGINT or SIGTERM only
// sets a flag, which the trainer polls between steps (TrainerOptions::stop_requested): it then
// collects the steps in flight, saves a final checkpoint at the step reached, evaluates and prints
// its summary. A second signal, a second or more after the first, ends the process at once, as the
// signal's default action would (one sooner is the first delivered twice, as `timeout` does).
//
// Kubernetes stops a pod with SIGTERM, then SIGKILL after its grace period: a driver that gets the
// grace period it needs for one checkpoint loses nothing trained.
#ifndef PSTRAIN_COMMON_STOP_SIGNAL_H_
#define PSTRAIN_COMMON_STOP_SIGNAL_H_

namespace pstrain {

// Installs the handlers for SIGINT and SIGTERM (replacing the failure signal handler's SIGTERM).
void InstallStopSignals();

// Whether a stop signal arrived since InstallStopSignals; which (0: none).
bool StopSignalled();
int StopSignalNumber();

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_STOP_SIGNAL_H_
