// Metrics in Prometheus's model: counters, gauges and histograms in families (one name, help
// text and type; a series per set of label values), rendered in Prometheus's text exposition
// format (version 0.0.4) for a scrape (common/metrics_http.h serves it over HTTP).
//
//   MetricsRegistry registry({{"task", "ps:0"}});             // labels on every series
//   Counter* requests = registry.GetCounter("pstrain_ps_requests_total", "Requests served.",
//                                           {{"method", "Lookup"}});
//   requests->Increment();                                     // lock-free
//   Histogram* latency = registry.GetHistogram("pstrain_ps_request_seconds", "...",
//                                              LatencyBuckets(), {{"method", "Lookup"}});
//   latency->Observe(0.0012);
//   registry.AddCollector([&](MetricsRegistry::Sink& out) {   // values computed at scrape time
//     out.AddGauge("pstrain_ps_table_bytes", "...", {{"variable", "emb"}}, bytes);
//   });
//   std::string text = registry.Render();
//
// Names follow Prometheus's conventions: counters end in _total, durations are _seconds
// histograms, sizes _bytes. A series is made once (under a lock) and then updated with atomics:
// keep the pointer on a hot path. Thread-safe.
#ifndef PSTRAIN_COMMON_METRICS_H_
#define PSTRAIN_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pstrain {

// Label name -> value, sorted by name.
using Labels = std::map<std::string, std::string>;

// A monotonically increasing count.
class Counter {
 public:
  void Increment(int64_t by = 1) { value_.fetch_add(by, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double by);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into cumulative buckets (upper bounds, ascending), with their sum.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  void ObserveDuration(absl::Duration d) { Observe(absl::ToDoubleSeconds(d)); }

  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket (bounds().size() + 1, the last +Inf), not cumulative.
  std::vector<int64_t> counts() const;
  int64_t count() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<int64_t>[]> counts_;
  std::atomic<double> sum_{0};
};

// Buckets for request latencies: 50 us to 10 s.
std::vector<double> LatencyBuckets();
// Buckets for sizes (batch sizes, rows): 1, 2, 4, ... 2^20.
std::vector<double> SizeBuckets();

class MetricsRegistry {
 public:
  // `constant_labels` go on every series (e.g. the task).
  explicit MetricsRegistry(Labels constant_labels = {});
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // The series of family `name` with `labels`, made on first use. A name is one type with one
  // help text: asking for it as another type returns a series that is never rendered (and logs
  // the mistake once). Never null.
  Counter* GetCounter(const std::string& name, const std::string& help,
                      const Labels& labels = {});
  Gauge* GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram* GetHistogram(const std::string& name, const std::string& help,
                          const std::vector<double>& bounds, const Labels& labels = {});

  // Values computed at scrape time (sizes of tables, a cache's hit rate): each collector adds
  // samples to the sink when the registry is rendered.
  class Sink {
   public:
    void AddGauge(const std::string& name, const std::string& help, const Labels& labels,
                  double v);
    void AddCounter(const std::string& name, const std::string& help, const Labels& labels,
                    double v);

   private:
    friend class MetricsRegistry;
    struct Sample {
      std::string name, help, type;
      Labels labels;
      double value;
    };
    std::vector<Sample> samples_;
  };
  using Collector = std::function<void(Sink& out)>;
  // Returns an id for RemoveCollector. The collector must stay valid until removed (or the
  // registry is destroyed).
  int AddCollector(Collector collector);
  void RemoveCollector(int id);

  // Every series in the text exposition format, families in name order.
  std::string Render() const;

 private:
  struct Family {
    std::string help;
    std::string type;  // counter, gauge, histogram
    std::map<Labels, std::unique_ptr<Counter>> counters;
    std::map<Labels, std::unique_ptr<Gauge>> gauges;
    std::map<Labels, std::unique_ptr<Histogram>> histograms;
  };
  Family* FamilyLocked(const std::string& name, const std::string& help, const char* type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Labels WithConstant(const Labels& labels) const;

  const Labels constant_;
  mutable absl::Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
  // Series asked for under the wrong type: kept alive, never rendered.
  std::vector<std::unique_ptr<Counter>> stray_counters_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Gauge>> stray_gauges_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Histogram>> stray_histograms_ ABSL_GUARDED_BY(mu_);
  // Collectors have a lock of their own, held while they run (so RemoveCollector waits for a
  // render in progress, and a collector may use the registry).
  mutable absl::Mutex collect_mu_;
  std::map<int, Collector> collectors_ ABSL_GUARDED_BY(collect_mu_);
  int next_collector_ ABSL_GUARDED_BY(collect_mu_) = 1;
};

// Observes the time from construction to destruction into a histogram (if not null).
class ScopedTimer {
 public:
  explicit ScopedTimer(Histogram* h) : h_(h), start_(absl::Now()) {}
  ~ScopedTimer() {
    if (h_ != nullptr) h_->ObserveDuration(absl::Now() - start_);
  }

 private:
  Histogram* const h_;
  const absl::Time start_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_METRICS_H_
