#include "coordinator/in_process_cluster.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "common/logging.h"
#include "cluster/port_picker.h"
#include "common/status_macros.h"

namespace pstrain {

absl::StatusOr<InProcessClusterOptions> ParseInProcessSpec(absl::string_view text) {
  constexpr absl::string_view kPrefix = "in_process";
  if (!absl::StartsWith(text, kPrefix)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not an in-process spec (in_process:workers=N,ps=M)"));
  }
  absl::string_view rest = text.substr(kPrefix.size());
  InProcessClusterOptions options;
  if (rest.empty()) return options;
  if (rest[0] != ':') {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\": expected in_process:workers=N,ps=M"));
  }
  rest.remove_prefix(1);
  for (absl::string_view part : absl::StrSplit(rest, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    int value = 0;
    if (!absl::SimpleAtoi(kv.second, &value) || value < 1 || value > 64) {
      return absl::InvalidArgumentError(absl::StrCat(
          "in-process spec \"", text, "\": ", kv.first, "=", kv.second,
          " must be a whole number from 1 to 64"));
    }
    if (kv.first == "workers" || kv.first == "worker") {
      options.num_workers = value;
    } else if (kv.first == "ps") {
      options.num_ps = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("in-process spec \"", text,
                                                     "\": unknown key \"", kv.first,
                                                     "\" (expected workers, ps)"));
    }
  }
  return options;
}

absl::StatusOr<std::unique_ptr<InProcessCluster>> InProcessCluster::Start(
    const InProcessClusterOptions& options) {
  if (options.num_workers < 1 || options.num_ps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an in-process cluster needs at least one worker and one ps, got workers=",
        options.num_workers, " ps=", options.num_ps));
  }
  ClusterSpec::Jobs jobs;
  jobs[kPs] = options.external_ps;
  for (const auto& [job, count] :
       {std::pair<const char*, int>{kPs, options.num_ps}, {kWorker, options.num_workers}}) {
    for (int i = 0; i < count; ++i) {
      ASSIGN_OR_RETURN(int port, PickUnusedPort());
      jobs[job].push_back(absl::StrCat(options.host, ":", port));
    }
  }
  ASSIGN_OR_RETURN(ClusterSpec spec, ClusterSpec::Create(std::move(jobs)));
  std::unique_ptr<InProcessCluster> cluster(new InProcessCluster(std::move(spec)));
  cluster->num_external_ps_ = static_cast<int>(options.external_ps.size());
  cluster->registry_ = options.registry;
  cluster->mirror_ = options.mirror;
  cluster->ps_memory_budget_bytes_ = options.ps_memory_budget_bytes;
  cluster->ps_disk_dir_ = options.ps_disk_dir;
  if (options.metrics_port >= 0) {
    int next = options.metrics_port;
    for (const TaskRef& task : cluster->spec_.AllTasks()) {
      if (task.type == kPs && task.index < cluster->num_external_ps_) continue;
      TaskMetrics& m = cluster->metrics_[task];
      m.registry = std::make_unique<MetricsRegistry>(Labels{{"task", task.ToString()}});
      ASSIGN_OR_RETURN(m.server, MetricsHttpServer::Start(options.host, next, m.registry.get()));
      if (next > 0) ++next;
    }
  }
  {
    absl::MutexLock lock(&cluster->mu_);
    for (const TaskRef& task : cluster->spec_.AllTasks()) {
      if (task.type == kPs && task.index < cluster->num_external_ps_) continue;
      RETURN_IF_ERROR(cluster->StartTaskLocked(task));
    }
  }
  LOG(INFO) << "in-process cluster up: " << cluster->spec_.ToJson();
  return cluster;
}

InProcessCluster::~InProcessCluster() { Shutdown(); }

absl::Status InProcessCluster::CheckKnown(const TaskRef& task) const {
  if ((task.type != kPs && task.type != kWorker) || task.index < 0 ||
      task.index >= spec_.num_tasks(task.type) ||
      (task.type == kPs && task.index < num_external_ps_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("task ", task.ToString(), " is not in this in-process cluster"));
  }
  return absl::OkStatus();
}

