#include "cluster/task_main.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/metrics_http.h"
#include "cluster/security_flags.h"
#include "cluster/spec_flag.h"
#include "cluster/cluster_spec.h"

ABSL_FLAG(std::string, cluster_spec, "",
          "The cluster spec: TF_CONFIG-style JSON text, or the path of a JSON file. When empty, "
          "the TF_CONFIG environment variable is used.");
ABSL_FLAG(std::string, task, "",
          "This process's task, type:index (e.g. ps:0). When empty, the spec's \"task\" is used.");
ABSL_FLAG(std::string, bind_host, "0.0.0.0",
          "The host part of the listen address (\"spec\": the host of this task's spec address); "
          "the port comes from the spec address.");
ABSL_FLAG(int, metrics_port, 0,
          "Serve Prometheus metrics at http://<bind_host>:<port>/metrics (0: none).");

namespace pstrain {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 2;
}

}  // namespace

int RunTaskMain(int argc, char** argv, const std::string& job, const StartTaskFn& start) {
  InstallFailureSignalHandler(argv[0]);
  absl::SetProgramUsageMessage(absl::StrCat(
      "Runs one ", job, " task of a cluster.\nUsage: ", argv[0],
      " --cluster_spec=cluster.json --task=", job, ":0"));
  absl::ParseCommandLine(argc, argv);
  SetMinLogLevelFromEnv();
  if (absl::Status security = ApplySecurityFlags(); !security.ok()) {
    return Fail(std::string(security.message()));
  }

  std::string source;
  absl::StatusOr<std::string> spec_text = ClusterSpecText(absl::GetFlag(FLAGS_cluster_spec), &source);
  if (!spec_text.ok()) return Fail(std::string(spec_text.status().message()));
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromFlagValue(*spec_text);
  if (!spec.ok()) return Fail(absl::StrCat(source, ": ", spec.status().message()));

  if (!absl::GetFlag(FLAGS_task).empty()) {
    absl::StatusOr<TaskRef> task = ParseTaskRef(absl::GetFlag(FLAGS_task));
    if (!task.ok()) return Fail(absl::StrCat("--task: ", task.status().message()));
    spec = spec->WithTask(*task);
    if (!spec.ok()) return Fail(absl::StrCat("--task: ", spec.status().message()));
  }
  if (!spec->task().has_value()) {
    return Fail(absl::StrCat("no task: pass --task=", job, ":N or give \"task\" in the spec"));
  }
  const TaskRef task = *spec->task();
  if (task.type != job) {
    return Fail(absl::StrCat("task ", task.ToString(), " is not a ", job, " task"));
  }
  std::string address = *spec->address(task);  // validated by WithTask / FromJson
  int port = 0;
  SplitHostPort(address, nullptr, &port).IgnoreError();  // validated by the spec

  // Block the stop signals in every thread (gRPC's threads inherit the mask), then wait for them
  // here with sigwait: no async-signal-safety concerns and no polling.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::string host = absl::GetFlag(FLAGS_bind_host);
  if (host == "spec") {
    host = address.substr(0, address.rfind(':'));
    if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  }
  const std::string listen = absl::StrCat(host.find(':') != std::string::npos ? "[" : "", host,
                                          host.find(':') != std::string::npos ? "]" : "", ":",
                                          port);
  std::unique_ptr<MetricsRegistry> metrics;
  std::unique_ptr<MetricsHttpServer> metrics_server;
  if (const int metrics_port = absl::GetFlag(FLAGS_metrics_port); metrics_port != 0) {
    metrics = std::make_unique<MetricsRegistry>(Labels{{"task", task.ToString()}});
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> served =
        MetricsHttpServer::Start(host, metrics_port, metrics.get());
    if (!served.ok()) {
      return Fail(absl::StrCat(task.ToString(), " --metrics_port: ", served.status().message()));
    }
    metrics_server = *std::move(served);
    LOG(INFO) << task.ToString() << " serves metrics at http://" << metrics_server->address()
              << "/metrics";
  }
  absl::StatusOr<RunningTask> running = start(*spec, task.index, listen, metrics.get());
  if (!running.ok()) {
    return Fail(absl::StrCat(task.ToString(), " (spec address ", address, "): ",
                             running.status().message()));
  }
  LOG(INFO) << running->description << " serving; spec address " << address;
  // One machine-readable line on stdout for scripts that wait for readiness.
  std::cout << "READY " << task.ToString() << " " << running->address << std::endl;

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  LOG(INFO) << "received " << (signal_number == SIGTERM ? "SIGTERM" : "SIGINT")
            << ", shutting down " << task.ToString();
  running->server.reset();
  metrics_server.reset();
  LOG(INFO) << task.ToString() << " stopped cleanly";
  return 0;
}

}  // namespace pstrain
