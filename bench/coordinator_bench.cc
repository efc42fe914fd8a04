// Empty closures per second through the coordinator with 2 in-process workers, and in the same run
// the limit: small async gRPC round trips per second on loopback with 8 in flight.
//
//   bazel run -c opt //bench:coordinator_bench [-- --seconds=3]
//
// Prints one JSON object per figure.
#include <atomic>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "coordinator/cluster_coordinator.h"
#include "grpcpp/client_context.h"
#include "nlohmann/json.hpp"
#include "proto/worker_service.grpc.pb.h"
#include "coordinator/in_process_cluster.h"

ABSL_FLAG(double, seconds, 3.0, "Seconds per measurement (after a warm-up).");

namespace pstrain {
namespace {

void Print(const std::string& name, double value, const std::string& unit, nlohmann::json extra) {
  extra["name"] = name;
  extra["value"] = value;
  extra["unit"] = unit;
  std::printf("%s\n", extra.dump().c_str());
  std::fflush(stdout);
}

// Health round trips with `in_flight` outstanding calls at all times, for `seconds`.
double RoundTripsPerSecond(const std::string& address, int in_flight, double seconds) {
  auto stub = WorkerService::NewStub(CreateChannel(address));
  struct Slot {
    grpc::ClientContext* context = nullptr;
    HealthRequest request;
    HealthResponse response;
  };
  std::vector<Slot> slots(in_flight);
  absl::Mutex mu;
  int64_t completed = 0;
  int active = 0;
  bool stop = false;
  std::function<void(Slot*)> issue = [&](Slot* slot) {
    delete slot->context;
    slot->context = new grpc::ClientContext();
    stub->async()->Health(slot->context, &slot->request, &slot->response,
                          [&, slot](grpc::Status status) {
                            bool again;
                            {
                              absl::MutexLock lock(&mu);
                              if (status.ok()) ++completed;
                              again = !stop;
                              if (!again) --active;
                            }
                            if (again) issue(slot);
                          });
  };
  {
    absl::MutexLock lock(&mu);
    active = in_flight;
  }
  for (Slot& s : slots) issue(&s);
  absl::SleepFor(absl::Seconds(0.3));  // warm-up
  int64_t start_count;
  {
    absl::MutexLock lock(&mu);
    start_count = completed;
  }
  const absl::Time start = absl::Now();
  absl::SleepFor(absl::Seconds(seconds));
  int64_t end_count;
  absl::Time end;
  {
    absl::MutexLock lock(&mu);
    end_count = completed;
    end = absl::Now();
    stop = true;
    mu.Await(absl::Condition(+[](int* a) { return *a == 0; }, &active));
  }
  for (Slot& s : slots) delete s.context;
  return (end_count - start_count) / absl::ToDoubleSeconds(end - start);
}

int Main() {
  SetMinLogLevel(LogLevel::kWarning);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  InProcessClusterOptions options;
  options.num_workers = 2;
  options.num_ps = 1;
  absl::StatusOr<std::unique_ptr<InProcessCluster>> cluster = InProcessCluster::Start(options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(cluster.status().message()).c_str());
    return 1;
  }
  const std::string worker0 = *(*cluster)->spec().address({"worker", 0});

  const double limit = RoundTripsPerSecond(worker0, /*in_flight=*/8, seconds);
  Print("grpc_async_round_trips_8_in_flight", limit, "rpc/s",
        {{"what", "limit: Health RPCs to one in-process worker, 8 in flight, loopback"}});

  absl::StatusOr<std::unique_ptr<ClusterCoordinator>> coordinator =
      ClusterCoordinator::Create((*cluster)->spec());
  if (!coordinator.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(coordinator.status().message()).c_str());
    return 1;
  }
  // Warm-up: let both workers connect.
  for (int i = 0; i < 2000; ++i) (void)(*coordinator)->Schedule("noop", {});
  if (absl::Status s = (*coordinator)->Join(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  int64_t closures = 0;
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + absl::Seconds(seconds);
  while (absl::Now() < deadline) {
    for (int i = 0; i < 1000; ++i) {
      if (!(*coordinator)->Schedule("noop", {}).ok()) return 1;
    }
    closures += 1000;
  }
  if (absl::Status s = (*coordinator)->Join(); !s.ok()) return 1;
  const double rate = closures / absl::ToDoubleSeconds(absl::Now() - start);
  Print("empty_closures_2_workers", rate, "closures/s",
        {{"what", "Schedule(\"noop\") + Join through the coordinator, 2 in-process workers"},
         {"limit_rpc_per_s", limit},
         {"fraction_of_limit", rate / limit},
         {"target_fraction", 0.8}});
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
