// ps and worker servers as separate processes from one spec file, and the coordinator against them.
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cluster/port_picker.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/row_log.h"
#include "tests/subprocess.h"
#include "tests/toy_fashion_data.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(30);

class MultiProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
    for (int i = 0; i < 5; ++i) {
      absl::StatusOr<int> port = PickUnusedPort();
      ASSERT_TRUE(port.ok()) << port.status();
      ports_.push_back(*port);
    }
    spec_json_ = absl::StrCat(R"({"cluster": {"chief": ["localhost:)", ports_[0],
                              R"("], "ps": ["localhost:)", ports_[1], R"(", "localhost:)",
                              ports_[2], R"("], "worker": ["localhost:)", ports_[3],
                              R"(", "localhost:)", ports_[4], R"("]}})");
    spec_path_ = tmp_ + "/cluster.json";
    std::ofstream(spec_path_) << spec_json_;
  }

  std::unique_ptr<Subprocess> Spawn(const std::string& name, std::vector<std::string> argv,
                                    std::vector<std::string> env = {}) {
    absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(name, argv, env, tmp_);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }

  std::string tmp_;
  std::vector<int> ports_;
  std::string spec_json_;
  std::string spec_path_;
  const std::string ps_bin_ = RunfilePath("ps/ps_server");
  const std::string worker_bin_ = RunfilePath("trainer/worker_server");
  const std::string coordinator_bin_ = RunfilePath("trainer/coordinator");
};

TEST_F(MultiProcessTest, Coordinator_SeparateProcesses_AllHealthyThenOneDown) {
  std::vector<std::unique_ptr<Subprocess>> servers;
  servers.push_back(Spawn("ps0", {ps_bin_, "--cluster_spec=" + spec_path_, "--task=ps:0"}));
  servers.push_back(Spawn("ps1", {ps_bin_, "--cluster_spec=" + spec_path_, "--task=ps:1"}));
  servers.push_back(
      Spawn("worker0", {worker_bin_, "--cluster_spec=" + spec_path_, "--task=worker:0"}));
  // worker:1 takes its spec and task from TF_CONFIG, as TF tasks do.
  const std::string tf_config =
      spec_json_.substr(0, spec_json_.size() - 1) + R"(, "task": {"type": "worker", "index": 1}})";
  servers.push_back(Spawn("worker1", {worker_bin_}, {"TF_CONFIG=" + tf_config}));
  for (auto& s : servers) ASSERT_NE(s, nullptr);
  for (auto& s : servers) ASSERT_TRUE(s->WaitForStdout("READY", kWait).ok()) << s->Stderr();

  std::unique_ptr<Subprocess> coordinator =
      Spawn("coordinator", {coordinator_bin_, "--cluster_spec=" + spec_path_,
                            "--connect_timeout=20s", "--job=sum", "--steps=100"});
  ASSERT_NE(coordinator, nullptr);
  absl::StatusOr<int> code = coordinator->Wait(kWait);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << coordinator->Stdout() << coordinator->Stderr();
  const std::string out = coordinator->Stdout();
  EXPECT_THAT(out, HasSubstr("cluster: 2 worker(s), 2 ps"));
  for (size_t i = 0; i < servers.size(); ++i) {
    // Each task answered with its own process id.
    EXPECT_THAT(out, HasSubstr(absl::StrCat("pid=", servers[i]->pid()))) << out;
  }
  EXPECT_THAT(out, HasSubstr("all tasks healthy"));

  // Stop worker:1 with SIGTERM: it exits cleanly.
  servers[3]->Signal(SIGTERM);
  code = servers[3]->Wait(kWait);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << servers[3]->Stderr();
  EXPECT_THAT(servers[3]->Stderr(), HasSubstr("stopped cleanly"));

  // The coordinator now names the missing task and its address, and exits non-zero.
  coordinator = Spawn("coordinator_down", {coordinator_bin_, "--cluster_spec=" + spec_path_,
                                           "--connect_timeout=1s", "--job=health"});
  code = coordinator->Wait(kWait);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 2);
  EXPECT_THAT(coordinator->Stderr(),
              HasSubstr(absl::StrCat("worker:1 at localhost:", ports_[4], " unreachable")));

  // SIGINT stops the others cleanly too.
  for (int i = 0; i < 3; ++i) servers[i]->Signal(SIGINT);
  for (int i = 0; i < 3; ++i) {
    code = servers[i]->Wait(kWait);
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << servers[i]->Stderr();
  }
}