absl::Status InProcessCluster::StartTaskLocked(const TaskRef& task) {
  const std::string address = *spec_.address(task);
  if (task.type == kPs) {
    PsServerOptions options;
    options.task_index = task.index;
    options.listen_address = address;
    options.memory_budget_bytes = ps_memory_budget_bytes_;
    options.disk_dir = ps_disk_dir_;
    if (auto m = metrics_.find(task); m != metrics_.end()) options.metrics = m->second.registry.get();
    ASSIGN_OR_RETURN(ps_[task.index], PsServer::Start(options));
  } else {
    WorkerServerOptions options;
    options.task_index = task.index;
    options.listen_address = address;
    options.registry = registry_;
    options.ps_addresses = spec_.tasks(kPs);
    options.num_workers = spec_.num_workers();
    options.mirror = mirror_;
    if (mirror_.group != nullptr) {
      // A synchronous worker's replica is its own ps task, in this process: reached directly.
      std::map<int, const PsServer*> own;
      for (const auto& [index, server] : ps_) own[index] = server.get();
      options.local_ps = [own](int ps_task) -> std::unique_ptr<PsClient> {
        auto it = own.find(ps_task);
        return it == own.end() ? nullptr : it->second->NewLocalClient();
      };
    }
    if (auto m = metrics_.find(task); m != metrics_.end()) options.metrics = m->second.registry.get();
    ASSIGN_OR_RETURN(workers_[task.index], WorkerServer::Start(options));
  }
  return absl::OkStatus();
}

absl::Status InProcessCluster::StopTask(const TaskRef& task) {
  RETURN_IF_ERROR(CheckKnown(task));
  // Take the server out under the lock, shut it down outside (Shutdown waits for handlers).
  std::unique_ptr<PsServer> ps;
  std::unique_ptr<WorkerServer> worker;
  {
    absl::MutexLock lock(&mu_);
    if (task.type == kPs) {
      auto it = ps_.find(task.index);
      if (it != ps_.end()) {
        ps = std::move(it->second);
        ps_.erase(it);
      }
    } else {
      auto it = workers_.find(task.index);
      if (it != workers_.end()) {
        worker = std::move(it->second);
        workers_.erase(it);
      }
    }
  }
  if (ps == nullptr && worker == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("task ", task.ToString(), " is not running"));
  }
  LOG(INFO) << "stopping " << task.ToString();
  return absl::OkStatus();  // the unique_ptrs shut the server down here
}

absl::Status InProcessCluster::StartTask(const TaskRef& task) {
  RETURN_IF_ERROR(CheckKnown(task));
  absl::MutexLock lock(&mu_);
  bool running = task.type == kPs ? ps_.count(task.index) > 0 : workers_.count(task.index) > 0;
  if (running) {
    return absl::FailedPreconditionError(
        absl::StrCat("task ", task.ToString(), " is already running"));
  }
  return StartTaskLocked(task);
}

absl::Status InProcessCluster::RestartTask(const TaskRef& task) {
  RETURN_IF_ERROR(StopTask(task));
  return StartTask(task);
}

bool InProcessCluster::IsRunning(const TaskRef& task) const {
  absl::MutexLock lock(&mu_);
  return task.type == kPs ? ps_.count(task.index) > 0 : workers_.count(task.index) > 0;
}

absl::StatusOr<uint64_t> InProcessCluster::Incarnation(const TaskRef& task) const {
  RETURN_IF_ERROR(CheckKnown(task));
  absl::MutexLock lock(&mu_);
  if (task.type == kPs) {
    auto it = ps_.find(task.index);
    if (it != ps_.end()) return it->second->identity().incarnation;
  } else {
    auto it = workers_.find(task.index);
    if (it != workers_.end()) return it->second->identity().incarnation;
  }
  return absl::FailedPreconditionError(absl::StrCat("task ", task.ToString(), " is not running"));
}

void InProcessCluster::Shutdown() {
  std::map<int, std::unique_ptr<PsServer>> ps;
  std::map<int, std::unique_ptr<WorkerServer>> workers;
  {
    absl::MutexLock lock(&mu_);
    ps.swap(ps_);
    workers.swap(workers_);
  }
  // Workers first (they are clients of the ps tasks), then the ps tasks.
  workers.clear();
  ps.clear();
}

std::map<std::string, std::string> InProcessCluster::metrics_addresses() const {
  std::map<std::string, std::string> out;
  for (const auto& [task, m] : metrics_) out[task.ToString()] = m.server->address();
  return out;
}

std::string InProcessCluster::RenderMetrics() const {
  std::string out;
  for (const auto& [task, m] : metrics_) out += m.registry->Render();
  return out;
}

}  // namespace pstrain
