#include "trainer/mirrored_strategy.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <ostream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "collective/gloo_group.h"
#include "collective/rendezvous_client.h"
#include "collective/rendezvous_service.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/in_process_cluster.h"
#include "ps/ps_server.h"
#include "models/registry.h"
#include "worker/mirrored_ps_client.h"

namespace pstrain {
namespace {

// Whether `s` is a failure of the group (a worker died, stopped answering, or the group was
// broken), which a restart from the latest checkpoint can get past.
bool IsGroupFailure(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded ||
         s.code() == absl::StatusCode::kAborted || s.code() == absl::StatusCode::kCancelled ||
         absl::StrContains(s.message(), kSyncUpdateFailed);
}

// Discards what the quiet replicas would print.
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
};

}  // namespace

absl::Status BroadcastFromChief(CollectiveGroup* group, PsClient* replica) {
  ListShardsResponse shards;
  RETURN_IF_ERROR(replica->ListShards(ListShardsRequest(), &shards));
  std::vector<const VariableShardDef*> defs;
  for (const VariableShardDef& def : shards.shards()) {
    if (def.dtype() == DT_FLOAT32 && !def.has_dynamic()) defs.push_back(&def);
  }
  std::sort(defs.begin(), defs.end(),
            [](const VariableShardDef* a, const VariableShardDef* b) { return a->name() < b->name(); });
  // The shard list itself must match, or the broadcasts would not line up.
  std::string names;
  for (const VariableShardDef* def : defs) absl::StrAppend(&names, def->name(), ":", def->num_rows(), ";");
  std::vector<int64_t> hashes, counts;
  const int64_t mine = static_cast<int64_t>(std::hash<std::string>()(names));
  RETURN_IF_ERROR(group->AllGather(absl::MakeConstSpan(&mine, 1), &hashes, &counts));
  for (int r = 1; r < group->size(); ++r) {
    if (hashes[r] != hashes[0]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "multi_worker_mirrored: ", group->names()[r], " has other variables than ",
          group->names()[0], "; every worker must set up the same model"));
    }
  }
  for (const VariableShardDef* def : defs) {
    ReadRequest read;
    ReadOp* op = read.add_ops();
    op->set_shard(def->name());
    op->mutable_range()->set_row_begin(def->row_offset());
    op->mutable_range()->set_row_end(def->row_offset() + def->num_rows());
    ReadResponse values;
    RETURN_IF_ERROR(replica->Read(read, &values));
    std::string& bytes = *values.mutable_values(0);
    RETURN_IF_ERROR(group->Broadcast(reinterpret_cast<float*>(bytes.data()),
                                     static_cast<int64_t>(bytes.size() / sizeof(float)), 0));
    if (group->rank() == 0) continue;
    UpdateRequest assign;
    UpdateOp* set = assign.add_ops();
    set->set_shard(def->name());
    set->set_kind(UpdateOp::ASSIGN);
    *set->mutable_range() = op->range();
    set->set_values(std::move(bytes));
    set->set_dtype(DT_FLOAT32);
    UpdateResponse done;
    RETURN_IF_ERROR(replica->Update(assign, &done));
  }
  return absl::OkStatus();
}

uint64_t GenerationToJoin(const RendezvousStatusResponse& status, uint64_t last) {
  uint64_t next = status.generation();
  const bool forming = next > 0 && status.aborted().empty() && status.joined() < status.size();
  if (next == 0 || !forming) ++next;
  return std::max(next, last + 1);
}

