// The tabular model's data path and training against its limits and peers, in one run:
//
//   1. reading the CSV: a plain sequential read of the file (the limit: read() into a buffer,
//      page cache warm), the record reader alone (quotes, fields), the coordinator's scan (every
//      row checked, statistics), and parse + feature transform (every row into an example, as the
//      workers' readers do), single-threaded, in MB/s and rows/s; beside Python's csv module
//      reading the same file (a peer, when python3 runs here)
//   2. training: the flights model as a spec (models/tabular/specs/flights_ctr.json) against
//      flights_ctr itself, one epoch each on the same in-process cluster shape, alternating
//      rounds: examples/s and test AUC, and their ratios
//
//   bazel run -c opt //bench:tabular_bench [-- --rounds=2 --train=true]
//
// Prints one JSON object per figure.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "coordinator/in_process_cluster.h"
#include "models/data/csv_records.h"
#include "models/registry.h"
#include "models/tabular/data_plan.h"
#include "models/tabular/example_stream.h"
#include "models/tabular/feature_spec.h"
#include "nlohmann/json.hpp"
#include "trainer/trainer.h"

ABSL_FLAG(std::string, data, "data/flights/flights.csv", "The CSV file.");
ABSL_FLAG(std::string, spec, "models/tabular/specs/flights_ctr.json", "Its feature spec.");
ABSL_FLAG(int, rounds, 2, "Training rounds (each trains the spec model and flights_ctr once).");
ABSL_FLAG(bool, train, true, "Run the training comparison.");
ABSL_FLAG(int, workers, 2, "Training: workers of the in-process cluster (2 ps).");

namespace pstrain {
namespace {

void Print(nlohmann::json j) { std::printf("%s\n", j.dump().c_str()); std::fflush(stdout); }

double Seconds(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

int64_t FileBytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  const int64_t bytes = ::lseek(fd, 0, SEEK_END);
  ::close(fd);
  return bytes;
}

// Reads the whole file with read(2) in 1 MiB blocks; the seconds it took.
double PlainRead(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  std::vector<char> buffer(1 << 20);
  const absl::Time start = absl::Now();
  int64_t sum = 0;
  while (true) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n <= 0) break;
    sum += buffer[n - 1];  // touch the data
  }
  ::close(fd);
  const double s = Seconds(start);
  if (sum == 42) std::printf(" ");  // keep the loop
  return s;
}