TEST_F(MultiProcessTest, SumJob_WorkerKilledWithSigkill_JobFinishes) {
  std::vector<std::unique_ptr<Subprocess>> servers;
  servers.push_back(Spawn("k_ps0", {ps_bin_, "--cluster_spec=" + spec_path_, "--task=ps:0"}));
  servers.push_back(Spawn("k_ps1", {ps_bin_, "--cluster_spec=" + spec_path_, "--task=ps:1"}));
  servers.push_back(
      Spawn("k_worker0", {worker_bin_, "--cluster_spec=" + spec_path_, "--task=worker:0"}));
  servers.push_back(
      Spawn("k_worker1", {worker_bin_, "--cluster_spec=" + spec_path_, "--task=worker:1"}));
  for (auto& s : servers) ASSERT_TRUE(s->WaitForStdout("READY", kWait).ok()) << s->Stderr();

  // 800 closures of 60 ms simulated compute, 16 at a time per worker: about 1.5 s of work.
  std::unique_ptr<Subprocess> coordinator =
      Spawn("k_coordinator", {coordinator_bin_, "--cluster_spec=" + spec_path_, "--job=sum",
                              "--steps=800", "--rows_per_step=10", "--work_us=60000"});
  ASSERT_TRUE(coordinator->WaitForStdout("scheduled 800/800", kWait).ok())
      << coordinator->Stderr();
  servers[3]->Signal(SIGKILL);  // worker:1 dies mid-job, closures in flight
  absl::StatusOr<int> code = coordinator->Wait(kWait);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << coordinator->Stdout() << coordinator->Stderr();
  EXPECT_THAT(coordinator->Stdout(), HasSubstr("\"closures\": 800"));
  EXPECT_THAT(coordinator->Stderr(), HasSubstr("worker:1 at localhost:"));
  EXPECT_THAT(coordinator->Stderr(), HasSubstr("its closures run elsewhere"));
  for (int i = 0; i < 3; ++i) servers[i]->Signal(SIGTERM);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*servers[i]->Wait(kWait), 0);
}