namespace {

struct RankOutcome {
  absl::Status status;
  TrainResult result;
  bool joined = false;  // the group formed (a failure after this is the group's)
};

// Who a rank is in one attempt.
struct RankPlan {
  int rank = 0;
  int size = 1;
  std::string name;
  std::string rendezvous;
  uint64_t generation = 1;
  std::string listen_host = "127.0.0.1";
  // Restore from the latest checkpoint (every attempt after a failure).
  bool restore_latest = false;
};

// One worker's attempt: its group, its own ps (the replica) and worker, its trainer loop.
RankOutcome RunRank(int attempt, const RankPlan& plan, const std::string& model_name,
                    const ModelOptions& model_options, const TrainerOptions& chief_options,
                    const MirroredOptions& mirrored,
                    std::shared_ptr<const ClosureRegistry> registry) {
  RankOutcome out;
  const int rank = plan.rank;
  CollectiveGroupOptions group_options;
  group_options.rendezvous_address = plan.rendezvous;
  group_options.group = "train";
  group_options.generation = plan.generation;
  group_options.rank = rank;
  group_options.size = plan.size;
  group_options.name = plan.name;
  group_options.listen_host = plan.listen_host;
  group_options.timeout = mirrored.collective_timeout;
  group_options.join_timeout = mirrored.join_timeout;
  absl::StatusOr<std::unique_ptr<CollectiveGroup>> made = CreateGlooGroup(group_options);
  if (!made.ok()) {
    out.status = made.status();
    return out;
  }
  std::shared_ptr<CollectiveGroup> group = std::move(*made);
  out.joined = true;
  if (mirrored.on_group_formed) mirrored.on_group_formed(attempt, rank, group.get());

  // The worker's ps tasks: the shared ones (hybrid) first, then its replica.
  const int shared = static_cast<int>(mirrored.shared_ps.size());
  InProcessClusterOptions cluster_options;
  cluster_options.num_workers = 1;
  cluster_options.num_ps = 1;
  cluster_options.registry = std::move(registry);
  cluster_options.external_ps = mirrored.shared_ps;
  cluster_options.mirror.group = group;
  cluster_options.mirror.bucket_bytes = mirrored.bucket_bytes;
  cluster_options.mirror.replica_ps_begin = shared;
  absl::StatusOr<std::unique_ptr<InProcessCluster>> cluster =
      InProcessCluster::Start(cluster_options);
  if (!cluster.ok()) {
    out.status = cluster.status();
    return out;
  }
  // This rank's part of the data (a model that streams its files reads a share of them).
  ModelOptions rank_model_options = model_options;
  rank_model_options.data_shard = rank;
  rank_model_options.data_shards = plan.size;
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(model_name, rank_model_options);
  if (!model.ok()) {
    out.status = model.status();
    return out;
  }
  TrainerOptions options = chief_options;
  // Steps overlap in everything but their dense parts, which take turns in step order: every
  // replica makes the same all-reduces in the same order. The first step runs alone, so that
  // every worker's order starts from it.
  options.max_pending_steps = std::max(1, mirrored.steps_in_flight);
  options.first_step_alone = true;
  NullBuffer null_buffer;
  std::ostream null_stream(&null_buffer);
  // The chief's progress line counts its part of each batch: shown as the job's rate.
  options.progress.examples_scale = plan.size;
  if (rank != 0) {
    options.save_checkpoints = false;
    options.validate = false;
    options.evaluate = false;
    options.logdir.clear();
    options.progress.out = &null_stream;
  }
  if (plan.restore_latest) options.restore = "latest";
  if (shared > 0) {
    options.placement.variables_ps_begin = shared;  // the replica
    options.placement.tables_ps_end = shared;       // the shared ps tasks
    // The chief restores the shared tables; every worker its own replica.
    if (rank != 0) options.restore_only_ps = {shared};
    options.ps_restart_ends_run = true;
  }
  options.before_steps = [&](ClusterCoordinator* coordinator) {
    return BroadcastFromChief(group.get(), coordinator->ps()->ps(shared));
  };
  const auto user_after_step = chief_options.after_step;
  options.after_step = [&](int64_t step) -> absl::Status {
    if (user_after_step && rank == 0) RETURN_IF_ERROR(user_after_step(step));
    if (mirrored.after_step) return mirrored.after_step(attempt, rank, step);
    return absl::OkStatus();
  };
  absl::StatusOr<TrainResult> result = Train((*cluster)->spec(), model->get(), options);
  if (!result.ok()) {
    // This worker's attempt is over: its connections close at once, so the others' all-reduces
    // fail now rather than at their timeout.
    group->Abort(result.status().message());
    out.status = result.status();
    return out;
  }
  out.result = *std::move(result);
  // The job's examples: every rank trained its part of each batch. Asked of the group (each
  // rank's summary, also a process's own, then counts the whole job); a group already broken
  // leaves this rank's count.
  std::vector<int64_t> all, counts;
  const int64_t mine = out.result.examples;
  if (group->AllGather(absl::MakeConstSpan(&mine, 1), &all, &counts).ok()) {
    int64_t examples = 0;
    for (int64_t c : all) examples += c;
    out.result.examples = examples;
    if (out.result.train_seconds > 0) {
      out.result.examples_per_sec = examples / out.result.train_seconds;
    }
  }
  if (mirrored.on_trained) mirrored.on_trained(rank, (*cluster)->spec().tasks(kPs)[shared]);
  return out;
}

absl::Status CheckOptions(const TrainerOptions& options, const MirroredOptions& mirrored) {
  if (mirrored.num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("multi_worker_mirrored: ", mirrored.num_workers, " workers (at least 1)"));
  }
  if (mirrored.steps_in_flight < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synchronous training: ", mirrored.steps_in_flight, " steps in flight (at least 1)"));
  }
  if (options.early_stopping_patience > 0) {
    return absl::InvalidArgumentError(
        "synchronous training: early stopping is not supported (only the chief validates); "
        "train with the parameter-server strategy, or without --early_stopping_patience");
  }
  return absl::OkStatus();
}

