#include "ps/checkpoint_root.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST(NormalizeAbsolutePathTest, DotsAndSlashes) {
  EXPECT_EQ(NormalizeAbsolutePath("/a/./b//c/"), "/a/b/c");
  EXPECT_EQ(NormalizeAbsolutePath("/a/b/../../.."), "/");
  EXPECT_EQ(NormalizeAbsolutePath("/../x"), "/x");
  EXPECT_EQ(NormalizeAbsolutePath("/"), "/");
}

class CheckpointRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = FreshTempDir("checkpoint_root");
    root_path_ = base_ + "/root";
    absl::StatusOr<CheckpointRoot> root = CheckpointRoot::Open(root_path_ + "/./");
    ASSERT_TRUE(root.ok()) << root.status();
    root_ = *root;
    ASSERT_EQ(::mkdir((root_path_ + "/ckpt").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((base_ + "/outside").c_str(), 0755), 0);
  }
  std::string base_, root_path_;
  CheckpointRoot root_;
};

TEST_F(CheckpointRootTest, Open_CreatesTheRoot) {
  struct stat st;
  EXPECT_EQ(::stat(root_path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
}

TEST_F(CheckpointRootTest, PathsUnderTheRoot_Allowed) {
  const std::string real = root_.path();
  EXPECT_EQ(*root_.Confine(root_path_ + "/ckpt/ckpt-1/ps-0"), real + "/ckpt/ckpt-1/ps-0");
  EXPECT_EQ(*root_.Confine("ckpt/ckpt-1"), real + "/ckpt/ckpt-1");  // relative: from the root
  EXPECT_EQ(*root_.Confine(root_path_ + "/ckpt/../ckpt/x"), real + "/ckpt/x");
  // A symlink inside the root pointing inside it.
  ASSERT_EQ(::symlink((root_path_ + "/ckpt").c_str(), (root_path_ + "/link").c_str()), 0);
  EXPECT_EQ(*root_.Confine(root_path_ + "/link/new"), real + "/ckpt/new");
}

TEST_F(CheckpointRootTest, PathsOutside_PermissionDenied_NothingCreated) {
  for (const std::string& bad :
       {std::string("../../x"), std::string("/x"), root_path_ + "/../outside/db",
        root_path_ + "-sibling/db", std::string("ckpt/../../outside/db")}) {
    absl::StatusOr<std::string> got = root_.Confine(bad);
    ASSERT_FALSE(got.ok()) << bad << " -> " << *got;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied) << got.status();
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(bad));
    EXPECT_THAT(std::string(got.status().message()), HasSubstr("--checkpoint_root"));
  }
  // A symlink inside the root that leads out of it.
  ASSERT_EQ(::symlink((base_ + "/outside").c_str(), (root_path_ + "/escape").c_str()), 0);
  absl::StatusOr<std::string> got = root_.Confine(root_path_ + "/escape/db");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied) << got.status();
  // A dangling symlink: RocksDB would create through it.
  ASSERT_EQ(::symlink("/nonexistent/place", (root_path_ + "/dangling").c_str()), 0);
  got = root_.Confine(root_path_ + "/dangling");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied) << got.status();
  struct stat st;
  EXPECT_NE(::stat("/x", &st), 0);
}

TEST_F(CheckpointRootTest, EmptyOrNul_InvalidArgument) {
  EXPECT_EQ(root_.Confine("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(root_.Confine(std::string("a\0b", 3)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointRootUnconfinedTest, AnyPathPasses) {
  CheckpointRoot none;
  EXPECT_EQ(*none.Confine("/anywhere/at/all"), "/anywhere/at/all");
}

TEST(CheckpointRootOpenTest, AFileIsNotARoot) {
  const std::string dir = FreshTempDir("checkpoint_root_file");
  const std::string file = dir + "/f";
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  absl::StatusOr<CheckpointRoot> root = CheckpointRoot::Open(file);
  EXPECT_FALSE(root.ok());
  EXPECT_THAT(std::string(root.status().message()), HasSubstr(file));
}

}  // namespace
}  // namespace pstrain