// Synchronous training as separate processes (TF_CONFIG-style spec with two workers, no ps): each
// worker runs the coordinator binary with its --task; worker 1 is SIGKILLed once the first
// checkpoint is written. Worker 0's all-reduce fails at once; it forms the group again and waits
// for worker 1, which is started again; both restore the latest checkpoint and the job finishes
// with the chief's summary.
TEST_F(MultiProcessTest, MirroredWorkers_OneSigkilledAndRestarted_JobResumesAndFinishes) {
  const std::string data = tmp_ + "/mirrored_data";
  ASSERT_EQ(::mkdir(data.c_str(), 0755), 0);
  WriteToySplit(data, "train", 400, /*seed=*/11);
  WriteToySplit(data, "t10k", 100, /*seed=*/12);
  const std::string spec = tmp_ + "/mirrored.json";
  std::ofstream(spec) << absl::StrCat(R"({"cluster": {"worker": ["localhost:)", ports_[3],
                                      R"(", "localhost:)", ports_[4], R"("]}})");
  const std::string ckpt = tmp_ + "/mirrored_ckpt";
  auto worker = [&](int i, const std::string& name) {
    return Spawn(name, {coordinator_bin_, "--strategy=multi_worker_mirrored",
                        "--cluster_spec=" + spec, absl::StrCat("--task=worker:", i),
                        "--model=fashion_mnist_mlp", "--data=" + data, "--epochs=60",
                        "--batch_size=20", "--validation_fraction=0", "--learning_rate=0.05",
                        "--model_opt=hidden=8,average_epochs=0", "--checkpoint_dir=" + ckpt,
                        "--checkpoint_every_steps=50", "--checkpoint_every=0", "--logdir=",
                        "--bind_host=127.0.0.1", "--rejoin_timeout=60s"});
  };
  std::unique_ptr<Subprocess> w0 = worker(0, "mirrored_w0");
  std::unique_ptr<Subprocess> w1 = worker(1, "mirrored_w1");
  // Wait for a complete checkpoint (its MANIFEST), then kill worker 1 mid-job.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  bool saved = false;
  while (!saved && absl::Now() < deadline) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(ckpt, ec)) {
      if (std::filesystem::exists(entry.path() / "MANIFEST")) saved = true;
    }
    if (!saved) absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(saved) << w0->Stderr() << w1->Stderr();
  w1->Signal(SIGKILL);
  ASSERT_TRUE(w1->Wait(kWait).ok());
  w1 = worker(1, "mirrored_w1_again");
  absl::StatusOr<int> code = w0->Wait(absl::Seconds(120));
  ASSERT_TRUE(code.ok()) << code.status() << w0->Stderr();
  EXPECT_EQ(*code, 0) << w0->Stderr();
  code = w1->Wait(kWait);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << w1->Stderr();
  EXPECT_THAT(w0->Stdout(), HasSubstr("\"end_step\":1200"));
  EXPECT_THAT(w0->Stdout(), HasSubstr("\"test_accuracy\""));
  EXPECT_THAT(w0->Stderr(), HasSubstr("resumed from a checkpoint"));
  EXPECT_THAT(w1->Stderr(), HasSubstr("resuming fashion_mnist_mlp at step"));
}

