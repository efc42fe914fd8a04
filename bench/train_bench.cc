// Training throughput of the flights click-through model (models/flights_ctr.h): examples/s through
// an in-process cluster (1 and 2 workers, 2 ps: real gRPC servers on loopback, the trainer and
// coordinator of a real run), and in the same run the limit: a single-process baseline doing the
// same math with no cluster at all (the same hashing, Device::Unique, models/ctr_net.h forward and
// backward, and the ps's own Adagrad code applied to local tables), with 1 thread and with one
// thread per CPU (asynchronous, like the workers: per-row striped locks on the tables, one lock on
// the dense weights).
//
//   bazel run -c opt //bench:train_bench [-- --steps=4000 --workers=1,2 --baseline_threads=1,cpus]
//
// Prints one JSON object per figure: {"name", "value", "unit", ...}. Each figure also gives the CPU
// time it took per example (user + system of the whole process over the timed part), which says
// whether a run was limited by the CPUs (cpu_cores_busy near the machine's count) and how much
// work per example each way costs.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/machine_limits.h"
#include "common/logging.h"
#include "trainer/trainer.h"
#include "models/batches.h"
#include "models/ctr_net.h"
#include "models/flights_ctr.h"
#include "models/flights_ctr_worker.h"
#include "models/flights_data.h"
#include "nlohmann/json.hpp"
#include "ps/initializers.h"
#include "ps/optimizers.h"
#include "coordinator/in_process_cluster.h"
#include "worker/device/device.h"

ABSL_FLAG(int64_t, steps, 4000, "Timed training steps per figure.");
ABSL_FLAG(int64_t, warmup_steps, 100, "Untimed steps before them.");
ABSL_FLAG(int64_t, batch_size, 0, "Examples per step (0: the model's default).");
ABSL_FLAG(int64_t, hash_rows, 0, "Rows of the hashed tables (0: the model's default, 2^22).");
ABSL_FLAG(std::string, data, "",
          "The flights CSV (default: the model's, data/flights/flights.csv).");
ABSL_FLAG(std::vector<std::string>, workers, std::vector<std::string>({"1", "2"}),
          "Cluster figures: workers per run (2 ps each).");
ABSL_FLAG(int, ps, 2, "ps tasks of the cluster runs.");
ABSL_FLAG(std::vector<std::string>, baseline_threads, std::vector<std::string>({"1", "cpus"}),
          "Baseline figures: threads per run (\"cpus\": one per available CPU).");

namespace pstrain {
namespace {

using json = nlohmann::json;

// The 1-minute load average: other work on the machine skews the figures.
double LoadAverage() {
  double load[1] = {0};
  return getloadavg(load, 1) == 1 ? load[0] : -1;
}

void Print(const std::string& name, double value, const std::string& unit, json extra = json()) {
  if (extra.is_null()) extra = json::object();
  extra["load_avg_1m"] = LoadAverage();
  extra["name"] = name;
  extra["value"] = value;
  extra["unit"] = unit;
  std::printf("%s\n", extra.dump().c_str());
  std::fflush(stdout);
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
  return 1;
}

// CPU seconds (user + system) this process has used.
double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// What a timed stretch did: examples, wall seconds, CPU seconds.
struct Timed {
  int64_t examples = 0;
  double seconds = 0;
  double cpu_seconds = 0;
  double per_sec() const { return seconds > 0 ? static_cast<double>(examples) / seconds : 0; }
  json Extra() const {
    return json{{"examples", examples},
                {"seconds", seconds},
                {"cpu_cores_busy", seconds > 0 ? cpu_seconds / seconds : 0},
                {"cpu_us_per_example", examples > 0 ? 1e6 * cpu_seconds / examples : 0}};
  }
};

ModelOptions BenchModelOptions() {
  ModelOptions options;
  options.data = absl::GetFlag(FLAGS_data);
  options.batch_size = absl::GetFlag(FLAGS_batch_size);
  // The cluster against a single process doing the same math on local tables: the hashed tables,
  // which the single process can hold as arrays.
  options.extra["embedding"] = "hashed";
  if (absl::GetFlag(FLAGS_hash_rows) > 0) {
    options.extra["hash_rows"] = absl::StrCat(absl::GetFlag(FLAGS_hash_rows));
  }
  return options;
}

// ---- The single-process baseline ------------------------------------------------------------

// One variable held locally as a ps shard holds it: values and the optimizer's slots.
class LocalVariable {
 public:
  static absl::StatusOr<std::unique_ptr<LocalVariable>> Create(const VariableSpec& spec) {
    auto v = std::unique_ptr<LocalVariable>(new LocalVariable());
    v->rows_ = spec.shape[0];
    v->width_ = spec.shape.size() > 1 ? spec.shape[1] : 1;
    auto optimizer = Optimizer::Create(*spec.optimizer);
    if (!optimizer.ok()) return optimizer.status();
    v->optimizer_ = std::move(*optimizer);
    v->values_.resize(v->rows_ * v->width_);
    InitializeFloat(spec.initializer, 0, static_cast<int64_t>(v->values_.size()),
                    v->values_.data());
    for (int s = 0; s < v->optimizer_->num_slots(); ++s) {
      v->slots_.emplace_back(v->values_.size(), v->optimizer_->slot_initial_value(s));
    }
    return v;
  }

