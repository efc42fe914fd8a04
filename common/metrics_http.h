// Serves a MetricsRegistry (common/metrics.h) for Prometheus to scrape: GET /metrics answers the
// text exposition format (Content-Type text/plain; version=0.0.4); anything else is 404. Built on
// Debian's cpp-httplib. Plain HTTP: keep the port on a trusted network (Prometheus scrapes it).
#ifndef PSTRAIN_COMMON_METRICS_HTTP_H_
#define PSTRAIN_COMMON_METRICS_HTTP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics.h"

namespace pstrain {

// Thread-safe. Destroying it stops the server (and waits for requests in progress).
class MetricsHttpServer {
 public:
  // Listens on host:port (port 0: one is picked; see port()). `registry` is not owned and must
  // outlive the server. Errors: kUnavailable naming the address when it can't be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, int port,
                                                                  const MetricsRegistry* registry);
  virtual ~MetricsHttpServer() = default;

  virtual int port() const = 0;
  // "host:port" to scrape.
  virtual std::string address() const = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_METRICS_HTTP_H_