// The coordinator deals the tabular model's data splits on demand (coordinator/split_ledger.h):
// with 3 workers, worker 2 is SIGKILLed for good mid-epoch and worker 1 SIGKILLed and started
// again. Every training row is still trained, counted from the ids every worker logs once a batch's
// gradients went out (row_log), and the rows trained twice are at most the killed workers' batches
// in flight (16 closures of 64 rows each).
TEST_F(MultiProcessTest, TabularDealtSplits_WorkersKilled_EveryRowTrainedRepeatsBounded) {
  std::vector<int> ports = {ports_[1], ports_[2], ports_[3], ports_[4]};
  absl::StatusOr<int> extra_port = PickUnusedPort();
  ASSERT_TRUE(extra_port.ok());
  ports.push_back(*extra_port);
  const std::string spec = tmp_ + "/dealt_cluster.json";
  std::ofstream(spec) << absl::StrCat(
      R"({"cluster": {"ps": ["localhost:)", ports[0], R"(", "localhost:)", ports[1],
      R"("], "worker": ["localhost:)", ports[2], R"(", "localhost:)", ports[3],
      R"(", "localhost:)", ports[4], R"("]}})");
  // A click log: two id columns and a count, the click's chance set by all three.
  const std::string data = tmp_ + "/dealt.csv";
  {
    std::ofstream out(data);
    out << "user,ad,count,clicked\n";
    std::mt19937 rng(5);
    for (int i = 0; i < 60000; ++i) {
      const int user = static_cast<int>(rng() % 2000), ad = static_cast<int>(rng() % 300);
      const int count = static_cast<int>(rng() % 50);
      const double p = 0.1 + 0.3 * ((user + ad) % 3 == 0) + 0.004 * count;
      out << "u" << user << ",a" << ad << "," << count << ","
          << (std::uniform_real_distribution<double>(0, 1)(rng) < p ? 1 : 0) << "\n";
    }
  }
  const std::string feature_spec = tmp_ + "/dealt_spec.json";
  std::ofstream(feature_spec) << R"({"label": {"column": "clicked"},
    "features": [{"name": "user", "column": "user"}, {"name": "ad", "column": "ad"},
                 {"name": "count", "type": "numeric", "column": "count"}],
    "split": {"test_fraction": 0.1},
    "model": {"type": "wide_and_deep", "embedding_dim": 4, "hidden": [8]}})";
  const std::string row_log = tmp_ + "/dealt_rows";
  auto ps = [&](int i) {
    return Spawn(absl::StrCat("d_ps", i),
                 {ps_bin_, "--cluster_spec=" + spec, absl::StrCat("--task=ps:", i),
                  "--checkpoint_root=" + tmp_});
  };
  auto worker = [&](int i, const std::string& name) {
    return Spawn(name, {worker_bin_, "--cluster_spec=" + spec, absl::StrCat("--task=worker:", i)});
  };
  std::vector<std::unique_ptr<Subprocess>> servers;
  servers.push_back(ps(0));
  servers.push_back(ps(1));
  for (int i = 0; i < 3; ++i) servers.push_back(worker(i, absl::StrCat("d_worker", i)));
  for (auto& s : servers) ASSERT_TRUE(s->WaitForStdout("READY", kWait).ok()) << s->Stderr();
  std::unique_ptr<Subprocess> coordinator = Spawn(
      "d_coordinator",
      {coordinator_bin_, "--cluster_spec=" + spec, "--model=tabular", "--data=" + data,
       "--feature_spec=" + feature_spec, "--epochs=1", "--batch_size=64",
       "--validation_fraction=0", "--checkpoint_dir=" + tmp_ + "/dealt_ckpt", "--restore=none",
       "--logdir=", "--model_opt=row_log=" + row_log + ",hold_rows=2048,shuffle_buffer=4096"});
  // The rows the workers logged so far: id -> times.
  auto logged = [&]() { return LoggedRows(tmp_, "dealt_rows"); };
  // A fifth of the epoch in, kill worker 2 for good and worker 1 for a restart.
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (logged().size() < 10000 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  ASSERT_GE(logged().size(), 10000u) << coordinator->Stderr();
  servers[4]->Signal(SIGKILL);
  servers[3]->Signal(SIGKILL);
  ASSERT_TRUE(servers[3]->Wait(kWait).ok());
  ASSERT_TRUE(servers[4]->Wait(kWait).ok());
  servers[3] = worker(1, "d_worker1_again");
  ASSERT_TRUE(servers[3]->WaitForStdout("READY", kWait).ok()) << servers[3]->Stderr();
  absl::StatusOr<int> code = coordinator->Wait(absl::Seconds(240));
  ASSERT_TRUE(code.ok()) << code.status() << coordinator->Stderr();
  ASSERT_EQ(*code, 0) << coordinator->Stderr();
  const std::string out = coordinator->Stdout();
  // The plan's training rows, from the summary's notes.
  const size_t at = out.find("\"train_rows\":\"");
  ASSERT_NE(at, std::string::npos) << out;
  const int64_t train_rows = std::stoll(out.substr(at + 14));
  EXPECT_GT(train_rows, 50000);
  const std::map<int64_t, int> seen = logged();
  int64_t twice = 0;
  for (const auto& [id, times] : seen) twice += times - 1;
  EXPECT_EQ(static_cast<int64_t>(seen.size()), train_rows);
  EXPECT_LE(twice, 2 * 16 * 64);
  EXPECT_THAT(out, HasSubstr(absl::StrCat("\"data_rows_trained\":", train_rows)));
  EXPECT_THAT(out, HasSubstr("\"data_rows_left\":0"));
  EXPECT_THAT(coordinator->Stderr(), HasSubstr("its closures run elsewhere"));
  std::printf("rows %lld trained, %lld twice (logged by the workers)\n",
              static_cast<long long>(seen.size()), static_cast<long long>(twice));
  for (int i : {0, 1, 2, 3}) servers[i]->Signal(SIGTERM);
  for (int i : {0, 1, 2, 3}) EXPECT_TRUE(servers[i]->Wait(kWait).ok());
}

