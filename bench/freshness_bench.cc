// Freshness of serving that follows training (serving/model_follower.h): the tabular model on the
// synthetic click log (bench/click_log.h), 2 workers and 2 ps in-process. A first epoch is
// trained and exported; each run then resumes from its checkpoint and trains the second epoch
// with a paced stream of prediction requests (--qps requests of --request_rows test rows each)
// beside it, on the export, in two variants that alternate (--rounds):
//
//   following  incremental checkpoints every --sync, which ModelVersions follows (polled every
//              --poll) over the export
//   saving     the same checkpoints, not followed: the export never changes (what the saves
//              alone cost training, the follower's work apart: here it shares the 2 cores)
//   still      no checkpoint during the epoch: the export never changes (the limit: serving and
//              training with no updates flowing)
//
// Figures, per run and as medians over the rounds:
//   - freshness: for an update at a uniformly random instant of the epoch, the seconds until the
//     first prediction answered by a version that holds it (p50, p99). An update belongs to the
//     first checkpoint whose step its step is below; the instant that step was reached stands for
//     the save's cut (the save starts after it: an upper bound of the update's wait);
//   - delta bytes/s: checkpoint entries the follower read, per second of the epoch;
//   - serving latency p50/p99 of the requests, both variants;
//   - training examples/s, both variants, and their ratio.
//
//   bazel run -c opt //bench:freshness_bench -- [--rows=400000] [--rounds=2] [--sync=1s]
//       [--poll=100ms] [--qps=200] [--request_rows=16]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "bench/bench_loops.h"
#include "bench/click_log.h"
#include "common/status_macros.h"
#include "coordinator/checkpoint_files.h"
#include "coordinator/in_process_cluster.h"
#include "models/registry.h"
#include "nlohmann/json.hpp"
#include "serving/export.h"
#include "serving/prediction_server_models.h"
#include "trainer/trainer.h"

ABSL_FLAG(int64_t, rows, 400000, "Click log: training rows (and a fifth as many test rows).");
ABSL_FLAG(int, rounds, 2, "Runs of each variant, alternating.");
ABSL_FLAG(absl::Duration, sync, absl::Seconds(1), "following: the checkpoint interval.");
ABSL_FLAG(absl::Duration, poll, absl::Milliseconds(100), "following: the follower's poll period.");
ABSL_FLAG(double, qps, 200, "Prediction requests per second beside training.");
ABSL_FLAG(int, request_rows, 16, "Test rows per prediction request.");
ABSL_FLAG(std::string, dir, "/tmp/pstrain_click_log", "Click log: where its files go.");

namespace pstrain {
namespace {

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

// The first `n` rows of a CSV file with a header, as raw examples (the click log has no quotes).
absl::StatusOr<RawExamples> ReadExamples(const std::string& path, int n) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return absl::NotFoundError(absl::StrCat("can't read ", path));
  RawExamples e;
  e.columns = absl::StrSplit(line, ',');
  while (static_cast<int>(e.rows.size()) < n && std::getline(in, line)) {
    e.rows.push_back(absl::StrSplit(line, ','));
  }
  return e;
}

struct RunFigures {
  double examples_per_s = 0, seconds = 0;
  double latency_p50_ms = 0, latency_p99_ms = 0;
  int64_t requests = 0, request_errors = 0;
  double freshness_p50_s = 0, freshness_p99_s = 0;
  double delta_bytes_per_s = 0;
  int64_t versions = 0, checkpoints_skipped = 0;
};

class Bench {
 public:
  Bench(ModelOptions model, RawExamples probe, std::string root)
      : model_(std::move(model)), probe_(std::move(probe)), root_(std::move(root)) {}

  // The first epoch, its final checkpoint exported as <root>/models/1.
  absl::Status Prepare() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
    ASSIGN_OR_RETURN(std::unique_ptr<InProcessCluster> cluster, StartCluster());
    ASSIGN_OR_RETURN(std::unique_ptr<Model> model, CreateModel("tabular", model_));
    std::ostringstream progress;
    TrainerOptions to = QuietTrainer(root_ + "/base_ckpt", &progress);
    CoordinatorOptions coordinator;
    ASSIGN_OR_RETURN(TrainResult r, Train(cluster->spec(), model.get(), to, coordinator));
    ExportOptions e;
    e.checkpoint = r.last_checkpoint;
    e.out = root_ + "/models/1";
    return ExportModel(e).status();
  }

