#include "common/metrics_http.h"

#include "absl/strings/str_cat.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST(MetricsHttpServerTest, Get_Metrics_TextFormat_OtherPaths404) {
  MetricsRegistry registry(Labels{{"task", "worker:1"}});
  registry.GetCounter("pstrain_test_total", "A test counter.")->Increment(5);
  auto server = MetricsHttpServer::Start("127.0.0.1", 0, &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  auto response = client.Get("/metrics");
  ASSERT_TRUE(response) << "no answer";
  EXPECT_EQ(response->status, 200);
  EXPECT_THAT(response->get_header_value("Content-Type"), HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(response->body, HasSubstr("pstrain_test_total{task=\"worker:1\"} 5\n"));
  registry.GetCounter("pstrain_test_total", "A test counter.")->Increment();
  response = client.Get("/metrics");
  ASSERT_TRUE(response);
  EXPECT_THAT(response->body, HasSubstr("pstrain_test_total{task=\"worker:1\"} 6\n"));
  response = client.Get("/elsewhere");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 404);
}

TEST(MetricsHttpServerTest, PortInUse_UnavailableNamingIt) {
  MetricsRegistry registry;
  auto first = MetricsHttpServer::Start("127.0.0.1", 0, &registry);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = MetricsHttpServer::Start("127.0.0.1", (*first)->port(), &registry);
  EXPECT_THAT(second.status(), StatusIs(absl::StatusCode::kUnavailable,
                                        HasSubstr(absl::StrCat("127.0.0.1:", (*first)->port()))));
  EXPECT_THAT(MetricsHttpServer::Start("127.0.0.1", 70000, &registry).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("70000")));
}

}  // namespace
}  // namespace pstrain
