// Synchronous training across workers: TensorFlow's MultiWorkerMirroredStrategy on a workers-only
// cluster, and the hybrid strategy (PERSIA's design) beside ps tasks. Every worker holds a replica
// of every fixed variable (a ps task of its own, in its process), starts from the chief's values
// (broadcast once set up or restored), trains on its share of each step's batch
// (models/batches.h, ReplicaShare), and all-reduces the gradients with the others every step
// before applying them (worker/mirrored_ps_client.h, collective/ over Gloo), so the replicas stay
// identical. Each worker runs the same trainer loop (SPMD; several steps in flight, their dense
// parts in step order: worker/dense_turns.h); worker 0, the
// chief, saves checkpoints (the same RocksDB format the parameter-server strategy writes: a
// checkpoint from one strategy restores into the other), validates, writes TensorBoard scalars and
// evaluates. The others restore from the same checkpoints and stay quiet.
//
// Hybrid (MirroredOptions::shared_ps not empty): the dynamic tables live on the shared ps tasks
// and every worker looks them up and pushes their gradients there asynchronously, as in the
// parameter-server strategy; only the fixed variables (the dense layers) are replicated and
// all-reduced. A step's pushes to the shared ps tasks land before its all-reduce starts
// (PsClient::synchronous), so a checkpoint the chief saves after step s holds every worker's
// updates of steps < s. The chief creates and restores the tables; the others restore only their
// replica.
//
// Failure (restart from the last checkpoint, not elastic): when a worker dies or stops answering,
// every worker's all-reduce fails within seconds (collective/collective_group.h) and that attempt
// ends. The job then forms the group again (a new generation), every worker restores the latest
// checkpoint, and training goes on: nothing saved is lost, the steps since the last checkpoint
// are trained again. A shared ps task that restarts does the same in the hybrid strategy. After
// max_restarts such restarts the job fails with the last error.
//
// Two ways to run: TrainMultiWorkerMirrored runs every worker in this process (threads, each with
// its own servers and TCP connections; the default, and what tests use); TrainMirroredTask runs
// one worker of a cluster of processes (TF_CONFIG), the chief serving the rendezvous at its
// address. Not supported: dynamic tables without shared ps tasks (their key sets would differ by
// replica; train them with the parameter-server or hybrid strategy) and early stopping.
#ifndef PSTRAIN_TRAINER_MIRRORED_STRATEGY_H_
#define PSTRAIN_TRAINER_MIRRORED_STRATEGY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/cluster_spec.h"
#include "collective/collective_group.h"
#include "proto/collective.pb.h"
#include "models/devices.h"
#include "models/model.h"
#include "ps/ps_client.h"
#include "trainer/trainer.h"