int Run() {
  const std::string path = absl::GetFlag(FLAGS_data);
  const int64_t bytes = FileBytes(path);
  if (bytes < 0) {
    std::fprintf(stderr, "error: cannot open %s (run tools/fetch_data.sh flights)\n", path.c_str());
    return 2;
  }
  const double mb = static_cast<double>(bytes) / 1e6;
  PlainRead(path);  // warm the page cache
  double plain = PlainRead(path);
  Print({{"name", "plain_read"}, {"mb_per_s", mb / plain}, {"seconds", plain}, {"bytes", bytes},
         {"note", "read(2) in 1 MiB blocks, page cache warm: the limit"}});

  // The record reader alone.
  int64_t rows = 0;
  {
    absl::StatusOr<std::unique_ptr<data::CsvRecordReader>> r = data::CsvRecordReader::Open(path);
    if (!r.ok()) return 2;
    const absl::Time start = absl::Now();
    while (true) {
      absl::StatusOr<bool> any = (*r)->Next();
      if (!any.ok() || !*any) break;
      ++rows;
    }
    const double s = Seconds(start);
    Print({{"name", "csv_records"}, {"mb_per_s", mb / s}, {"records_per_s", rows / s},
           {"vs_plain_read", plain / s}, {"records", rows}, {"note", "the header is one"}});
    --rows;  // data rows
  }

  absl::StatusOr<tabular::Spec> spec = tabular::ReadSpec(absl::GetFlag(FLAGS_spec));
  if (!spec.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  tabular::ScanOptions so;
  so.data = path;
  so.workers = 1;
  absl::Time start = absl::Now();
  absl::StatusOr<tabular::DataPlan> plan = tabular::Scan(*spec, so);
  if (!plan.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(plan.status().message()).c_str());
    return 2;
  }
  double s = Seconds(start);
  Print({{"name", "scan"}, {"mb_per_s", mb / s}, {"rows_per_s", rows / s},
         {"vs_plain_read", plain / s},
         {"note", "the coordinator's pass: every row split and checked, statistics"}});

  // Parse + transform: every row of every split into an example.
  {
    tabular::DataContext context(*spec, *plan, {});
    const tabular::ExampleLayout& layout = context.transformer().layout();
    tabular::Batch b;
    b.Resize(1, layout);
    int64_t examples = 0;
    start = absl::Now();
    for (tabular::Split split :
         {tabular::Split::kTrain, tabular::Split::kValidation, tabular::Split::kTest}) {
      const std::vector<tabular::Range> ranges =
          split == tabular::Split::kTrain ? plan->shares[0] : plan->EvalUnits(split);
      for (const tabular::Range& r : ranges) {
        absl::StatusOr<std::unique_ptr<tabular::RangeReader>> reader =
            tabular::RangeReader::Open(&context, r, split);
        if (!reader.ok()) return 2;
        while (true) {
          absl::StatusOr<bool> got = (*reader)->Next(b.At(0, layout));
          if (!got.ok() || !*got) break;
          ++examples;
        }
      }
    }
    s = Seconds(start);
    Print({{"name", "parse_and_transform"}, {"mb_per_s", mb / s}, {"rows_per_s", examples / s},
           {"vs_plain_read", plain / s}, {"examples", examples},
           {"features", spec->features.size()},
           {"note", "single thread: records -> label, 14 keys (crosses, dates, buckets)"}});
  }

  // Python's csv module on the same file: a peer.
  {
    const std::string cmd = absl::StrCat(
        "python3 -c \"import csv,sys,time\nt=time.time()\nn=sum(1 for _ in csv.reader(open('",
        path, "', newline='')))\nprint(n-1, time.time()-t)\" 2>/dev/null");
    FILE* p = ::popen(cmd.c_str(), "r");
    long long n = 0;
    double secs = 0;
    if (p != nullptr && std::fscanf(p, "%lld %lf", &n, &secs) == 2 && secs > 0) {
      Print({{"name", "peer_python_csv_reader"}, {"mb_per_s", mb / secs}, {"rows_per_s", n / secs},
             {"vs_plain_read", plain / secs}, {"note", "python3's csv.reader, fields only"}});
    } else {
      Print({{"name", "peer_python_csv_reader"}, {"skipped", "python3 did not run"}});
    }
    if (p != nullptr) ::pclose(p);
  }

  if (!absl::GetFlag(FLAGS_train)) return 0;
  // Training: the spec against flights_ctr, alternating.
  std::vector<double> spec_eps, ctr_eps, spec_auc, ctr_auc;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (const std::string model_name : {"tabular", "flights_ctr"}) {
      InProcessClusterOptions co;
      co.num_workers = absl::GetFlag(FLAGS_workers);
      co.num_ps = 2;
      co.registry = *TrainingRegistry(std::make_shared<ReplicaGroups>());
      absl::StatusOr<std::unique_ptr<InProcessCluster>> cluster = InProcessCluster::Start(co);
      if (!cluster.ok()) return 2;
      ModelOptions mo;
      mo.data = path;
      mo.epochs = 1;
      if (model_name == "tabular") mo.extra["feature_spec"] = absl::GetFlag(FLAGS_spec);
      absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(model_name, mo);
      if (!model.ok()) {
        std::fprintf(stderr, "error: %s\n", std::string(model.status().message()).c_str());
        return 2;
      }
      TrainerOptions to;
      std::ostringstream progress;
      to.progress.out = &progress;
      absl::StatusOr<TrainResult> r = Train((*cluster)->spec(), model->get(), to);
      if (!r.ok()) {
        std::fprintf(stderr, "error: %s\n", std::string(r.status().message()).c_str());
        return 2;
      }
      const double auc = r->metrics.values["test_auc"];
      (model_name == "tabular" ? spec_eps : ctr_eps).push_back(r->examples_per_sec);
      (model_name == "tabular" ? spec_auc : ctr_auc).push_back(auc);
      Print({{"name", absl::StrCat("train_", model_name)}, {"round", round},
             {"examples_per_s", r->examples_per_sec}, {"test_auc", auc},
             {"train_seconds", r->train_seconds}, {"workers", co.num_workers}, {"ps", 2}});
    }
  }
  for (size_t i = 0; i < spec_eps.size(); ++i) {
    Print({{"name", "spec_vs_flights_ctr"}, {"round", i},
           {"examples_per_s_ratio", spec_eps[i] / ctr_eps[i]},
           {"test_auc_difference", spec_auc[i] - ctr_auc[i]},
           {"target", "ratio >= 0.9, |AUC difference| <= 0.003"}});
  }
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pstrain::Run();
}
