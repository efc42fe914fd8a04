// Metrics of a gRPC service served through RawUnaryService (common/raw_service.h): per method,
// requests, errors by code, latency and bytes in and out, as Prometheus series
//   <prefix>_requests_total{method}
//   <prefix>_errors_total{method, code}
//   <prefix>_request_seconds{method}            (histogram)
//   <prefix>_received_bytes_total{method}, <prefix>_sent_bytes_total{method}
#ifndef PSTRAIN_COMMON_SERVICE_METRICS_H_
#define PSTRAIN_COMMON_SERVICE_METRICS_H_

#include <string>

#include "common/metrics.h"
#include "common/raw_service.h"
#include "google/protobuf/descriptor.h"

namespace pstrain {

// `handler` with every call counted into `registry` (not owned; it must outlive the handler).
// With a null registry, `handler` itself.
RawHandler InstrumentRawHandler(RawHandler handler,
                                const google::protobuf::ServiceDescriptor* service,
                                MetricsRegistry* registry, const std::string& prefix);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SERVICE_METRICS_H_