namespace pstrain {

struct MirroredOptions {
  // Workers (replicas). Default 2; at least 1.
  int num_workers = 2;
  // Restarts from the latest checkpoint after a worker failure. Default 3.
  int max_restarts = 3;
  // Dense gradients are all-reduced in buckets of this many bytes. Default 4 MiB.
  int64_t bucket_bytes = 4 << 20;
  // Steps each worker has in flight at once: while one step computes and all-reduces its dense
  // gradients, the next ones read their batches and look up their table rows. Their dense parts
  // still run one at a time, in step order (worker/dense_turns.h), so the replicas stay exactly
  // synchronous. Default 4; 1: one step at a time.
  int steps_in_flight = 4;
  // How long one all-reduce may take. Default 60 s.
  absl::Duration collective_timeout = absl::Seconds(60);
  // How long forming the group waits for every worker (a restarted one included). Default 60 s;
  // a job of separate processes waits longer for a killed worker to be started again.
  absl::Duration join_timeout = absl::Seconds(60);
  // Hybrid: the shared ps tasks ("host:port") holding the dynamic tables. Default: none
  // (multi-worker mirrored: no ps tasks).
  std::vector<std::string> shared_ps;
  // In-process hybrid: each shared ps task's memory budget (PsServerOptions). Default 0: none.
  int64_t shared_ps_memory_budget_bytes = 0;
  std::string shared_ps_disk_dir;
  // Tests: called on each worker's thread once its group is formed (attempt 0, 1, ...), before
  // training; and after each of its steps. An error ends that worker's attempt: its servers and
  // connections go away. kUnavailable stands for a crash (the job restarts from the latest
  // checkpoint); any other code is the worker's own error, which ends the job.
  std::function<void(int attempt, int rank, CollectiveGroup* group)> on_group_formed;
  std::function<absl::Status(int attempt, int rank, int64_t step)> after_step;
  // Tests: called on each worker's thread when its training ended well, with the address of its
  // replica (a ps task holding every variable), before its servers stop.
  std::function<void(int rank, const std::string& replica_address)> on_trained;
  // The process's replica groups (models/devices.h), which this process's workers take their
  // devices from (shared with the rest of the process, e.g. a sidecar evaluator). Default null:
  // the job makes its own.
  std::shared_ptr<ReplicaGroups> replica_groups;
};

// What the job did, beside the chief's TrainResult.
struct MirroredResult {
  TrainResult chief;
  // Attempts made (1 without a failure) and each failed attempt's error.
  int attempts = 0;
  std::vector<std::string> failures;
};

// Every worker starts from the chief's values: each float32 shard of this worker's `replica` is
// read, broadcast from rank 0 (in the replicas' common shard order) and assigned back. Optimizer
// slots are not (a fresh start has the same initial slots everywhere, and a resumed one restored
// the same checkpoint on every worker). Errors: the group's and the replica's;
// kFailedPrecondition when the workers hold different variables.
absl::Status BroadcastFromChief(CollectiveGroup* group, PsClient* replica);

// The generation a rank (re)starting should join, given where the group stands (`status`, from
// the rendezvous) and the generation this rank last joined (0: none): the group's newest while it
// is still forming, else the next; never one at or below `last`.
uint64_t GenerationToJoin(const RendezvousStatusResponse& status, uint64_t last);

// Trains `model_name` with `model_options` on `mirrored.num_workers` synchronous workers.
// `options` are the chief's (checkpoint_dir, logdir, validation, ...); restores come from
// options.checkpoint_dir. Errors: kInvalidArgument for options this strategy can't honour
// (early stopping, a model with dynamic tables, restarts without a checkpoint_dir to resume
// from); the model's and trainer's errors; kUnavailable / kDeadlineExceeded when a worker failure
// outlasts max_restarts.
absl::StatusOr<MirroredResult> TrainMultiWorkerMirrored(const std::string& model_name,
                                                        const ModelOptions& model_options,
                                                        const TrainerOptions& options,
                                                        const MirroredOptions& mirrored);

// In-process hybrid: starts `num_shared_ps` shared ps tasks in this process, then trains as
// TrainMultiWorkerMirrored with them as mirrored.shared_ps. Errors: as above, and kUnavailable if
// a ps task can't be started.
absl::StatusOr<MirroredResult> TrainHybridInProcess(const std::string& model_name,
                                                    const ModelOptions& model_options,
                                                    const TrainerOptions& options,
                                                    MirroredOptions mirrored, int num_shared_ps);

// Where this process stands in a synchronous job of separate processes.
struct MirroredTask {
  // The cluster spec, with this process's task ("worker" i, or "chief": rank 0, the workers then
  // ranks 1..N). Its "ps" tasks, if any, are the hybrid strategy's shared ps tasks.
  ClusterSpec spec;
  // Where the chief serves the rendezvous, e.g. "0.0.0.0:2222" (its spec address's port).
  // Default: the chief's spec address.
  std::string rendezvous_listen;
  // Hybrid: use the spec's ps tasks as shared ps tasks (else a spec with ps tasks is an error).
  bool hybrid = false;
};

// Trains this process's worker of a synchronous job: joins the group (a later generation after a
// failure; a restarted process finds the current one through the rendezvous), trains, and on a
// group failure restores the latest checkpoint and goes on (up to max_restarts). The chief's
// result carries the metrics; the other workers' their own counts. Errors: kInvalidArgument for a
// spec without this task, a task that is not a worker or the chief, ps tasks without `hybrid`
// (or none with it); kUnavailable when the chief's rendezvous can't be reached within
// join_timeout; otherwise as TrainMultiWorkerMirrored.
absl::StatusOr<MirroredResult> TrainMirroredTask(const std::string& model_name,
                                                 const ModelOptions& model_options,
                                                 const TrainerOptions& options,
                                                 MirroredOptions mirrored, const MirroredTask& task);

}  // namespace pstrain

#endif  // PSTRAIN_TRAINER_MIRRORED_STRATEGY_H_
