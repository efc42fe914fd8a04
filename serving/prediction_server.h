// The prediction server: serves the newest version of an exported model (serving/export.h) out of
// the cluster, over gRPC (proto/prediction_service.proto) and HTTP/JSON (TF Serving's REST row
// format; serving/prediction_server_handlers.h has the formats), with the same parsing and
// feature transforms as training (serving/predictor.h).
//
//   PredictionServerOptions options;
//   options.model_base = "models/flights_ctr";   // models/flights_ctr/<version>/MANIFEST.json
//   auto server = PredictionServer::Start(options);
//   ... (*server)->grpc_address(), (*server)->http_port() ...
//
// - Versions (serving/prediction_server_models.h): the newest complete version directory under
//   the base is served; a watcher loads a newer one beside it and switches to it without failing
//   or holding up a request; a version that fails to load is logged and skipped.
// - Batching (serving/prediction_server_batcher.h): concurrent requests, of either protocol, are
//   merged into one Predict call of up to max_batch_examples examples, waiting at most
//   max_batch_wait for the batch to fill, on a small pool of predict threads.
// - Latency: each answer carries its server-side latency; p50/p99 over the last latency_window
//   requests are on the server (latency()) and in the status.
// - Bad input is answered and the server goes on: a missing column or bad value is
//   INVALID_ARGUMENT (HTTP 400) with the model's message naming it; more examples or bytes than
//   the limits is RESOURCE_EXHAUSTED (413); malformed protobuf or JSON is INVALID_ARGUMENT naming
//   what is wrong.
// - Security: the process's transport security (common/transport_security.h, the --tls_* and
//   --auth_token_file flags): gRPC as every task; HTTP becomes HTTPS with the same certificate,
//   requiring a client certificate from the same CA, and requires "Authorization: Bearer <token>"
//   when there is a token (401 without).
#ifndef PSTRAIN_SERVING_PREDICTION_SERVER_H_
#define PSTRAIN_SERVING_PREDICTION_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "serving/prediction_server_batcher.h"
#include "serving/prediction_server_handlers.h"
#include "serving/prediction_server_models.h"
#include "serving/predictor.h"

namespace pstrain {

struct PredictionServerOptions {
  // The model's base directory: <model_base>/<version>/ each an exported model. Required.
  std::string model_base;
  // The name requests use (PredictRequest.model_name, /v1/models/<name>); no '/' or ':'.
  // Default: model_base's last component ("flights_ctr" for models/flights_ctr).
  std::string model_name;
  // Where gRPC listens, "host:port" (port 0 picks a free one). Empty: no gRPC. Default
  // "localhost:0".
  std::string grpc_address = "localhost:0";
  // Where HTTP listens: a host and a port (0 picks a free one; -1: no HTTP). Default localhost:0.
  std::string http_host = "localhost";
  int http_port = 0;
  // HTTP requests served at once (httplib's threads; each holds one connection while it lasts).
  // Default 16.
  int http_threads = 16;
  // gRPC Predict calls served at once (each holds a thread while it waits for its batch); more
  // wait in a queue. Default 64.
  int grpc_threads = 64;
  // How versions are loaded (the row cache: default 256 MiB per loaded version).
  PredictorOptions predictor;
  // Batching: default up to 256 examples, 2 ms wait, 2 predict threads.
  PredictionBatcherOptions batching;
  // Per request: default 4096 examples, 8 MiB.
  PredictionLimits limits;
  // How often the base directory is checked for a newer version; zero: never. Default 1 s.
  absl::Duration poll_period = absl::Seconds(1);
  // The training job's checkpoint directory: each poll_period the version served follows it to
  // the job's newest checkpoint (serving/model_follower.h). Default "": none.
  std::string follow_checkpoints;
  // How many of the last successful requests the latency percentiles cover. Default 1024.
  int latency_window = 1024;
  // Where the server counts its work for Prometheus (not owned; it must outlive the server):
  // gRPC calls by method (common/service_metrics.h, prefix pstrain_prediction_grpc), and at
  // scrape time the served version, Predict requests of both protocols, batches and the latency
  // percentiles (pstrain_prediction_*). Null: none.
  MetricsRegistry* metrics = nullptr;
};

// Thread-safe. Destroying it shuts it down (Shutdown).
class PredictionServer {
 public:
  // Loads the newest version and starts serving. Errors: kInvalidArgument for bad options;
  // ModelVersions::Start's (kNotFound: no complete version; a load error such as kDataLoss);
  // kUnavailable naming the address when gRPC or HTTP can't listen there; kInternal when the TLS
  // certificate or key can't be used for HTTPS.
  static absl::StatusOr<std::unique_ptr<PredictionServer>> Start(
      const PredictionServerOptions& options);
  virtual ~PredictionServer() = default;

  virtual const std::string& model_name() const = 0;
  // "host:port" of gRPC (empty without), and HTTP's port (-1 without) and "host:port".
  virtual const std::string& grpc_address() const = 0;
  virtual int http_port() const = 0;
  virtual std::string http_address() const = 0;

  // The version new requests go to.
  virtual int64_t version() const = 0;
  // Every version seen, newest first, with its state.
  virtual std::vector<VersionStatus> versions() const = 0;
  // Looks for a newer version now, as the watcher does each poll_period; returns the version
  // served after.
  virtual int64_t CheckForNewVersion() = 0;
  // Waits until `version` or a newer one is served, at most `timeout`; whether it is.
  virtual bool WaitForVersion(int64_t version, absl::Duration timeout) const = 0;
  // How the version served follows the training job's checkpoints (follow_checkpoints).
  virtual FollowStats following() const = 0;

  // Server-side latency of the last latency_window successful Predict requests.
  virtual LatencyStats latency() const = 0;
  virtual BatchStats batch_stats() const = 0;
  // Predict requests answered OK, and with an error (both protocols).
  virtual int64_t requests() const = 0;
  virtual int64_t failed_requests() const = 0;

  // Stops taking requests, answers those in progress (HTTP's, then gRPC's within a second), and
  // frees the model. Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVING_PREDICTION_SERVER_H_
