// The prediction server's requests, whichever protocol carried them (serving/prediction_server.h):
// the PredictionService methods on the bytes of a gRPC request (what the server runs for each
// call through common/raw_service.h, and what tests/fuzz/prediction_service_fuzz.cc drives
// directly), and the HTTP/JSON API's bodies. Both go through the same batcher and limits, and
// both count into the same latency window.
//
// HTTP/JSON (TF Serving's REST API, its row format):
//   POST /v1/models/<name>:predict   {"instances": [{"<column>": <value>, ...}, ...]}
//     -> 200 {"predictions": [[<float>, ...], ...], "outputs": [...], "version": N,
//             "model_name": "<name>", "latency_us": N}
//   GET /v1/models/<name>            -> 200 {"model_version_status": [...], ...} (the status)
//   an error -> its HTTP status (HttpStatusOf) and {"error": "<message>", "code": "<CODE>"}
// An instance's values are strings, as the training CSV has them; numbers are taken as the text
// they were written with (3.10 is "3.10", as in a CSV), true/false as "true"/"false", and null
// as a missing value (an empty field). A column absent from an instance is missing there too;
// the columns of the request are every key seen, in order of first appearance.
#ifndef PSTRAIN_SERVING_PREDICTION_SERVER_HANDLERS_H_
#define PSTRAIN_SERVING_PREDICTION_SERVER_HANDLERS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/raw_service.h"
#include "google/protobuf/descriptor.h"
#include "models/serving_head.h"
#include "serving/prediction_server_batcher.h"
#include "serving/prediction_server_models.h"

namespace pstrain {

struct PredictionLimits {
  // Examples in one request; more is kResourceExhausted. Default 4096.
  int64_t max_request_examples = 4096;
  // Bytes of one request (a gRPC message; an HTTP body, as received and as decompressed); more is
  // kResourceExhausted. Default 8 MiB.
  int64_t max_request_bytes = int64_t{8} << 20;
};

// Server-side latency of the last successful Predict requests.
struct LatencyStats {
  int64_t samples = 0;
  absl::Duration p50;
  absl::Duration p99;
};

// What an HTTP request is answered: a status and a JSON body.
struct HttpReply {
  int status = 200;
  std::string body;
};

// Thread-safe: calls run concurrently (each Predict blocks for its batch).
class PredictionHandlers {
 public:
  // `versions` and `batcher` are not owned and must outlive the handlers. `model_name` is the
  // name requests use. `latency_window`: how many of the last requests the percentiles cover.
  PredictionHandlers(std::string model_name, const ModelVersions* versions,
                     PredictionBatcher* batcher, const PredictionLimits& limits,
                     int latency_window = 1024);

  // pstrain.PredictionService.
  static const google::protobuf::ServiceDescriptor* Service();

  // Serves one call of Service()->method(method) on `request` (its bytes, in pieces).
  // Errors: kInvalidArgument "<Method>: malformed request (...)" for bytes that don't parse;
  // Predict: the model's kInvalidArgument naming a missing column or a row's bad value,
  // kResourceExhausted for more examples or bytes than the limits, kNotFound for another model's
  // name, kUnavailable while shutting down; ModelStatus: kNotFound for another model's name;
  // kUnimplemented for a method number out of range.
  absl::Status Serve(int method, const std::vector<absl::string_view>& request,
                     const ReplyAllocator& reply);

  // POST /v1/models/<model_name>:predict with `body` (at most max_request_bytes: the transport
  // checks before reading it whole). Errors as Serve's Predict, and kInvalidArgument naming what
  // is wrong with the JSON.
  HttpReply HttpPredict(absl::string_view model_name, absl::string_view body);
  // GET /v1/models/<model_name>.
  HttpReply HttpModelStatus(absl::string_view model_name);

  const std::string& model_name() const { return model_name_; }
  const PredictionLimits& limits() const { return limits_; }
  LatencyStats latency() const;
  // Predict requests answered OK, and with an error, since the start.
  int64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  int64_t failed_requests() const { return failed_.load(std::memory_order_relaxed); }

 private:
  struct Answer {
    BatchedPrediction prediction;
    absl::Duration latency;
  };
  absl::Status CheckModelName(absl::string_view name) const;
  absl::StatusOr<Answer> Predict(const RawExamples& examples, absl::Time start);
  absl::Status ServePredict(const std::vector<absl::string_view>& request,
                            const ReplyAllocator& reply, absl::Time start);
  absl::Status ServeModelStatus(const std::vector<absl::string_view>& request,
                                const ReplyAllocator& reply);

  const std::string model_name_;
  const ModelVersions* const versions_;
  PredictionBatcher* const batcher_;
  const PredictionLimits limits_;
  const int predict_method_;
  const int status_method_;
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> failed_{0};

  mutable absl::Mutex mu_;
  // Below: guarded by mu_. The last latencies (microseconds), a ring.
  std::vector<int64_t> latency_us_ ABSL_GUARDED_BY(mu_);
  size_t latency_next_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t latency_count_ ABSL_GUARDED_BY(mu_) = 0;
};

// Parses a predict body (see above) into examples. Errors: kInvalidArgument naming what is wrong
// (not JSON: the parser's message with its position; not {"instances": [{...}, ...]}; a value
// that is an object or an array; a column given twice in one instance); kResourceExhausted past
// `max_examples` instances.
absl::StatusOr<RawExamples> ParsePredictJson(absl::string_view body, int64_t max_examples);

// The HTTP status for an error code: 400 kInvalidArgument, 401 kUnauthenticated, 403
// kPermissionDenied, 404 kNotFound, 413 kResourceExhausted, 501 kUnimplemented, 503
// kUnavailable, 504 kDeadlineExceeded, 500 otherwise.
int HttpStatusOf(absl::StatusCode code);
// {"error": "<message>", "code": "<CODE>"}; invalid UTF-8 in the message is replaced.
std::string ErrorJson(const absl::Status& status);

}  // namespace pstrain

#endif  // PSTRAIN_SERVING_PREDICTION_SERVER_HANDLERS_H_