// A number after "key": in the coordinator's summary line.
double SummaryValue(const std::string& out, const std::string& key) {
  const size_t at = out.find("\"" + key + "\":");
  if (at == std::string::npos) return -1;
  return std::strtod(out.c_str() + at + key.size() + 3, nullptr);
}

// Tables 8x the ps tasks' memory budget, with disk tiers (--disk_tier), as separate processes; ps
// 1 is SIGKILLed mid-training and started again (its tier is a cache: the shards come back from
// the latest checkpoint). The job finishes with the test AUC of the same job all in RAM, and the
// ps tasks leave no tier files behind.
TEST_F(MultiProcessTest, TabularDiskTier_PsKilledAndRestarted_FinishesWithTheCleanRunsQuality) {
  // A click log: users drawn log-uniformly from a million (a head of frequent ones, a long tail),
  // ads from 300; the click's chance set by the user, the ad and a count.
  const std::string data = tmp_ + "/tier.csv";
  {
    std::ofstream out(data);
    out << "user,ad,count,clicked\n";
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> unit(0, 1);
    for (int i = 0; i < 200000; ++i) {
      const int64_t user = static_cast<int64_t>(std::exp(unit(rng) * std::log(1e6)));
      const int ad = static_cast<int>(rng() % 300), count = static_cast<int>(rng() % 50);
      const double p = 0.05 + 0.3 * (user % 3 == 0) + 0.25 * (ad % 4 == 0) + 0.006 * count;
      out << "u" << user << ",a" << ad << "," << count << "," << (unit(rng) < p ? 1 : 0) << "\n";
    }
  }
  const std::string feature_spec = tmp_ + "/tier_spec.json";
  std::ofstream(feature_spec) << R"({"label": {"column": "clicked"},
    "features": [{"name": "user", "column": "user"}, {"name": "ad", "column": "ad"},
                 {"name": "count", "type": "numeric", "column": "count"}],
    "split": {"test_fraction": 0.1},
    "model": {"type": "wide_and_deep", "embedding_dim": 8, "hidden": [8]}})";
  const std::vector<std::string> job = {"--model=tabular", "--data=" + data,
                                        "--feature_spec=" + feature_spec, "--epochs=1",
                                        "--batch_size=128", "--validation_fraction=0", "--logdir=",
                                        "--restore=none"};
  // The same job all in RAM, in one process.
  std::vector<std::string> clean_argv = {coordinator_bin_,
                                         "--cluster_spec=in_process:workers=2,ps=2",
                                         "--checkpoint_dir="};
  clean_argv.insert(clean_argv.end(), job.begin(), job.end());
  std::unique_ptr<Subprocess> clean = Spawn("t_clean", clean_argv);
  absl::StatusOr<int> clean_code = clean->Wait(absl::Seconds(240));
  ASSERT_TRUE(clean_code.ok() && *clean_code == 0) << clean->Stderr();
  const double clean_auc = SummaryValue(clean->Stdout(), "test_auc");
  ASSERT_GT(clean_auc, 0.6) << clean->Stdout();

  // About 65K users, each in 3 tables (wide and baseline rows of 1 float, embedding rows of 8,
  // with Adagrad's slots: 152 bytes of records, and the index) make ~5.5 MiB of tables per ps,
  // against a budget of 0.7 MiB (the disk store's buffers included).
  const int64_t budget = 700 << 10;
  auto ps = [&](int i, const std::string& name) {
    return Spawn(name, {ps_bin_, "--cluster_spec=" + spec_path_, absl::StrCat("--task=ps:", i),
                        "--checkpoint_root=" + tmp_, absl::StrCat("--memory_budget=", budget),
                        absl::StrCat("--disk_dir=", tmp_, "/disk", i)});
  };
  std::vector<std::unique_ptr<Subprocess>> servers;
  servers.push_back(ps(0, "t_ps0"));
  servers.push_back(ps(1, "t_ps1"));
  for (int i = 0; i < 2; ++i) {
    servers.push_back(Spawn(absl::StrCat("t_worker", i),
                            {worker_bin_, "--cluster_spec=" + spec_path_,
                             absl::StrCat("--task=worker:", i)}));
  }
  for (auto& s : servers) ASSERT_TRUE(s->WaitForStdout("READY", kWait).ok()) << s->Stderr();
  const int64_t idle_rss = ProcStatusBytes("VmHWM", servers[0]->pid());
  const std::string ckpt = tmp_ + "/tier_ckpt";
  std::vector<std::string> argv = {coordinator_bin_, "--cluster_spec=" + spec_path_,
                                   "--disk_tier", "--checkpoint_dir=" + ckpt,
                                   "--checkpoint_every_steps=40"};
  argv.insert(argv.end(), job.begin(), job.end());
  std::unique_ptr<Subprocess> coordinator = Spawn("t_coordinator", argv);
  // Once a checkpoint is written, ps 1 dies and comes back empty.
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  auto has_checkpoint = [&] {
    std::error_code ec;
    if (!std::filesystem::exists(ckpt, ec)) return false;
    for (const auto& e : std::filesystem::recursive_directory_iterator(ckpt, ec)) {
      if (e.path().extension() == ".sst") return true;
    }
    return false;
  };
  while (!has_checkpoint() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(has_checkpoint()) << coordinator->Stderr();
  absl::SleepFor(absl::Milliseconds(500));
  const int64_t before_kill_rss = ProcStatusBytes("VmHWM", servers[1]->pid());
  servers[1]->Signal(SIGKILL);
  ASSERT_TRUE(servers[1]->Wait(kWait).ok());
  servers[1] = ps(1, "t_ps1_again");
  ASSERT_TRUE(servers[1]->WaitForStdout("READY", kWait).ok()) << servers[1]->Stderr();
  absl::StatusOr<int> code = coordinator->Wait(absl::Seconds(300));
  ASSERT_TRUE(code.ok()) << code.status() << coordinator->Stderr();
  ASSERT_EQ(*code, 0) << coordinator->Stdout() << coordinator->Stderr();
  const double auc = SummaryValue(coordinator->Stdout(), "test_auc");
  std::printf("test AUC: all in RAM %.4f, tiers with ps 1 killed %.4f\n", clean_auc, auc);
  EXPECT_NEAR(auc, clean_auc, 0.01) << coordinator->Stdout();
  EXPECT_THAT(coordinator->Stderr(), HasSubstr("ps:1"));
  // Most keys were on disk at the end.
  EXPECT_GT(SummaryValue(coordinator->Stdout(), "disk_keys"), 40000) << coordinator->Stdout();
  // Peak memory, for the record: at this size a ps's serving path (~35 MiB above idle, the same
  // without a tier) outweighs its tables; ps/dynamic_tier_test measures a tier's own growth.
  const int64_t peaks[2] = {
      ProcStatusBytes("VmHWM", servers[0]->pid()),
      std::max(before_kill_rss, ProcStatusBytes("VmHWM", servers[1]->pid()))};
  for (int i = 0; i < 2; ++i) {
    std::printf("ps %d: peak RSS %.1f MiB, idle %.1f MiB, budget %.1f MiB\n", i,
                peaks[i] / 1048576.0, idle_rss / 1048576.0, budget / 1048576.0);
  }
  // The tiers held rows on disk: their directories are gone with the ps tasks that stop.
  for (int i = 0; i < 4; ++i) servers[i]->Signal(SIGTERM);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(servers[i]->Wait(kWait).ok());
  for (int i = 0; i < 2; ++i) {
    std::error_code ec;
    int left = 0;
    for (const auto& e : std::filesystem::directory_iterator(tmp_ + "/disk" + std::to_string(i), ec)) {
      (void)e;
      ++left;
    }
    EXPECT_EQ(left, 0) << "ps " << i << "'s tier directory left behind";
  }
}

