#include "common/service_metrics.h"

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"

namespace pstrain {
namespace {

struct MethodSeries {
  Counter* requests;
  Histogram* seconds;
  Counter* received;
  Counter* sent;
  std::string name;
};

}  // namespace

RawHandler InstrumentRawHandler(RawHandler handler,
                                const google::protobuf::ServiceDescriptor* service,
                                MetricsRegistry* registry, const std::string& prefix) {
  if (registry == nullptr) return handler;
  auto series = std::make_shared<std::vector<MethodSeries>>();
  for (int m = 0; m < service->method_count(); ++m) {
    const Labels method{{"method", service->method(m)->name()}};
    series->push_back(MethodSeries{
        registry->GetCounter(prefix + "_requests_total", "Requests served, by method.", method),
        registry->GetHistogram(prefix + "_request_seconds", "Time to serve a request, by method.",
                               LatencyBuckets(), method),
        registry->GetCounter(prefix + "_received_bytes_total", "Request bytes received, by method.",
                             method),
        registry->GetCounter(prefix + "_sent_bytes_total", "Reply bytes sent, by method.", method),
        service->method(m)->name()});
  }
  return [handler = std::move(handler), series, registry, prefix](
             int method, const std::vector<absl::string_view>& request,
             const ReplyAllocator& reply) -> absl::Status {
    if (method < 0 || method >= static_cast<int>(series->size())) {
      return handler(method, request, reply);
    }
    const MethodSeries& s = (*series)[method];
    const absl::Time start = absl::Now();
    int64_t in = 0;
    for (absl::string_view piece : request) in += static_cast<int64_t>(piece.size());
    int64_t out = 0;
    ReplyAllocator counted(
        [&reply, &out](size_t bytes) {
          out += static_cast<int64_t>(bytes);
          return reply(bytes);
        },
        reply);
    absl::Status status = handler(method, request, counted);
    s.requests->Increment();
    s.received->Increment(in);
    s.sent->Increment(out);
    s.seconds->ObserveDuration(absl::Now() - start);
    if (!status.ok()) {
      registry
          ->GetCounter(prefix + "_errors_total", "Requests that failed, by method and code.",
                       {{"method", s.name}, {"code", absl::StatusCodeToString(status.code())}})
          ->Increment();
    }
    return status;
  };
}

}  // namespace pstrain
