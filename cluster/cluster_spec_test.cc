#include "cluster/cluster_spec.h"

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Expects `spec` to fail with kInvalidArgument and a message containing every one of `parts`.
void ExpectInvalid(const absl::StatusOr<ClusterSpec>& spec, std::vector<std::string> parts) {
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  for (const std::string& part : parts) {
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(part));
  }
}

constexpr char kFull[] = R"({
  "cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"],
              "ps": ["host3:2222"], "evaluator": ["host4:2222"]},
  "task": {"type": "worker", "index": 1}})";

TEST(ClusterSpecTest, FromJson_AllJobsAndTask_Parsed) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromJson(kFull);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->tasks("worker"), ElementsAre("host1:2222", "host2:2222"));
  EXPECT_EQ(spec->num_workers(), 2);
  EXPECT_EQ(spec->num_ps(), 1);
  EXPECT_EQ(spec->num_tasks("chief"), 1);
  EXPECT_EQ(spec->num_tasks("evaluator"), 1);
  ASSERT_TRUE(spec->task().has_value());
  EXPECT_EQ(spec->task()->ToString(), "worker:1");
  EXPECT_EQ(*spec->address({"ps", 0}), "host3:2222");
  EXPECT_EQ(spec->AllTasks().size(), 5u);
}

TEST(ClusterSpecTest, FromJson_NoTask_ClusterOnly) {
  absl::StatusOr<ClusterSpec> spec =
      ClusterSpec::FromJson(R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->task().has_value());
}

TEST(ClusterSpecTest, FromJson_EmptyTaskObject_NoTask) {
  absl::StatusOr<ClusterSpec> spec =
      ClusterSpec::FromJson(R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->task().has_value());
}

TEST(ClusterSpecTest, FromJson_EvaluatorTaskOutsideCluster_Allowed) {
  // As in TF: an evaluator may run without being listed in the cluster.
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromJson(
      R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "evaluator", "index": 0}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task()->type, "evaluator");
}

TEST(ClusterSpecTest, FromJson_Ipv6AndEnvironmentField_Accepted) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromJson(
      R"({"cluster": {"worker": ["[::1]:2222"], "ps": ["127.0.0.1:2223"]},
          "environment": "cloud", "rpc_layer": "grpc"})");
  ASSERT_TRUE(spec.ok()) << spec.status();
}

TEST(ClusterSpecTest, ToJson_RoundTrip_Same) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromJson(kFull);
  ASSERT_TRUE(spec.ok());
  absl::StatusOr<ClusterSpec> again = ClusterSpec::FromJson(spec->ToJson());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->jobs(), spec->jobs());
  EXPECT_EQ(again->task(), spec->task());
  EXPECT_EQ(spec->ToProto().jobs_size(), 4);
}

TEST(ClusterSpecTest, FromJson_Malformed_ErrorsNameTheProblem) {
  ExpectInvalid(ClusterSpec::FromJson("{not json"), {"not valid JSON"});
  ExpectInvalid(ClusterSpec::FromJson("[1, 2]"), {"top level must be a JSON object"});
  ExpectInvalid(ClusterSpec::FromJson(R"({"task": {}})"), {"missing field \"cluster\""});
  ExpectInvalid(ClusterSpec::FromJson(R"({"clsuter": {}})"), {"unknown field \"clsuter\""});
  ExpectInvalid(ClusterSpec::FromJson(R"({"cluster": ["a:1"]})"), {"\"cluster\" must be an object"});
  ExpectInvalid(ClusterSpec::FromJson(R"({"cluster": {"worker": "a:1", "ps": ["b:1"]}})"),
                {"job \"worker\" must be a list"});
  ExpectInvalid(ClusterSpec::FromJson(R"({"cluster": {"worker": {"0": "a:1"}, "ps": ["b:1"]}})"),
                {"sparse jobs"});
  ExpectInvalid(ClusterSpec::FromJson(R"({"cluster": {"worker": [5], "ps": ["b:1"]}})"),
                {"task worker:0 must be a \"host:port\" string"});
}

TEST(ClusterSpecTest, FromJson_InvalidJobName_Error) {
  ExpectInvalid(
      ClusterSpec::FromJson(R"({"cluster": {"worker": ["a:1"], "ps": ["b:1"], "master": ["c:1"]}})"),
      {"unrecognized job name \"master\"", "chief, worker, ps, evaluator"});
}

TEST(ClusterSpecTest, FromJson_TwoChiefs_Error) {
  ExpectInvalid(ClusterSpec::FromJson(
                    R"({"cluster": {"chief": ["a:1", "a:2"], "worker": ["b:1"], "ps": ["c:1"]}})"),
                {"\"chief\" job can only have one task", "got 2"});
}

TEST(ClusterSpecTest, FromJson_TwoEvaluators_Error) {
  ExpectInvalid(ClusterSpec::FromJson(
                    R"({"cluster": {"evaluator": ["a:1", "a:2"], "worker": ["b:1"], "ps": ["c:1"]}})"),
                {"\"evaluator\" job can only have one task"});
}

TEST(ClusterSpecTest, FromJson_NoWorkerOrNoPs_Error) {
  ExpectInvalid(ClusterSpec::FromJson(R"({"cluster": {"ps": ["c:1"]}})"),
                {"no \"worker\" job", "at least one worker"});
  ExpectInvalid(ClusterSpec::FromJson(R"({"cluster": {"worker": ["c:1"]}})"),
                {"no \"ps\" job", "at least one ps"});
  ExpectInvalid(ClusterSpec::FromJson(R"({"cluster": {"worker": [], "ps": ["c:1"]}})"),
                {"job \"worker\" has no tasks"});
}

