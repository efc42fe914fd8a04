#include "common/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(Utf8Test, WellFormedTextIsValid) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("train/loss"));
  EXPECT_TRUE(IsValidUtf8("\xc3\xa9t\xc3\xa9"));                 // été
  EXPECT_TRUE(IsValidUtf8("\xe2\x82\xac"));                      // U+20AC
  EXPECT_TRUE(IsValidUtf8("\xed\x9f\xbf"));                      // U+D7FF, below the surrogates
  EXPECT_TRUE(IsValidUtf8("\xf0\x9f\x98\x80"));                  // U+1F600
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"));                  // U+10FFFF
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));              // NUL is a character
}

TEST(Utf8Test, MalformedTextIsNot) {
  EXPECT_FALSE(IsValidUtf8("\xf2\xf2"));          // a lead byte where a continuation belongs
  EXPECT_FALSE(IsValidUtf8("\x80"));              // a continuation byte first
  EXPECT_FALSE(IsValidUtf8("\xc3"));              // cut short
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));          // cut short
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xe0\x80\xaf"));      // overlong
  EXPECT_FALSE(IsValidUtf8("\xf0\x80\x80\xaf"));  // overlong
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // U+D800, a surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // U+110000
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("ok\xe2\x28\xa1"));    // a bad second byte after valid text
}

}  // namespace
}  // namespace pstrain