// Whether an attempt that failed with `root` is followed by another; the error to return if not.
absl::Status RestartOrStop(const absl::Status& root, int attempt, const TrainerOptions& options,
                           const MirroredOptions& mirrored) {
  if (!IsGroupFailure(root)) return root;
  if (options.checkpoint_dir.empty()) {
    return absl::Status(root.code(),
                        absl::StrCat(root.message(), " (no checkpoint_dir: nothing to resume "
                                                     "from, so the job does not restart)"));
  }
  if (attempt >= mirrored.max_restarts) {
    return absl::Status(root.code(), absl::StrCat(root.message(), " (after ", attempt,
                                                  " restarts from the latest checkpoint)"));
  }
  LOG(WARNING) << "synchronous training: attempt " << attempt + 1 << " failed (" << root
               << "); forming the group again and resuming every worker from the latest "
                  "checkpoint in "
               << options.checkpoint_dir;
  return absl::OkStatus();
}

// The host a rank's collective traffic binds to, from its "host:port" in the spec.
std::string ListenHost(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") host = "127.0.0.1";
  return host;
}

}  // namespace

absl::StatusOr<MirroredResult> TrainMultiWorkerMirrored(const std::string& model_name,
                                                        const ModelOptions& model_options,
                                                        const TrainerOptions& options,
                                                        const MirroredOptions& mirrored) {
  RETURN_IF_ERROR(CheckOptions(options, mirrored));
  ASSIGN_OR_RETURN(std::shared_ptr<const ClosureRegistry> registry,
                   TrainingRegistry(mirrored.replica_groups != nullptr
                                        ? mirrored.replica_groups
                                        : std::make_shared<ReplicaGroups>()));
  ASSIGN_OR_RETURN(std::unique_ptr<RendezvousServer> rendezvous,
                   RendezvousServer::Start("127.0.0.1:0"));
  MirroredResult job;
  for (int attempt = 0;; ++attempt) {
    job.attempts = attempt + 1;
    std::vector<RankOutcome> outcomes(mirrored.num_workers);
    std::vector<std::thread> threads;
    for (int r = 0; r < mirrored.num_workers; ++r) {
      RankPlan plan;
      plan.rank = r;
      plan.size = mirrored.num_workers;
      plan.name = absl::StrCat("worker:", r);
      plan.rendezvous = rendezvous->address();
      plan.generation = static_cast<uint64_t>(attempt) + 1;
      plan.restore_latest = attempt > 0;
      threads.emplace_back([&, r, plan] {
        outcomes[r] =
            RunRank(attempt, plan, model_name, model_options, options, mirrored, registry);
      });
    }
    for (auto& t : threads) t.join();
    // The root cause: a worker's own error, else a worker's failure (a crash), else the first
    // symptom (a synchronous update that failed because of another worker).
    auto rank_of = [](const absl::Status& s) {
      if (!IsGroupFailure(s)) return 0;
      return absl::StrContains(s.message(), kSyncUpdateFailed) ? 2 : 1;
    };
    bool all_ok = true;
    absl::Status root;
    for (int r = 0; r < mirrored.num_workers; ++r) {
      const absl::Status& s = outcomes[r].status;
      if (s.ok()) continue;
      all_ok = false;
      if (root.ok() || rank_of(s) < rank_of(root)) {
        root = absl::Status(s.code(), absl::StrCat("worker:", r, ": ", s.message()));
      }
    }
    if (all_ok) {
      // The chief's summary (its examples are every rank's: RunRank).
      job.chief = std::move(outcomes[0].result);
      job.chief.num_workers = mirrored.num_workers;
      job.chief.num_ps = static_cast<int>(mirrored.shared_ps.size());
      return job;
    }
    job.failures.push_back(root.ToString());
    RETURN_IF_ERROR(RestartOrStop(root, attempt, options, mirrored));
  }
}