TEST(ClusterSpecTest, FromJson_BadAddresses_ErrorNamesTaskAndAddress) {
  ExpectInvalid(ClusterSpec::FromJson(R"({"cluster": {"worker": ["a:1"], "ps": ["b:1", "nohost"]}})"),
                {"task ps:1", "\"nohost\" is not host:port"});
  ExpectInvalid(ClusterSpec::FromJson(R"({"cluster": {"worker": ["a:x"], "ps": ["b:1"]}})"),
                {"task worker:0", "port is not a number"});
  ExpectInvalid(ClusterSpec::FromJson(R"({"cluster": {"worker": ["a:99999"], "ps": ["b:1"]}})"),
                {"task worker:0", "out of range"});
  ExpectInvalid(ClusterSpec::FromJson(R"({"cluster": {"worker": ["a:0"], "ps": ["b:1"]}})"),
                {"task worker:0", "port 0"});
  ExpectInvalid(ClusterSpec::FromJson(R"({"cluster": {"worker": ["a:1"], "ps": ["a:1"]}})"),
                {"\"a:1\" is used by both ps:0 and worker:0"});
}

TEST(ClusterSpecTest, FromJson_BadTask_Error) {
  const std::string cluster = R"("cluster": {"worker": ["a:1", "a:2"], "ps": ["b:1"]})";
  ExpectInvalid(ClusterSpec::FromJson("{" + cluster + R"(, "task": {"type": "boss", "index": 0}})"),
                {"task type \"boss\" is not a valid job name"});
  ExpectInvalid(ClusterSpec::FromJson("{" + cluster + R"(, "task": {"type": "chief", "index": 0}})"),
                {"task type \"chief\" not found in cluster"});
  ExpectInvalid(ClusterSpec::FromJson("{" + cluster + R"(, "task": {"type": "worker", "index": 2}})"),
                {"task index 2 is out of range for job \"worker\" with 2 task(s)"});
  ExpectInvalid(ClusterSpec::FromJson("{" + cluster + R"(, "task": {"type": "worker", "index": -1}})"),
                {"task index -1 is negative"});
  ExpectInvalid(ClusterSpec::FromJson("{" + cluster + R"(, "task": {"type": "worker", "index": "1"}})"),
                {"\"task.index\" must be an integer"});
  ExpectInvalid(ClusterSpec::FromJson("{" + cluster + R"(, "task": {"index": 1}})"),
                {"\"task.type\" must be a string"});
  ExpectInvalid(ClusterSpec::FromJson("{" + cluster + R"(, "task": [1]})"),
                {"\"task\" must be an object"});
}

TEST(ClusterSpecTest, FromFlagValue_FileOrJson_BothWork) {
  const std::string path = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
                           "/cluster_spec_test.json";
  {
    std::ofstream out(path);
    out << R"({"cluster": {"worker": ["a:1"], "ps": ["b:1"]}})";
  }
  absl::StatusOr<ClusterSpec> from_file = ClusterSpec::FromFlagValue(path);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ(from_file->num_ps(), 1);
  absl::StatusOr<ClusterSpec> from_text =
      ClusterSpec::FromFlagValue(R"(  {"cluster": {"worker": ["a:1"], "ps": ["b:1"]}})");
  ASSERT_TRUE(from_text.ok()) << from_text.status();

  absl::StatusOr<ClusterSpec> missing = ClusterSpec::FromFlagValue("/no/such/file.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/no/such/file.json"));

  {
    std::ofstream out(path);
    out << R"({"cluster": {"worker": ["a:1"]}})";
  }
  absl::StatusOr<ClusterSpec> bad_file = ClusterSpec::FromFlagValue(path);
  ExpectInvalid(bad_file, {path, "no \"ps\" job"});
  std::remove(path.c_str());
}

TEST(ClusterSpecTest, WithTask_ValidatesAgainstCluster) {
  absl::StatusOr<ClusterSpec> spec =
      ClusterSpec::FromJson(R"({"cluster": {"worker": ["a:1"], "ps": ["b:1"]}})");
  ASSERT_TRUE(spec.ok());
  absl::StatusOr<ClusterSpec> ps0 = spec->WithTask({"ps", 0});
  ASSERT_TRUE(ps0.ok()) << ps0.status();
  EXPECT_EQ(ps0->task()->ToString(), "ps:0");
  ExpectInvalid(spec->WithTask({"ps", 1}), {"task index 1 is out of range for job \"ps\""});
}

TEST(TaskRefTest, ParseTaskRef_ValidAndInvalid) {
  absl::StatusOr<TaskRef> t = ParseTaskRef("ps:12");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->type, "ps");
  EXPECT_EQ(t->index, 12);
  EXPECT_THAT(std::string(ParseTaskRef("ps").status().message()), HasSubstr("not type:index"));
  EXPECT_THAT(std::string(ParseTaskRef("boss:1").status().message()),
              HasSubstr("\"boss\" is not a valid job name"));
  EXPECT_THAT(std::string(ParseTaskRef("ps:-1").status().message()),
              HasSubstr("not a non-negative integer"));
  EXPECT_THAT(std::string(ParseTaskRef("ps:x").status().message()),
              HasSubstr("not a non-negative integer"));
}

}  // namespace
}  // namespace pstrain
