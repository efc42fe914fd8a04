// What the Python module holds for one cluster: its ps clients, the variables and tables created
// through it, checkpoints, and the threads that run asynchronous calls. Plain C++ (no Python
// types), so the bindings (module.cc) only convert arrays and errors.
//
//   Session::InProcess(options)  starts an in-process cluster (real servers on picked ports) and
//                                connects to it;
//   Session::Connect(spec)       connects to the ps tasks of a running cluster (TF_CONFIG JSON or
//                                the path of such a file).
#ifndef PSTRAIN_PYTHON_SESSION_H_
#define PSTRAIN_PYTHON_SESSION_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "cluster/cluster_spec.h"
#include "common/thread_pool.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/in_process_cluster.h"
#include "coordinator/variable_creator.h"
#include "worker/ps_connection.h"

namespace pstrain {

// The result of a call run on the session's threads. Thread-safe.
class PendingCall {
 public:
  void Finish(absl::Status status) {
    status_ = std::move(status);
    done_.Notify();
  }
  bool done() const { return done_.HasBeenNotified(); }
  // Waits (up to `timeout`; infinite by default) and returns the call's status, or
  // kDeadlineExceeded if it is still running then.
  absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration()) const;

 private:
  absl::Notification done_;
  absl::Status status_;  // written once, before done_ is notified
};

struct SessionTableOptions {
  std::string name;
  int64_t dim = 0;
  int num_shards = 0;  // 0: one per ps task
  // InitializerDef, OptimizerDef and DynamicTableDef in protobuf's JSON form (proto/
  // ps_service.proto's field names); empty: the defaults (zeros, no optimizer, every key stored).
  std::string initializer_json;
  std::string optimizer_json;
  std::string options_json;
};

struct SessionVariableOptions {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype = "float32";
  // "none", "fixed", "min_size", "max_size" and their arguments (PartitionerOptions).
  std::string partitioner = "none";
  int num_shards = 0;
  int64_t min_shard_bytes = 0;  // 0: the partitioner's default
  int64_t max_shard_bytes = 0;
  int max_shards = -1;          // -1: the partitioner's default
  std::string initializer_json;
  std::string optimizer_json;
};

// Thread-safe.
class Session {
 public:
  // Errors: kInvalidArgument (bad counts), kUnavailable (a server can't start).
  static absl::StatusOr<std::unique_ptr<Session>> InProcess(InProcessClusterOptions options);
  // Errors: as ClusterSpec::FromFlagValue (kInvalidArgument naming the field, kNotFound for a
  // missing file), kInvalidArgument when the spec has no ps task.
  static absl::StatusOr<std::unique_ptr<Session>> Connect(const std::string& spec);

  ~Session();

  const ClusterSpec& spec() const { return spec_; }
  bool in_process() const { return cluster_ != nullptr; }
  InProcessCluster* cluster() const { return cluster_.get(); }
  PsConnection* connection() const { return connection_.get(); }
  VariableCreator* creator() const { return creator_.get(); }

  // Creates (or finds, if created with the same spec) a table or variable.
  // Errors: kInvalidArgument (a bad option, naming it; JSON that is not the message's), and
  // VariableCreator's.
  absl::StatusOr<DynamicTable> CreateTable(const SessionTableOptions& options);
  absl::StatusOr<ShardedVariable> CreateVariable(const SessionVariableOptions& options);
  // A table or variable the ps tasks hold (created by this session or by another process).
  // Errors: kNotFound naming it, the ps errors.
  absl::StatusOr<DynamicTable> FindTable(const std::string& name);
  absl::StatusOr<ShardedVariable> FindVariable(const std::string& name);

  // Saves every table and variable this session created into `dir` at `step`; returns the
  // checkpoint's path. Errors: CheckpointManager's.
  absl::StatusOr<std::string> Save(const std::string& dir, int64_t step, bool incremental,
                                   int keep);
  // Restores `path` (a checkpoint, or a directory: its latest) into them; returns the step.
  // Errors: kNotFound (no checkpoint), CheckpointManager's.
  absl::StatusOr<RestoredCheckpoint> Restore(const std::string& path);

  // Runs `fn` on the session's threads; its status goes into the returned call.
  std::shared_ptr<PendingCall> Run(std::function<absl::Status()> fn);

  // Stops the in-process cluster's tasks (a no-op for a connected one). Idempotent.
  void Shutdown();

 private:
  Session(ClusterSpec spec, std::unique_ptr<InProcessCluster> cluster);
  absl::StatusOr<CheckpointManager*> ManagerFor(const std::string& dir, bool incremental, int keep)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ClusterSpec spec_;
  std::unique_ptr<InProcessCluster> cluster_;  // null when connected
  std::unique_ptr<PsConnection> connection_;
  std::unique_ptr<VariableCreator> creator_;
  std::unique_ptr<ThreadPool> pool_;
  absl::Mutex mu_;
  // Below: guarded by mu_. One manager per checkpoint directory (and its options).
  std::map<std::string, std::unique_ptr<CheckpointManager>> managers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_PYTHON_SESSION_H_
