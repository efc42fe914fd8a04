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
#include "collective/gloo_group.h"
#include "collective/rendezvous_service.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/in_process_cluster.h"
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

namespace {

struct RankOutcome {
  absl::Status status;
  TrainResult result;
};

// One worker's attempt: its group, its own ps (the replica) and worker, its trainer loop.
RankOutcome RunRank(int attempt, int rank, const std::string& rendezvous,
                    const std::string& model_name, const ModelOptions& model_options,
                    const TrainerOptions& chief_options, const MirroredOptions& mirrored,
                    std::shared_ptr<const ClosureRegistry> registry) {
  RankOutcome out;
  CollectiveGroupOptions group_options;
  group_options.rendezvous_address = rendezvous;
  group_options.group = "train";
  group_options.generation = static_cast<uint64_t>(attempt) + 1;
  group_options.rank = rank;
  group_options.size = mirrored.num_workers;
  group_options.name = absl::StrCat("worker:", rank);
  group_options.timeout = mirrored.collective_timeout;
  absl::StatusOr<std::unique_ptr<CollectiveGroup>> made = CreateGlooGroup(group_options);
  if (!made.ok()) {
    out.status = made.status();
    return out;
  }
  std::shared_ptr<CollectiveGroup> group = std::move(*made);
  if (mirrored.on_group_formed) mirrored.on_group_formed(attempt, rank, group.get());

  InProcessClusterOptions cluster_options;
  cluster_options.num_workers = 1;
  cluster_options.num_ps = 1;
  cluster_options.registry = std::move(registry);
  cluster_options.mirror.group = group;
  cluster_options.mirror.bucket_bytes = mirrored.bucket_bytes;
  absl::StatusOr<std::unique_ptr<InProcessCluster>> cluster =
      InProcessCluster::Start(cluster_options);
  if (!cluster.ok()) {
    out.status = cluster.status();
    return out;
  }
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(model_name, model_options);
  if (!model.ok()) {
    out.status = model.status();
    return out;
  }
  TrainerOptions options = chief_options;
  // One step at a time: every replica must make the same all-reduces in the same order.
  options.max_pending_steps = 1;
  NullBuffer null_buffer;
  std::ostream null_stream(&null_buffer);
  if (rank != 0) {
    options.save_checkpoints = false;
    options.validate = false;
    options.evaluate = false;
    options.logdir.clear();
    options.progress.out = &null_stream;
  }
  if (attempt > 0) options.restore = "latest";
  options.before_steps = [&](ClusterCoordinator* coordinator) {
    return BroadcastFromChief(group.get(), coordinator->ps()->ps(0));
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
  if (mirrored.on_trained) mirrored.on_trained(rank, (*cluster)->spec().tasks(kPs)[0]);
  return out;
}

}  // namespace

absl::StatusOr<MirroredResult> TrainMultiWorkerMirrored(const std::string& model_name,
                                                        const ModelOptions& model_options,
                                                        const TrainerOptions& options,
                                                        const MirroredOptions& mirrored) {
  if (mirrored.num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("multi_worker_mirrored: ", mirrored.num_workers, " workers (at least 1)"));
  }
  if (options.early_stopping_patience > 0) {
    return absl::InvalidArgumentError(
        "multi_worker_mirrored: early stopping is not supported (only the chief validates); "
        "train with the parameter-server strategy, or without --early_stopping_patience");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const ClosureRegistry> registry, TrainingRegistry());
  ASSIGN_OR_RETURN(std::unique_ptr<RendezvousServer> rendezvous,
                   RendezvousServer::Start("127.0.0.1:0"));
  MirroredResult job;
  for (int attempt = 0;; ++attempt) {
    job.attempts = attempt + 1;
    std::vector<RankOutcome> outcomes(mirrored.num_workers);
    std::vector<std::thread> threads;
    for (int r = 0; r < mirrored.num_workers; ++r) {
      threads.emplace_back([&, r] {
        outcomes[r] = RunRank(attempt, r, rendezvous->address(), model_name, model_options,
                              options, mirrored, registry);
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
      // The chief's summary, with every worker's examples (each trained its share).
      int64_t examples = 0;
      for (const RankOutcome& o : outcomes) examples += o.result.examples;
      job.chief = std::move(outcomes[0].result);
      job.chief.num_workers = mirrored.num_workers;
      job.chief.num_ps = 0;
      job.chief.examples = examples;
      if (job.chief.train_seconds > 0) job.chief.examples_per_sec = examples / job.chief.train_seconds;
      return job;
    }
    job.failures.push_back(root.ToString());
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
    LOG(WARNING) << "multi_worker_mirrored: attempt " << attempt + 1 << " failed (" << root
                 << "); forming the group again and resuming every worker from the latest "
                    "checkpoint in "
                 << options.checkpoint_dir;
  }
}

}  // namespace pstrain