absl::StatusOr<MirroredResult> TrainHybridInProcess(const std::string& model_name,
                                                    const ModelOptions& model_options,
                                                    const TrainerOptions& options,
                                                    MirroredOptions mirrored, int num_shared_ps) {
  if (num_shared_ps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("hybrid: ", num_shared_ps, " shared ps tasks (at least 1)"));
  }
  std::vector<std::unique_ptr<PsServer>> servers;
  mirrored.shared_ps.clear();
  for (int i = 0; i < num_shared_ps; ++i) {
    PsServerOptions ps;
    ps.task_index = i;
    ps.memory_budget_bytes = mirrored.shared_ps_memory_budget_bytes;
    ps.disk_dir = mirrored.shared_ps_disk_dir;
    ASSIGN_OR_RETURN(std::unique_ptr<PsServer> server, PsServer::Start(ps));
    mirrored.shared_ps.push_back(server->address());
    servers.push_back(std::move(server));
  }
  return TrainMultiWorkerMirrored(model_name, model_options, options, mirrored);
}

absl::StatusOr<MirroredResult> TrainMirroredTask(const std::string& model_name,
                                                 const ModelOptions& model_options,
                                                 const TrainerOptions& options,
                                                 MirroredOptions mirrored,
                                                 const MirroredTask& task) {
  const ClusterSpec& spec = task.spec;
  if (!spec.task().has_value()) {
    return absl::InvalidArgumentError(
        "a synchronous job of separate processes needs this process's task (TF_CONFIG's "
        "\"task\", or --task=worker:N)");
  }
  // Ranks: the chief (if the spec has one), then the workers in index order.
  std::vector<TaskRef> ranks;
  if (spec.num_tasks(kChief) > 0) ranks.push_back(TaskRef{kChief, 0});
  for (int i = 0; i < spec.num_workers(); ++i) ranks.push_back(TaskRef{kWorker, i});
  const TaskRef me = *spec.task();
  auto found = std::find(ranks.begin(), ranks.end(), me);
  if (found == ranks.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task ", me.ToString(), " does not train in a synchronous job (only the chief and the "
        "workers do; ps tasks run ps_server, an evaluator runs the evaluator)"));
  }
  if (spec.num_ps() > 0 && !task.hybrid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the cluster has ", spec.num_ps(), " ps task(s), which multi_worker_mirrored does not "
        "use: drop them, or train with --strategy=hybrid (dynamic tables on the ps tasks)"));
  }
  if (task.hybrid && spec.num_ps() == 0) {
    return absl::InvalidArgumentError(
        "--strategy=hybrid needs ps tasks for the dynamic tables; the cluster has none");
  }
  if (task.hybrid) mirrored.shared_ps = spec.tasks(kPs);
  mirrored.num_workers = static_cast<int>(ranks.size());
  RETURN_IF_ERROR(CheckOptions(options, mirrored));
  const int rank = static_cast<int>(found - ranks.begin());
  const std::string my_address = *spec.address(me);
  const std::string chief_address = *spec.address(ranks[0]);
  ASSIGN_OR_RETURN(std::shared_ptr<const ClosureRegistry> registry,
                   TrainingRegistry(mirrored.replica_groups != nullptr
                                        ? mirrored.replica_groups
                                        : std::make_shared<ReplicaGroups>()));

  std::unique_ptr<RendezvousServer> rendezvous;
  if (rank == 0) {
    const std::string listen =
        task.rendezvous_listen.empty() ? chief_address : task.rendezvous_listen;
    absl::StatusOr<std::unique_ptr<RendezvousServer>> started = RendezvousServer::Start(listen);
    if (!started.ok()) {
      return absl::Status(started.status().code(),
                          absl::StrCat(me.ToString(), " (the chief) can't serve the collective "
                                       "rendezvous at ", listen, ": ",
                                       started.status().message()));
    }
    rendezvous = *std::move(started);
    LOG(INFO) << "synchronous job: " << me.ToString() << " serves the rendezvous at " << listen;
  }
  MirroredResult job;
  uint64_t last_generation = 0;
  for (int attempt = 0;; ++attempt) {
    job.attempts = attempt + 1;
    // The generation to join: asked of the chief's rendezvous, which may be (re)starting.
    RendezvousClient client(chief_address, "train", 1);
    absl::StatusOr<RendezvousStatusResponse> status = client.Status();
    const absl::Time give_up = absl::Now() + mirrored.join_timeout;
    while (!status.ok() && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(500));  // the chief is not up yet: ask again
      status = client.Status();
    }
    if (!status.ok()) {
      return absl::Status(status.status().code(),
                          absl::StrCat(me.ToString(), ": the chief's rendezvous at ",
                                       chief_address, " did not answer within ",
                                       absl::FormatDuration(mirrored.join_timeout), ": ",
                                       status.status().message()));
    }
    RankPlan plan;
    plan.rank = rank;
    plan.size = mirrored.num_workers;
    plan.name = me.ToString();
    plan.rendezvous = chief_address;
    plan.generation = GenerationToJoin(*status, last_generation);
    plan.listen_host = ListenHost(my_address);
    // A process that starts again resumes from the latest checkpoint like every other worker.
    plan.restore_latest = attempt > 0 || options.restore == "latest";
    last_generation = plan.generation;
    LOG(INFO) << "synchronous job: " << me.ToString() << " joins generation " << plan.generation
              << " as rank " << rank << " of " << plan.size;
    RankOutcome outcome =
        RunRank(attempt, plan, model_name, model_options, options, mirrored, registry);
    if (outcome.status.ok()) {
      job.chief = std::move(outcome.result);
      job.chief.num_workers = mirrored.num_workers;
      job.chief.num_ps = static_cast<int>(mirrored.shared_ps.size());
      return job;
    }
    // A generation that moved on before this rank could join it: join the current one.
    if (!outcome.joined && outcome.status.code() == absl::StatusCode::kFailedPrecondition &&
        absl::StrContains(outcome.status.message(), " is over")) {
      --attempt;
      continue;
    }
    absl::Status root(outcome.status.code(),
                      absl::StrCat(me.ToString(), ": ", outcome.status.message()));
    job.failures.push_back(root.ToString());
    RETURN_IF_ERROR(RestartOrStop(root, attempt, options, mirrored));
  }
}

}  // namespace pstrain