  absl::StatusOr<RunFigures> Run(bool saving, bool following) {
    const std::string ckpt = root_ + "/ckpt";
    std::error_code ec;
    std::filesystem::remove_all(ckpt, ec);
    std::filesystem::copy(root_ + "/base_ckpt", ckpt, std::filesystem::copy_options::recursive, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("copying the first epoch's checkpoint: ", ec.message()));
    }
    ModelOptions second = model_;
    second.epochs = 2;
    ASSIGN_OR_RETURN(std::unique_ptr<InProcessCluster> cluster, StartCluster());
    ASSIGN_OR_RETURN(std::unique_ptr<Model> model, CreateModel("tabular", second));
    std::ostringstream progress;
    TrainerOptions to = QuietTrainer(ckpt, &progress);
    if (saving) {
      to.checkpoint_every = absl::GetFlag(FLAGS_sync);
      to.checkpoint_incremental = true;
      to.keep_checkpoints = 5;
    }
    // When each step count was reached (the cut of a save at that step follows it).
    absl::Mutex mu;
    std::map<int64_t, absl::Time> reached;
    to.after_step = [&](int64_t step) {
      absl::MutexLock lock(&mu);
      reached.emplace(step + 1, absl::Now());
      return absl::OkStatus();
    };
    std::atomic<bool> done{false};
    absl::StatusOr<TrainResult> result;
    const absl::Time start = absl::Now();
    std::thread trainer([&] {
      CoordinatorOptions coordinator;
      result = Train(cluster->spec(), model.get(), to, coordinator);
      done = true;
    });
    RunFigures f;
    absl::Status serving =
        Serve(following, ckpt, done, &f, [&](std::map<int64_t, absl::Time>* served) {
          // Freshness from the steps' instants and the first answer of each step's version.
          absl::MutexLock lock(&mu);
          std::vector<double> waits;
          if (served->empty()) return;
          const absl::Time from = served->begin()->second;  // once serving began
          for (auto [step, at] : reached) {
            if (at < from) continue;
            // The first checkpoint served that holds the step (a checkpoint at S holds steps < S).
            auto s = served->lower_bound(step);
            if (s == served->end()) break;  // not served before the run ended
            waits.push_back(absl::ToDoubleSeconds(s->second - at));
          }
          // Steps come at a steady rate, so the steps' instants sample the epoch uniformly.
          f.freshness_p50_s = Percentile(waits, 0.5);
          f.freshness_p99_s = Percentile(waits, 0.99);
        });
    trainer.join();
    if (!serving.ok()) return serving;
    if (!result.ok()) return result.status();
    f.examples_per_s = result->examples_per_sec;
    f.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    f.delta_bytes_per_s /= std::max(1e-9, result->train_seconds);
    std::filesystem::remove_all(ckpt, ec);
    return f;
  }

 private:
  // 2 workers and 2 ps in this process.
  static absl::StatusOr<std::unique_ptr<InProcessCluster>> StartCluster() {
    InProcessClusterOptions co;
    co.num_workers = 2;
    co.num_ps = 2;
    co.registry = *TrainingRegistry(std::make_shared<ReplicaGroups>());
    return InProcessCluster::Start(co);
  }

  // No validation, the progress lines into `progress`, and into `checkpoint_dir` only the final
  // checkpoint, after the epoch.
  static TrainerOptions QuietTrainer(const std::string& checkpoint_dir,
                                     std::ostringstream* progress) {
    TrainerOptions to;
    to.progress.out = progress;
    to.validate = false;
    to.validate_at_start = false;
    to.keep_best = false;
    to.checkpoint_dir = checkpoint_dir;
    to.checkpoint_every = absl::Hours(24);
    return to;
  }

  // The paced requests on the export until `done`, following `ckpt` or not.
  absl::Status Serve(bool following, const std::string& ckpt, const std::atomic<bool>& done,
                     RunFigures* f,
                     const std::function<void(std::map<int64_t, absl::Time>*)>& freshness) {
    const std::string base = root_ + "/models";
    ModelVersionsOptions v;
    v.base = base;
    v.poll_period = absl::GetFlag(FLAGS_poll);
    if (following) v.follow_checkpoints = ckpt;
    ASSIGN_OR_RETURN(std::unique_ptr<ModelVersions> versions, ModelVersions::Start(v));
    std::vector<double> latencies;
    std::map<int64_t, absl::Time> served;  // step -> its version's first answer
    const absl::Duration every = absl::Seconds(1.0 / std::max(1e-3, absl::GetFlag(FLAGS_qps)));
    absl::Time next = absl::Now();
    while (!done.load()) {
      absl::SleepFor(next - absl::Now());
      next += every;
      const absl::Time t0 = absl::Now();
      std::shared_ptr<const LoadedVersion> current = versions->Current();
      std::vector<float> out;
      absl::Status s = current->Predict(probe_, &out);
      const absl::Time t1 = absl::Now();
      if (!s.ok()) {
        ++f->request_errors;
        continue;
      }
      ++f->requests;
      latencies.push_back(absl::ToDoubleMilliseconds(t1 - t0));
      served.emplace(current->manifest().step, t1);
    }
    f->latency_p50_ms = Percentile(latencies, 0.5);
    f->latency_p99_ms = Percentile(latencies, 0.99);
    if (following) {
      const FollowStats stats = versions->Following();
      f->versions = stats.versions;
      f->checkpoints_skipped = stats.checkpoints_skipped;
      f->delta_bytes_per_s = static_cast<double>(stats.bytes_read);  // per second in Run
      freshness(&served);
    }
    return absl::OkStatus();
  }

  const ModelOptions model_;
  const RawExamples probe_;
  const std::string root_;
};