  int64_t width() const { return width_; }
  int64_t size() const { return static_cast<int64_t>(values_.size()); }
  const float* row(int64_t r) const { return values_.data() + r * width_; }

  // Applies `grad` to `count` consecutive rows from `first` (the ps's ApplyRow, row by row).
  void Apply(int64_t first, int64_t count, const float* grad, int64_t step) {
    const StepScalars scalars = optimizer_->Prepare(step, step - 1);
    std::vector<float*> slots(slots_.size());
    for (int64_t r = first; r < first + count; ++r) {
      for (size_t s = 0; s < slots_.size(); ++s) slots[s] = slots_[s].data() + r * width_;
      optimizer_->ApplyRow(values_.data() + r * width_, slots.data(),
                           grad + (r - first) * width_, width_, scalars);
    }
  }

 private:
  LocalVariable() = default;
  int64_t rows_ = 0, width_ = 0;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<float> values_;
  std::vector<std::vector<float>> slots_;
};

// The model trained in this process alone. Thread-safe: rows are guarded by striped locks (as the
// ps guards its rows), the dense weights by one lock.
class LocalCtrTrainer {
 public:
  static absl::StatusOr<std::unique_ptr<LocalCtrTrainer>> Create(const FlightsCtrConfig& config,
                                                                 const FlightsData* data) {
    auto t = std::unique_ptr<LocalCtrTrainer>(new LocalCtrTrainer(config, data));
    auto device = CreateCpuDevice();
    if (!device.ok()) return device.status();
    t->device_ = std::move(*device);
    for (const VariableSpec& spec :
         FlightsCtrVariables(config, /*num_ps=*/1, data->train_positive_rate)) {
      auto v = LocalVariable::Create(spec);
      if (!v.ok()) return v.status();
      t->vars_.push_back(std::move(*v));
    }
    return t;
  }

  // One training step, as the flights_ctr/train closure does it, with local tables for the ps.
  absl::Status Step(int64_t step) {
    const CtrNetShape& shape = config_.shape;
    const std::vector<int64_t> rows = batches_.Batch(step);
    const int64_t n = static_cast<int64_t>(rows.size()), f = shape.features;
    std::vector<int64_t> ids(n * f), unique(n * f);
    std::vector<int32_t> index(n * f);
    HashFlights(data_->train, rows, config_.features, config_.hash_rows, ids.data());
    std::vector<float> labels(n);
    for (int64_t i = 0; i < n; ++i) labels[i] = data_->train[rows[i]].label;
    absl::StatusOr<int64_t> num_unique = device_->Unique(n * f, ids.data(), unique.data(),
                                                         index.data());
    if (!num_unique.ok()) return num_unique.status();
    const int64_t u = *num_unique, dim = shape.dim;

    // The pull: rows of both tables, and a copy of the dense weights.
    std::vector<float> emb(u * dim), lr(u);
    for (int64_t k = 0; k < u; ++k) {
      absl::MutexLock lock(&row_locks_[unique[k] % kRowStripes]);
      std::memcpy(emb.data() + k * dim, vars_[kEmb]->row(unique[k]), dim * sizeof(float));
      lr[k] = *vars_[kLr]->row(unique[k]);
    }
    std::vector<std::vector<float>> dense(vars_.size());
    {
      absl::MutexLock lock(&dense_mu_);
      for (size_t v = kW1; v < vars_.size(); ++v) {
        dense[v].assign(vars_[v]->row(0), vars_[v]->row(0) + vars_[v]->size());
      }
    }
    const CtrDenseParams params{dense[kW1].data(), dense[kB1].data(), dense[kW2].data(),
                                dense[kB2].data(), dense[kLrBias].data()};
    const CtrBatch batch{n, u, index.data(), emb.data(), lr.data(), labels.data()};
    CtrNet net(device_.get(), shape);
    if (absl::Status s = net.Forward(batch, params); !s.ok()) return s;
    const CtrGradLayout layout(shape, u);
    std::vector<float> flat(layout.size);
    float loss = 0, lr_loss = 0;
    if (absl::Status s = net.Backward(batch, params, flat.data(), &loss, &lr_loss); !s.ok()) {
      return s;
    }
    const CtrGrads g = CtrGrads::Split(flat.data(), layout);

    // The push: the same server-side Adagrad, applied here.
    for (int64_t k = 0; k < u; ++k) {
      absl::MutexLock lock(&row_locks_[unique[k] % kRowStripes]);
      vars_[kEmb]->Apply(unique[k], 1, g.emb.data() + k * dim, step + 1);
      vars_[kLr]->Apply(unique[k], 1, g.lr.data() + k, step + 1);
    }
    absl::MutexLock lock(&dense_mu_);
    const std::vector<float>* grads[] = {&g.w1, &g.b1, &g.w2, &g.b2, &g.lr_bias};
    for (size_t v = kW1; v < vars_.size(); ++v) {
      vars_[v]->Apply(0, vars_[v]->size() / vars_[v]->width(), grads[v - kW1]->data(), step + 1);
    }
    return absl::OkStatus();
  }

