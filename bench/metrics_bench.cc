// What metrics cost training: the flights model (flights_ctr) on an in-process cluster (2 workers,
// 2 ps) for --steps steps, with every task's metrics on and scraped over HTTP every second (as
// Prometheus would: the chief's and each task's /metrics), against the same run with metrics off,
// in alternating rounds. Prints each round's examples/s and the ratio of the medians (target: at
// least 0.97).
//
//   bazel run -c opt //bench:metrics_bench [-- --rounds=3 --steps=4000]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/bench_loops.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/metrics_http.h"
#include "coordinator/in_process_cluster.h"
#include "httplib.h"
#include "models/registry.h"
#include "trainer/trainer.h"

ABSL_FLAG(std::string, data, "data/flights/flights.csv", "The flights CSV.");
ABSL_FLAG(int, rounds, 3, "Rounds; each trains once with metrics and once without.");
ABSL_FLAG(int64_t, steps, 4000, "Training steps per run.");

namespace pstrain {
namespace {

// One run's examples/s; with `metrics`, every task's endpoint is scraped every second meanwhile.
double Run(bool metrics, int64_t* scrapes) {
  ModelOptions o;
  o.data = absl::GetFlag(FLAGS_data);
  o.max_steps = absl::GetFlag(FLAGS_steps);
  o.validation_fraction = 0;
  auto model = CreateModel("flights_ctr", o);
  if (!model.ok()) Die(model.status(), "model");
  InProcessClusterOptions c;
  c.num_workers = 2;
  c.num_ps = 2;
  c.registry = *TrainingRegistry(std::make_shared<ReplicaGroups>());
  c.host = "127.0.0.1";
  if (metrics) c.metrics_port = 0;
  auto cluster = InProcessCluster::Start(c);
  if (!cluster.ok()) Die(cluster.status(), "cluster");
  MetricsRegistry chief(Labels{{"task", "chief"}});
  std::unique_ptr<MetricsHttpServer> chief_http;
  std::vector<std::string> endpoints;
  if (metrics) {
    auto served = MetricsHttpServer::Start("127.0.0.1", 0, &chief);
    if (!served.ok()) Die(served.status(), "metrics");
    chief_http = *std::move(served);
    endpoints.push_back(chief_http->address());
    for (const auto& [task, address] : (*cluster)->metrics_addresses()) endpoints.push_back(address);
  }
  absl::Notification done;
  std::thread scraper([&] {
    while (!done.WaitForNotificationWithTimeout(absl::Seconds(1))) {
      for (const std::string& e : endpoints) {
        const size_t colon = e.rfind(':');
        httplib::Client client(e.substr(0, colon), std::stoi(e.substr(colon + 1)));
        auto r = client.Get("/metrics");
        if (r && r->status == 200) ++*scrapes;
      }
    }
  });
  TrainerOptions t;
  t.restore = "none";
  t.evaluate = false;
  t.metrics = metrics ? &chief : nullptr;
  std::ostream quiet(nullptr);
  t.progress.out = &quiet;
  auto result = Train((*cluster)->spec(), model->get(), t);
  done.Notify();
  scraper.join();
  if (!result.ok()) Die(result.status(), "train");
  return result->examples_per_sec;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  pstrain::SetMinLogLevelFromEnv();
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY"); dir != nullptr && *dir != '\0') {
    if (::chdir(dir) != 0) std::fprintf(stderr, "warning: can't chdir to %s\n", dir);
  }
  std::vector<double> on, off;
  for (int r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    int64_t scrapes = 0;
    // Alternate which goes first, so drift over time hits both alike.
    for (bool metrics : r % 2 == 0 ? std::vector<bool>{false, true} : std::vector<bool>{true, false}) {
      scrapes = 0;
      const double eps = pstrain::Run(metrics, &scrapes);
      (metrics ? on : off).push_back(eps);
      pstrain::Emit({{"name", "round"}, {"round", r}, {"metrics", metrics},
                     {"examples_per_s", pstrain::Round(eps, 0)}, {"scrapes", scrapes}});
    }
  }
  const double ratio = pstrain::Median(on) / pstrain::Median(off);
  pstrain::Emit({{"name", "metrics_on_vs_off"}, {"median_on", pstrain::Round(pstrain::Median(on), 0)},
                 {"median_off", pstrain::Round(pstrain::Median(off), 0)},
                 {"ratio", pstrain::Round(ratio, 3)}, {"target", 0.97}});
  return 0;
}
