// ModelVersions' view of a base directory without a model (loading and reloading real versions is
// in prediction_server_test.cc): which entries count as versions, and start-up errors.
#include "serving/prediction_server_models.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ListVersionDirsTest, NumberedDirectories_NewestFirst_OthersIgnored) {
  const std::string base = FreshTempDir("versions_listed");
  for (const char* dir : {"1", "12", "3", "007", "2.tmp-99", "latest", "-4", "99999999999999999999"}) {
    fs::create_directories(base + "/" + dir);
  }
  std::ofstream(base + "/5") << "a file, not a version";
  absl::StatusOr<std::vector<int64_t>> got = ListVersionDirs(base);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, ElementsAre(12, 7, 3, 1));
}

TEST(ListVersionDirsTest, MissingBase_NotFoundNamingIt) {
  EXPECT_THAT(ListVersionDirs(FreshTempDir("versions_missing") + "/nowhere"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nowhere")));
}

TEST(ModelVersionsTest, Start_NoCompleteVersion_NotFound) {
  const std::string base = FreshTempDir("versions_incomplete");
  fs::create_directories(base + "/1/db");  // no MANIFEST.json yet
  ModelVersionsOptions options;
  options.base = base;
  EXPECT_THAT(ModelVersions::Start(options).status(),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("no complete version"), HasSubstr("MANIFEST.json"))));
  options.base = "";
  EXPECT_THAT(ModelVersions::Start(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
}

TEST(ModelVersionsTest, Start_OnlyCorruptVersions_NewestErrorNamed) {
  const std::string base = FreshTempDir("versions_corrupt");
  for (const char* v : {"2", "5"}) {
    fs::create_directories(base + "/" + v);
    std::ofstream(base + "/" + v + "/MANIFEST.json") << "{";
  }
  ModelVersionsOptions options;
  options.base = base;
  EXPECT_THAT(ModelVersions::Start(options).status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("no version loads"), HasSubstr("version 5"),
                             HasSubstr("5/MANIFEST.json"))));
}

}  // namespace
}  // namespace pstrain