int Main() {
  ClickLogOptions o;
  o.train_rows = absl::GetFlag(FLAGS_rows);
  o.test_rows = o.train_rows / 5;
  absl::StatusOr<ClickLog> log = WriteClickLog(absl::GetFlag(FLAGS_dir), o);
  if (!log.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(log.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<RawExamples> probe =
      ReadExamples(log->test_path, absl::GetFlag(FLAGS_request_rows));
  if (!probe.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(probe.status().message()).c_str());
    return 2;
  }
  ModelOptions mo;
  mo.epochs = 1;
  mo.data = log->train_path;
  mo.extra["feature_spec"] = log->spec_path;
  const std::string root = absl::GetFlag(FLAGS_dir) + "/freshness_bench";
  Emit({{"name", "dataset"},
        {"train_rows", log->train_rows},
        {"workers", 2},
        {"ps", 2},
        {"sync_s", absl::ToDoubleSeconds(absl::GetFlag(FLAGS_sync))},
        {"poll_s", absl::ToDoubleSeconds(absl::GetFlag(FLAGS_poll))},
        {"qps", absl::GetFlag(FLAGS_qps)},
        {"request_rows", absl::GetFlag(FLAGS_request_rows)}});
  Bench bench(mo, *probe, root);
  if (absl::Status s = bench.Prepare(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  std::map<std::string, std::vector<RunFigures>> runs;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (const std::string name : {"following", "saving", "still"}) {
      const bool following = name == "following";
      absl::StatusOr<RunFigures> f = bench.Run(name != "still", following);
      if (!f.ok()) {
        std::fprintf(stderr, "error: %s\n", f.status().ToString().c_str());
        return 1;
      }
      nlohmann::json j = {{"name", name},
                          {"round", round},
                          {"examples_per_s", f->examples_per_s},
                          {"latency_p50_ms", f->latency_p50_ms},
                          {"latency_p99_ms", f->latency_p99_ms},
                          {"requests", f->requests},
                          {"request_errors", f->request_errors}};
      if (following) {
        j["freshness_p50_s"] = f->freshness_p50_s;
        j["freshness_p99_s"] = f->freshness_p99_s;
        j["delta_bytes_per_s"] = f->delta_bytes_per_s;
        j["versions"] = f->versions;
        j["checkpoints_skipped"] = f->checkpoints_skipped;
      }
      Emit(j);
      runs[name].push_back(*f);
    }
  }
  auto med = [&](const std::string& name, double RunFigures::*field) {
    std::vector<double> v;
    for (const RunFigures& f : runs[name]) v.push_back(f.*field);
    return Median(v);
  };
  const double follow_eps = med("following", &RunFigures::examples_per_s);
  const double still_eps = med("still", &RunFigures::examples_per_s);
  const double follow_p99 = med("following", &RunFigures::latency_p99_ms);
  const double still_p99 = med("still", &RunFigures::latency_p99_ms);
  Emit({{"name", "freshness"},
        {"freshness_p50_s", med("following", &RunFigures::freshness_p50_s)},
        {"freshness_p99_s", med("following", &RunFigures::freshness_p99_s)},
        {"freshness_p99_target_s", 10},
        {"delta_bytes_per_s", med("following", &RunFigures::delta_bytes_per_s)},
        {"serving_p50_ms_following", med("following", &RunFigures::latency_p50_ms)},
        {"serving_p50_ms_still", med("still", &RunFigures::latency_p50_ms)},
        {"serving_p99_ms_following", follow_p99},
        {"serving_p99_ms_still", still_p99},
        {"serving_p99_ratio", follow_p99 / std::max(1e-9, still_p99)},
        {"serving_p99_ratio_target", 1.2},
        {"train_examples_per_s_following", follow_eps},
        {"train_examples_per_s_still", still_eps},
        {"train_ratio", follow_eps / std::max(1e-9, still_eps)},
        {"train_examples_per_s_saving", med("saving", &RunFigures::examples_per_s)},
        {"train_ratio_saving",
         med("saving", &RunFigures::examples_per_s) / std::max(1e-9, still_eps)},
        {"train_ratio_target", 0.95}});
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
