#include "common/metrics.h"

#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsTest, Render_CountersGaugesHistograms_InTheTextFormat) {
  MetricsRegistry registry(Labels{{"task", "ps:0"}});
  registry.GetCounter("pstrain_requests_total", "Requests served.", {{"method", "Lookup"}})
      ->Increment(3);
  registry.GetCounter("pstrain_requests_total", "Requests served.", {{"method", "Update"}})
      ->Increment();
  registry.GetGauge("pstrain_memory_bytes", "Memory held.")->Set(1.5e9);
  Histogram* h = registry.GetHistogram("pstrain_apply_seconds", "Apply time.", {0.001, 0.01});
  h->Observe(0.0005);
  h->Observe(0.005);
  h->Observe(5);
  const std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("# HELP pstrain_requests_total Requests served.\n"
                              "# TYPE pstrain_requests_total counter\n"
                              "pstrain_requests_total{method=\"Lookup\",task=\"ps:0\"} 3\n"
                              "pstrain_requests_total{method=\"Update\",task=\"ps:0\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_memory_bytes{task=\"ps:0\"} 1500000000\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE pstrain_apply_seconds histogram\n"
                              "pstrain_apply_seconds_bucket{task=\"ps:0\",le=\"0.001\"} 1\n"
                              "pstrain_apply_seconds_bucket{task=\"ps:0\",le=\"0.01\"} 2\n"
                              "pstrain_apply_seconds_bucket{task=\"ps:0\",le=\"+Inf\"} 3\n"
                              "pstrain_apply_seconds_sum{task=\"ps:0\"} 5.0054999999999996\n"
                              "pstrain_apply_seconds_count{task=\"ps:0\"} 3\n"));
}

TEST(MetricsTest, SameSeriesTwice_OnePointer_WrongTypeNotExported) {
  MetricsRegistry registry;
  Counter* a = registry.GetCounter("x_total", "x", {{"k", "v"}});
  EXPECT_EQ(registry.GetCounter("x_total", "x", {{"k", "v"}}), a);
  Gauge* stray = registry.GetGauge("x_total", "x");
  stray->Set(7);
  EXPECT_THAT(registry.Render(), Not(HasSubstr(" 7\n")));
}

TEST(MetricsTest, Collectors_AddedAtRender_RemovedOnRequest_LabelsEscaped) {
  MetricsRegistry registry;
  const int id = registry.AddCollector([](MetricsRegistry::Sink& out) {
    out.AddGauge("pstrain_table_keys", "Keys.", {{"variable", "a\"b\\c\nd"}}, 42);
  });
  EXPECT_THAT(registry.Render(),
              HasSubstr("pstrain_table_keys{variable=\"a\\\"b\\\\c\\nd\"} 42\n"));
  registry.RemoveCollector(id);
  EXPECT_THAT(registry.Render(), Not(HasSubstr("pstrain_table_keys")));
}

TEST(MetricsTest, ConcurrentUpdates_NoneLost) {
  MetricsRegistry registry;
  Counter* c = registry.GetCounter("c_total", "c");
  Histogram* h = registry.GetHistogram("h_seconds", "h", LatencyBuckets());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c->Increment();
        h->Observe(0.001);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->value(), 40000);
  EXPECT_EQ(h->count(), 40000);
  EXPECT_NEAR(h->sum(), 40.0, 1e-6);
}

}  // namespace
}  // namespace pstrain
