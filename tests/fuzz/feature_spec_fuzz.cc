// The tabular model's feature spec (models/tabular/feature_spec.h): any JSON text, and the spec
// files shipped with the project as seeds.
#include <fstream>
#include <sstream>

#include "models/tabular/feature_spec.h"
#include "tests/fuzz/fuzz_target.h"

namespace pstrain {

std::vector<std::string> FuzzSeeds() {
  std::vector<std::string> seeds = {
      R"({"label": {"column": "y"}, "features": [{"name": "x", "type": "numeric", "column": "x"}]})",
      R"({"label": {"column": "y", "task": "regression"}, "features": [)"
      R"({"name": "a", "type": "categorical", "column": "a", "embedding_dim": 4},)"
      R"({"name": "b", "type": "categorical", "column": "b", "separator": "|"},)"
      R"({"name": "ab", "type": "cross", "of": ["a", "x"]}, {"name": "x", "type": "numeric", "column": "x"},)"
      R"({"name": "t", "type": "datetime", "column": "t"}]})",
  };
  for (const char* path : {"models/tabular/specs/flights_ctr.json",
                           "models/tabular/specs/insurance.json"}) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    if (!text.str().empty()) seeds.push_back(text.str());
  }
  return seeds;
}

}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<pstrain::tabular::Spec> spec = pstrain::tabular::ParseSpec(text, "fuzz.json");
  if (spec.ok()) {
    for (const auto& feature : spec->features) (void)spec->FeatureIndex(feature.name);
  }
  return 0;
}
