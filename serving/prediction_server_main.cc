// The prediction server (serving/prediction_server.h): serves the newest version of an exported
// model over gRPC (proto/prediction_service.proto) and HTTP/JSON, reloading newer versions as
// they appear:
//
//   bazel run //serving:prediction_server -- --model_base=models/flights_ctr --port=8500 \
//       --http_port=8501 [--cache_bytes=256M] [--max_batch_examples=256] [--max_batch_wait=2ms]
//
// with models/flights_ctr/<version>/ each written by //serving:export. Takes the security flags
// every binary takes (--tls_cert, --tls_key, --tls_ca, --auth_token_file: gRPC and HTTPS both).
// Prints one line "READY prediction_server grpc=<host:port> http=<host:port> model=<name>
// version=<N>" on stdout once serving; stops cleanly on SIGTERM or SIGINT. Exit code 2 with a
// one-line error for bad flags or a model that can't be served.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cluster/security_flags.h"
#include "common/byte_size.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/metrics_http.h"
#include "serving/prediction_server.h"

ABSL_FLAG(std::string, model_base, "",
          "The model's base directory: <model_base>/<version>/ each an exported model "
          "(//serving:export); the newest complete one is served, newer ones as they appear.");
ABSL_FLAG(std::string, model_name, "",
          "The name requests use (/v1/models/<name>, PredictRequest.model_name). Default: "
          "--model_base's last component.");
ABSL_FLAG(std::string, host, "0.0.0.0", "The host gRPC and HTTP listen on.");
ABSL_FLAG(int, port, 8500, "gRPC's port (0: a free one, printed on the READY line).");
ABSL_FLAG(int, http_port, 8501,
          "HTTP/JSON's port (0: a free one, printed on the READY line; -1: no HTTP).");
ABSL_FLAG(std::string, cache_bytes, "256M",
          "Memory for table rows per loaded version (bytes, or with K, M, G; -1: every row in "
          "memory). Two versions are loaded for the moment of a reload.");
ABSL_FLAG(int, max_batch_examples, 256,
          "Concurrent requests are merged into one model call of up to this many examples.");
ABSL_FLAG(absl::Duration, max_batch_wait, absl::Milliseconds(2),
          "How long a batch waits for more requests after its first (0: no waiting).");
ABSL_FLAG(int, batch_threads, 2, "Threads running batches (each one at a time).");
ABSL_FLAG(int64_t, max_request_examples, 4096,
          "Examples in one request; more is RESOURCE_EXHAUSTED (HTTP 413).");
ABSL_FLAG(std::string, max_request_bytes, "8M",
          "Bytes of one request (gRPC message, or HTTP body); more is RESOURCE_EXHAUSTED (413).");
ABSL_FLAG(absl::Duration, poll_period, absl::Seconds(1),
          "How often --model_base is checked for a newer version (0: never).");
ABSL_FLAG(std::string, follow_checkpoints, "",
          "The training job's checkpoint directory: each --poll_period the version served is "
          "brought up to its newest checkpoint (docs/online.md). Default: none.");
ABSL_FLAG(int, metrics_port, 0,
          "Serve Prometheus metrics at http://<host>:<port>/metrics (0: none).");

namespace pstrain {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 2;
}

int Run() {
  PredictionServerOptions options;
  options.model_base = absl::GetFlag(FLAGS_model_base);
  if (options.model_base.empty()) return Fail("--model_base is required");
  options.model_name = absl::GetFlag(FLAGS_model_name);
  const std::string host = absl::GetFlag(FLAGS_host);
  const bool v6 = host.find(':') != std::string::npos;
  options.grpc_address =
      absl::StrCat(v6 ? "[" : "", host, v6 ? "]" : "", ":", absl::GetFlag(FLAGS_port));
  options.http_host = host;
  options.http_port = absl::GetFlag(FLAGS_http_port);
  const std::string cache = absl::GetFlag(FLAGS_cache_bytes);
  if (cache == "-1") {
    options.predictor.store.cache_bytes = -1;
  } else {
    absl::StatusOr<int64_t> bytes = ParseByteSize(cache);
    if (!bytes.ok()) return Fail(absl::StrCat("--cache_bytes: ", bytes.status().message()));
    options.predictor.store.cache_bytes = *bytes;
  }
  options.batching.max_batch_examples = absl::GetFlag(FLAGS_max_batch_examples);
  options.batching.max_batch_wait = absl::GetFlag(FLAGS_max_batch_wait);
  options.batching.threads = absl::GetFlag(FLAGS_batch_threads);
  options.limits.max_request_examples = absl::GetFlag(FLAGS_max_request_examples);
  absl::StatusOr<int64_t> max_bytes = ParseByteSize(absl::GetFlag(FLAGS_max_request_bytes));
  if (!max_bytes.ok()) {
    return Fail(absl::StrCat("--max_request_bytes: ", max_bytes.status().message()));
  }
  options.limits.max_request_bytes = *max_bytes;
  options.poll_period = absl::GetFlag(FLAGS_poll_period);
  options.follow_checkpoints = absl::GetFlag(FLAGS_follow_checkpoints);

  // Block the stop signals in every thread (gRPC's and httplib's inherit the mask), then wait for
  // them with sigwait: no async-signal-safety concerns and no polling.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::unique_ptr<MetricsRegistry> metrics;
  std::unique_ptr<MetricsHttpServer> metrics_server;
  if (const int metrics_port = absl::GetFlag(FLAGS_metrics_port); metrics_port != 0) {
    metrics = std::make_unique<MetricsRegistry>(Labels{{"task", "prediction_server"}});
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> served =
        MetricsHttpServer::Start(host, metrics_port, metrics.get());
    if (!served.ok()) return Fail(absl::StrCat("--metrics_port: ", served.status().message()));
    metrics_server = *std::move(served);
    LOG(INFO) << "metrics at http://" << metrics_server->address() << "/metrics";
  }
  options.metrics = metrics.get();

  absl::StatusOr<std::unique_ptr<PredictionServer>> server = PredictionServer::Start(options);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  std::cout << "READY prediction_server grpc=" << (*server)->grpc_address()
            << " http=" << (*server)->http_address() << " model=" << (*server)->model_name()
            << " version=" << (*server)->version() << std::endl;

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  LOG(INFO) << "received " << (signal_number == SIGTERM ? "SIGTERM" : "SIGINT")
            << ", shutting down";
  server->reset();
  metrics_server.reset();
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::InstallFailureSignalHandler(argv[0]);
  absl::SetProgramUsageMessage(
      "Serves an exported model over gRPC and HTTP/JSON.\n"
      "Usage: prediction_server --model_base=models/flights_ctr [--port=8500] [--http_port=8501] "
      "[--cache_bytes=256M] [--max_batch_examples=256] [--max_batch_wait=2ms]");
  absl::ParseCommandLine(argc, argv);
  pstrain::SetMinLogLevelFromEnv();
  // Under `bazel run`, a relative --model_base means the user's directory, not the runfiles.
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY"); dir != nullptr && *dir != '\0') {
    if (::chdir(dir) != 0) std::fprintf(stderr, "warning: can't chdir to %s\n", dir);
  }
  if (absl::Status security = pstrain::ApplySecurityFlags(); !security.ok()) {
    return pstrain::Fail(std::string(security.message()));
  }
  return pstrain::Run();
}