  int64_t batch_size() const { return batches_.batch_size(); }

 private:
  // FlightsCtrVariables' order.
  enum { kEmb = 0, kLr, kW1, kB1, kW2, kB2, kLrBias };
  static constexpr int kRowStripes = 4096;

  LocalCtrTrainer(const FlightsCtrConfig& config, const FlightsData* data)
      : config_(config),
        data_(data),
        batches_(static_cast<int64_t>(data->train.size()), config.batch_size, config.seed),
        row_locks_(kRowStripes) {}

  const FlightsCtrConfig config_;
  const FlightsData* const data_;
  EpochBatches batches_;
  std::unique_ptr<Device> device_;
  std::vector<std::unique_ptr<LocalVariable>> vars_;
  std::vector<absl::Mutex> row_locks_;
  absl::Mutex dense_mu_;
};

// Runs `warmup` steps on this thread, then times `steps` more over `threads` threads (each takes
// the next step number).
absl::StatusOr<Timed> RunBaseline(LocalCtrTrainer* trainer, int threads, int64_t warmup,
                                  int64_t steps) {
  for (int64_t s = 0; s < warmup; ++s) {
    if (absl::Status status = trainer->Step(s); !status.ok()) return status;
  }
  std::atomic<int64_t> next{warmup};
  absl::Mutex mu;
  absl::Status error;
  auto work = [&] {
    for (int64_t s; (s = next.fetch_add(1)) < warmup + steps;) {
      absl::Status status = trainer->Step(s);
      if (!status.ok()) {
        absl::MutexLock lock(&mu);
        if (error.ok()) error = status;
      }
    }
  };
  const absl::Time start = absl::Now();
  const double cpu_start = CpuSeconds();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work);
  for (std::thread& t : pool) t.join();
  Timed timed;
  timed.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  timed.cpu_seconds = CpuSeconds() - cpu_start;
  timed.examples = steps * trainer->batch_size();
  if (!error.ok()) return error;
  return timed;
}

// ---- The cluster ------------------------------------------------------------------------------

// Trains warmup + steps steps of the model on an in-process cluster, timing the last `steps` (from
// the collection of the warm-up's last step to that of the last).
absl::StatusOr<Timed> RunCluster(int workers, int ps, int64_t warmup, int64_t steps) {
  auto registry = std::make_shared<ClosureRegistry>();
  if (absl::Status s = RegisterBuiltinClosures(registry.get()); !s.ok()) return s;
  absl::Status registered = RegisterFlightsCtr(registry.get(), std::make_shared<ReplicaGroups>());
  if (!registered.ok()) return registered;
  InProcessClusterOptions cluster_options;
  cluster_options.num_workers = workers;
  cluster_options.num_ps = ps;
  cluster_options.registry = registry;
  absl::StatusOr<std::unique_ptr<InProcessCluster>> cluster =
      InProcessCluster::Start(cluster_options);
  if (!cluster.ok()) return cluster.status();

  ModelOptions options = BenchModelOptions();
  options.max_steps = warmup + steps;
  options.epochs = static_cast<int>(1 + options.max_steps / 1000);  // enough; max_steps stops it
  absl::StatusOr<std::unique_ptr<Model>> model = CreateFlightsCtr(options);
  if (!model.ok()) return model.status();
  TrainerOptions trainer;
  trainer.checkpoint_dir = "";
  trainer.restore = "none";
  trainer.logdir = "";
  trainer.evaluate = false;
  std::ostringstream progress;  // dropped
  trainer.progress.out = &progress;
  absl::Time start = absl::InfinitePast(), end;
  double cpu_start = 0, cpu_end = 0;
  trainer.after_step = [&](int64_t step) -> absl::Status {
    if (step + 1 == warmup || (warmup == 0 && step == 0)) {
      start = absl::Now();
      cpu_start = CpuSeconds();
    }
    if (step + 1 == warmup + steps) {
      end = absl::Now();
      cpu_end = CpuSeconds();
    }
    return absl::OkStatus();
  };
  absl::StatusOr<TrainResult> result = Train((*cluster)->spec(), model->get(), trainer);
  if (!result.ok()) return result.status();
  Timed timed;
  timed.seconds = absl::ToDoubleSeconds(end - start);
  timed.cpu_seconds = cpu_end - cpu_start;
  timed.examples = (warmup == 0 ? steps - 1 : steps) * (*model)->examples_per_step();
  return timed;
}

int Run() {
  const int64_t steps = absl::GetFlag(FLAGS_steps);
  const int64_t warmup = absl::GetFlag(FLAGS_warmup_steps);
  if (steps < 2 || warmup < 0) {
    return Fail(absl::InvalidArgumentError("--steps must be >= 2 and --warmup_steps >= 0"));
  }
  absl::StatusOr<FlightsCtrConfig> config = FlightsCtrConfigFromOptions(BenchModelOptions());
  if (!config.ok()) return Fail(config.status());
  const int cpus = AvailableCpus();
  std::fprintf(stderr, "flights_ctr: batch %lld, %lld features x %lld, hidden %lld, %lld hashed "
               "rows; %lld + %lld steps per figure; %d cpus\n",
               static_cast<long long>(config->batch_size),
               static_cast<long long>(config->shape.features),
               static_cast<long long>(config->shape.dim),
               static_cast<long long>(config->shape.hidden),
               static_cast<long long>(config->hash_rows), static_cast<long long>(warmup),
               static_cast<long long>(steps), cpus);

  // The limit first: no cluster.
  double best_baseline = 0, baseline_1thread = 0;
  {
    absl::StatusOr<FlightsData> data = LoadFlights(config->flights);
    if (!data.ok()) return Fail(data.status());
    for (const std::string& text : absl::GetFlag(FLAGS_baseline_threads)) {
      if (text.empty()) continue;
      int threads = cpus;
      if (text != "cpus" && (!absl::SimpleAtoi(text, &threads) || threads < 1)) {
        return Fail(absl::InvalidArgumentError("--baseline_threads: \"" + text + "\""));
      }
      // Fresh tables per figure, so each starts from the same state.
      absl::StatusOr<std::unique_ptr<LocalCtrTrainer>> trainer =
          LocalCtrTrainer::Create(*config, &*data);
      if (!trainer.ok()) return Fail(trainer.status());
      absl::StatusOr<Timed> t = RunBaseline(trainer->get(), threads, warmup, steps);
      if (!t.ok()) return Fail(t.status());
      json extra = t->Extra();
      extra["threads"] = threads;
      extra["cpus"] = cpus;
      Print(absl::StrCat("baseline.single_process.threads_", threads), t->per_sec(), "examples/s",
            extra);
      best_baseline = std::max(best_baseline, t->per_sec());
      if (threads == 1) baseline_1thread = t->per_sec();
    }
  }

  const int ps = absl::GetFlag(FLAGS_ps);
  for (const std::string& text : absl::GetFlag(FLAGS_workers)) {
    if (text.empty()) continue;
    int workers = 0;
    if (!absl::SimpleAtoi(text, &workers) || workers < 1) {
      return Fail(absl::InvalidArgumentError("--workers: \"" + text + "\""));
    }
    absl::StatusOr<Timed> t = RunCluster(workers, ps, warmup, steps);
    if (!t.ok()) return Fail(t.status());
    json extra = t->Extra();
    extra["workers"] = workers;
    extra["ps"] = ps;
    extra["cpus"] = cpus;
    Print(absl::StrCat("cluster.in_process.workers_", workers, ".ps_", ps), t->per_sec(),
          "examples/s", extra);
    json ratio{{"workers", workers}, {"ps", ps}, {"baseline_examples_per_sec", best_baseline}};
    if (baseline_1thread > 0) ratio["vs_baseline_1thread"] = t->per_sec() / baseline_1thread;
    Print(absl::StrCat("ratio.cluster_workers_", workers, "_vs_best_baseline"),
          best_baseline > 0 ? t->per_sec() / best_baseline : 0, "x", ratio);
  }
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  pstrain::SetMinLogLevelFromEnv();
  // Under `bazel run`, data/ means the user's directory, not the runfiles.
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY"); dir != nullptr && *dir != '\0') {
    if (::chdir(dir) != 0) std::fprintf(stderr, "warning: can't chdir to %s\n", dir);
  }
  return pstrain::Run();
}
