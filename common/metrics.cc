#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace pstrain {
namespace {

// Prometheus's text format: a sample value ("+Inf", "-Inf", "NaN", or a number that reads back).
std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.17g", v);
}

// A label value escaped: backslash, double quote and line feed.
std::string Escape(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Help text escaped: backslash and line feed.
std::string EscapeHelp(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string LabelText(const Labels& labels, const std::pair<std::string, std::string>* extra = nullptr) {
  if (labels.empty() && extra == nullptr) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    absl::StrAppend(&out, first ? "" : ",", k, "=\"", Escape(v), "\"");
    first = false;
  }
  if (extra != nullptr) {
    absl::StrAppend(&out, first ? "" : ",", extra->first, "=\"", Escape(extra->second), "\"");
  }
  out += "}";
  return out;
}

void AtomicAdd(std::atomic<double>* a, double by) {
  double old = a->load(std::memory_order_relaxed);
  while (!a->compare_exchange_weak(old, old + by, std::memory_order_relaxed)) {
  }
}

}  // namespace

void Gauge::Add(double by) { AtomicAdd(&value_, by); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<int64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  const size_t b = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[b].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(&sum_, v);
}

std::vector<int64_t> Histogram::counts() const {
  std::vector<int64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

int64_t Histogram::count() const {
  int64_t n = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) n += counts_[i].load(std::memory_order_relaxed);
  return n;
}

std::vector<double> LatencyBuckets() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
          100e-3, 250e-3, 500e-3, 1,   2.5,  5,    10};
}

std::vector<double> SizeBuckets() {
  std::vector<double> out;
  for (int i = 0; i <= 20; ++i) out.push_back(static_cast<double>(int64_t{1} << i));
  return out;
}

void MetricsRegistry::Sink::AddGauge(const std::string& name, const std::string& help,
                                     const Labels& labels, double v) {
  samples_.push_back({name, help, "gauge", labels, v});
}
void MetricsRegistry::Sink::AddCounter(const std::string& name, const std::string& help,
                                       const Labels& labels, double v) {
  samples_.push_back({name, help, "counter", labels, v});
}

MetricsRegistry::MetricsRegistry(Labels constant_labels) : constant_(std::move(constant_labels)) {}

Labels MetricsRegistry::WithConstant(const Labels& labels) const {
  Labels out = constant_;
  for (const auto& [k, v] : labels) out[k] = v;
  return out;
}

MetricsRegistry::Family* MetricsRegistry::FamilyLocked(const std::string& name,
                                                       const std::string& help, const char* type) {
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.help = help;
    it->second.type = type;
  } else if (it->second.type != type) {
    LOG(WARNING) << "metrics: " << name << " is a " << it->second.type << ", asked for as a "
                 << type << "; that series is not exported";
    return nullptr;
  }
  return &it->second;
}

Counter* MetricsRegistry::GetCounter(const std::string& name, const std::string& help,
                                     const Labels& labels) {
  absl::MutexLock lock(&mu_);
  Family* f = FamilyLocked(name, help, "counter");
  if (f == nullptr) {
    stray_counters_.push_back(std::make_unique<Counter>());
    return stray_counters_.back().get();
  }
  std::unique_ptr<Counter>& c = f->counters[WithConstant(labels)];
  if (c == nullptr) c = std::make_unique<Counter>();
  return c.get();
}

Gauge* MetricsRegistry::GetGauge(const std::string& name, const std::string& help,
                                 const Labels& labels) {
  absl::MutexLock lock(&mu_);
  Family* f = FamilyLocked(name, help, "gauge");
  if (f == nullptr) {
    stray_gauges_.push_back(std::make_unique<Gauge>());
    return stray_gauges_.back().get();
  }
  std::unique_ptr<Gauge>& g = f->gauges[WithConstant(labels)];
  if (g == nullptr) g = std::make_unique<Gauge>();
  return g.get();
}

Histogram* MetricsRegistry::GetHistogram(const std::string& name, const std::string& help,
                                         const std::vector<double>& bounds, const Labels& labels) {
  absl::MutexLock lock(&mu_);
  Family* f = FamilyLocked(name, help, "histogram");
  if (f == nullptr) {
    stray_histograms_.push_back(std::make_unique<Histogram>(bounds));
    return stray_histograms_.back().get();
  }
  std::unique_ptr<Histogram>& h = f->histograms[WithConstant(labels)];
  if (h == nullptr) h = std::make_unique<Histogram>(bounds);
  return h.get();
}

int MetricsRegistry::AddCollector(Collector collector) {
  absl::MutexLock lock(&collect_mu_);
  const int id = next_collector_++;
  collectors_[id] = std::move(collector);
  return id;
}

void MetricsRegistry::RemoveCollector(int id) {
  absl::MutexLock lock(&collect_mu_);
  collectors_.erase(id);
}

std::string MetricsRegistry::Render() const {
  // Collected samples first.
  Sink sink;
  {
    absl::MutexLock lock(&collect_mu_);
    for (const auto& [id, collect] : collectors_) collect(sink);
  }
  struct Collected {
    std::string help, type;
    std::vector<std::pair<Labels, double>> samples;
  };
  std::map<std::string, Collected> collected;
  for (auto& s : sink.samples_) {
    Collected& c = collected[s.name];
    c.help = s.help;
    c.type = s.type;
    c.samples.emplace_back(WithConstant(s.labels), s.value);
  }
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, f] : families_) {
    if (f.counters.empty() && f.gauges.empty() && f.histograms.empty()) continue;
    absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(f.help), "\n# TYPE ", name, " ",
                    f.type, "\n");
    for (const auto& [labels, c] : f.counters) {
      absl::StrAppend(&out, name, LabelText(labels), " ", c->value(), "\n");
    }
    for (const auto& [labels, g] : f.gauges) {
      absl::StrAppend(&out, name, LabelText(labels), " ", Number(g->value()), "\n");
    }
    for (const auto& [labels, h] : f.histograms) {
      const std::vector<int64_t> counts = h->counts();
      int64_t cumulative = 0;
      for (size_t b = 0; b < counts.size(); ++b) {
        cumulative += counts[b];
        const std::pair<std::string, std::string> le{
            "le", b < h->bounds().size() ? Number(h->bounds()[b]) : "+Inf"};
        absl::StrAppend(&out, name, "_bucket", LabelText(labels, &le), " ", cumulative, "\n");
      }
      absl::StrAppend(&out, name, "_sum", LabelText(labels), " ", Number(h->sum()), "\n");
      absl::StrAppend(&out, name, "_count", LabelText(labels), " ", cumulative, "\n");
    }
  }
  for (const auto& [name, c] : collected) {
    if (families_.count(name)) continue;  // a name already used by a series: skipped
    absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(c.help), "\n# TYPE ", name, " ", c.type,
                    "\n");
    for (const auto& [labels, v] : c.samples) {
      absl::StrAppend(&out, name, LabelText(labels), " ", Number(v), "\n");
    }
  }
  return out;
}

}  // namespace pstrain