// A task that dies of a fault says so in its log, with a symbolized stack trace, and still dies of
// the signal (so supervisors see the crash).
TEST_F(MultiProcessTest, PsDiesOfAFault_StackTraceInItsLog) {
  std::unique_ptr<Subprocess> ps =
      Spawn("fault_ps0", {ps_bin_, "--cluster_spec=" + spec_path_, "--task=ps:0"});
  ASSERT_TRUE(ps->WaitForStdout("READY", kWait).ok()) << ps->Stderr();
  // To its main thread (its id is the process's), waiting in a libc call the unwinder can walk: a
  // process-wide kill lands on any thread, and one inside a frame-pointer-less spin (gRPC's) leaves
  // no frame to name.
  ASSERT_EQ(syscall(SYS_tgkill, ps->pid(), ps->pid(), SIGSEGV), 0);
  absl::StatusOr<int> code = ps->Wait(kWait);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 128 + SIGSEGV) << ps->Stderr();
  EXPECT_THAT(ps->Stderr(), HasSubstr("*** SIGSEGV received"));
  // At least one frame named ("@ 0x7f67dfe5ac82  (unknown)  __sigtimedwait"): symbolized.
  EXPECT_THAT(ps->Stderr(), ::testing::ContainsRegex("@ +0x[0-9a-f]+ +[^ ]+ +[_A-Za-z][_A-Za-z0-9:]+"));
}

