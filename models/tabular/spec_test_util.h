// Test helper: a spec from JSON written with single quotes (easier inside C++ strings).
#ifndef PSTRAIN_MODELS_TABULAR_SPEC_TEST_UTIL_H_
#define PSTRAIN_MODELS_TABULAR_SPEC_TEST_UTIL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "models/tabular/feature_spec.h"

namespace pstrain {
namespace tabular {

// `text` with every ' turned into ", parsed as the spec "t.json"; a parse error fails the test.
inline Spec MustParse(const std::string& text) {
  absl::StatusOr<Spec> s = ParseSpec(absl::StrReplaceAll(text, {{"'", "\""}}), "t.json");
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

}  // namespace tabular
}  // namespace pstrain

#endif  // PSTRAIN_MODELS_TABULAR_SPEC_TEST_UTIL_H_
