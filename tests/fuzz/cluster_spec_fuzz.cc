// TF_CONFIG parsing (cluster/cluster_spec.h): ClusterSpec::FromJson on any text, then the calls a
// task makes with a parsed spec; and the --task flag's parser.
#include "cluster/cluster_spec.h"
#include "tests/fuzz/fuzz_target.h"

namespace pstrain {

std::vector<std::string> FuzzSeeds() {
  return {
      R"({"cluster": {"chief": ["localhost:2220"], "worker": ["localhost:2221", "h2:2222"],)"
      R"( "ps": ["localhost:2223"], "evaluator": ["e:1"]}, "task": {"type": "worker", "index": 1}})",
      R"({"cluster": {"worker": ["[::1]:1"], "ps": ["a:2", "b:3"]}})",
      R"({"cluster": {}, "task": {"type": "ps", "index": -1}})",
      "ps:0",
      "worker:12",
  };
}

}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<pstrain::TaskRef> task = pstrain::ParseTaskRef(text);
  if (task.ok()) (void)task->ToString();
  absl::StatusOr<pstrain::ClusterSpec> spec = pstrain::ClusterSpec::FromJson(text);
  if (!spec.ok()) return 0;
  for (const pstrain::TaskRef& t : spec->AllTasks()) {
    (void)spec->address(t);
    (void)spec->WithTask(t);
  }
  // A spec that parses writes out to one that parses to the same spec.
  absl::StatusOr<pstrain::ClusterSpec> again = pstrain::ClusterSpec::FromJson(spec->ToJson());
  if (!again.ok() || again->jobs() != spec->jobs()) __builtin_trap();
  (void)spec->ToProto();
  return 0;
}
