// The cluster spec: which jobs and tasks exist, and (optionally) which task this process is.
// The format is TensorFlow's TF_CONFIG:
//   {"cluster": {"chief": ["host:port"], "worker": [...], "ps": [...], "evaluator": [...]},
//    "task": {"type": "worker", "index": 0}}
// Validation follows TensorFlow's multi_worker_util plus what ParameterServerStrategy needs.
#ifndef PSTRAIN_CLUSTER_CLUSTER_SPEC_H_
#define PSTRAIN_CLUSTER_CLUSTER_SPEC_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/cluster.pb.h"

namespace pstrain {

inline constexpr char kChief[] = "chief";
inline constexpr char kWorker[] = "worker";
inline constexpr char kPs[] = "ps";
inline constexpr char kEvaluator[] = "evaluator";

// One task: a job name and an index into that job.
struct TaskRef {
  std::string type;
  int index = 0;

  std::string ToString() const;  // "ps:0"
  bool operator==(const TaskRef& o) const { return type == o.type && index == o.index; }
  bool operator<(const TaskRef& o) const {
    return type != o.type ? type < o.type : index < o.index;
  }
};

// Parses "type:index", e.g. "ps:1". Errors: kInvalidArgument naming the bad part.
absl::StatusOr<TaskRef> ParseTaskRef(absl::string_view text);

// What a spec is checked for: the parameter-server strategy needs a "worker" and a "ps" job;
// the synchronous strategies (multi-worker mirrored: workers only; hybrid: workers and ps tasks)
// need a "worker" job.
enum class SpecUse { kParameterServer, kSynchronous };

// A validated cluster spec. Immutable, cheap to copy, safe to share between threads.
class ClusterSpec {
 public:
  using Jobs = std::map<std::string, std::vector<std::string>>;

  // Builds and validates a spec. Every error is kInvalidArgument and names the field, job or task.
  static absl::StatusOr<ClusterSpec> Create(Jobs jobs, std::optional<TaskRef> task = std::nullopt,
                                            SpecUse use = SpecUse::kParameterServer);

  // Parses TF_CONFIG JSON text and validates it.
  static absl::StatusOr<ClusterSpec> FromJson(absl::string_view json,
                                              SpecUse use = SpecUse::kParameterServer);

  // What a --cluster_spec flag holds: JSON text (starts with '{') or the path of a JSON file.
  // Errors: kNotFound if the file can't be read; otherwise as FromJson.
  static absl::StatusOr<ClusterSpec> FromFlagValue(absl::string_view value,
                                                   SpecUse use = SpecUse::kParameterServer);

  const Jobs& jobs() const { return jobs_; }
  // The tasks of `job` in index order; empty if the job does not exist.
  const std::vector<std::string>& tasks(absl::string_view job) const;
  int num_tasks(absl::string_view job) const { return static_cast<int>(tasks(job).size()); }
  int num_workers() const { return num_tasks(kWorker); }
  int num_ps() const { return num_tasks(kPs); }
  // The address of `task`. Errors: kInvalidArgument if it is not in the spec.
  absl::StatusOr<std::string> address(const TaskRef& task) const;
  // Every task, jobs in name order, tasks in index order.
  std::vector<TaskRef> AllTasks() const;

  // The task this process is, if the spec named one.
  const std::optional<TaskRef>& task() const { return task_; }
  // A copy with `task` as this process's task, validated against the cluster.
  absl::StatusOr<ClusterSpec> WithTask(const TaskRef& task) const;

  std::string ToJson() const;  // TF_CONFIG form
  ClusterDef ToProto() const;

 private:
  ClusterSpec(Jobs jobs, std::optional<TaskRef> task, SpecUse use)
      : jobs_(std::move(jobs)), task_(std::move(task)), use_(use) {}

  Jobs jobs_;
  std::optional<TaskRef> task_;
  SpecUse use_ = SpecUse::kParameterServer;
};

}  // namespace pstrain

#endif  // PSTRAIN_CLUSTER_CLUSTER_SPEC_H_