TEST_F(MultiProcessTest, BadInput_OneLineErrorAndExitCode2) {
  struct Case {
    std::string name;
    std::vector<std::string> argv;
    std::vector<std::string> env;
    std::string message;
  };
  const std::string bad_spec = tmp_ + "/bad.json";
  std::ofstream(bad_spec) << R"({"cluster": {"worker": ["localhost:1"], "ps": ["localhost"]}})";
  std::vector<Case> cases = {
      {"ps_out_of_range", {ps_bin_, "--cluster_spec=" + spec_path_, "--task=ps:5"}, {},
       "task index 5 is out of range for job \"ps\" with 2 task(s)"},
      {"ps_wrong_job", {ps_bin_, "--cluster_spec=" + spec_path_, "--task=worker:0"}, {},
       "task worker:0 is not a ps task"},
      {"ps_no_task", {ps_bin_, "--cluster_spec=" + spec_path_}, {}, "no task"},
      {"ps_no_spec", {ps_bin_, "--task=ps:0"}, {"TF_CONFIG="}, "no cluster spec"},
      {"worker_bad_task", {worker_bin_, "--cluster_spec=" + spec_path_, "--task=worker"}, {},
       "is not type:index"},
      {"coordinator_bad_spec", {coordinator_bin_, "--cluster_spec=" + bad_spec}, {},
       "task ps:0: address \"localhost\" is not host:port"},
      {"coordinator_missing_file", {coordinator_bin_, "--cluster_spec=/no/such.json"}, {},
       "\"/no/such.json\" can't be read"},
      {"coordinator_bad_in_process", {coordinator_bin_, "--cluster_spec=in_process:ps=0"}, {},
       "ps=0 must be a whole number"},
      {"coordinator_bad_job", {coordinator_bin_, "--cluster_spec=in_process", "--job=dance"}, {},
       "--job=dance is not a job"},
  };
  for (const Case& c : cases) {
    std::unique_ptr<Subprocess> p = Spawn(c.name, c.argv, c.env);
    ASSERT_NE(p, nullptr);
    absl::StatusOr<int> code = p->Wait(kWait);
    ASSERT_TRUE(code.ok()) << c.name << ": " << code.status();
    EXPECT_EQ(*code, 2) << c.name << ": " << p->Stderr();
    const std::string err = p->Stderr();
    EXPECT_THAT(err, HasSubstr(c.message)) << c.name;
    EXPECT_THAT(err, HasSubstr("error: ")) << c.name;
  }
}

}  // namespace
}  // namespace pstrain
