#include "ps/table_memory.h"

#include <cstdint>
#include <utility>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// Every byte zero at first, and writable, from the first to the last.
void ExpectZeroedAndWritable(TableMemory& m, size_t bytes) {
  ASSERT_NE(m.data(), nullptr);
  ASSERT_EQ(m.size(), bytes);
  for (size_t i = 0; i < bytes; i += 4093) ASSERT_EQ(m.data()[i], 0) << i;
  ASSERT_EQ(m.data()[bytes - 1], 0);
  m.data()[0] = 1;
  m.data()[bytes - 1] = 2;
}

TEST(TableMemoryTest, SmallAndMappedTables_ZeroedAndWritable) {
  for (size_t bytes : {size_t{1}, size_t{4096}, TableMemory::kHugePageThreshold,
                       TableMemory::kHugePageThreshold * 3 + 123}) {
    SCOPED_TRACE(bytes);
    TableMemory m(bytes);
    ExpectZeroedAndWritable(m, bytes);
  }
}

TEST(TableMemoryTest, Staggered_ShiftedByWholeLines_AndMoves) {
  const size_t bytes = TableMemory::kHugePageThreshold * 2;
  TableMemory plain(bytes);
  TableMemory staggered(bytes, /*stagger_lines=*/67);
  ExpectZeroedAndWritable(staggered, bytes);
  // Mappings start on page boundaries: the staggered one starts 67 lines into its mapping.
  const auto page_offset = [](const char* p) { return reinterpret_cast<uintptr_t>(p) % 4096; };
  EXPECT_EQ(page_offset(plain.data()), 0u);
  EXPECT_EQ(page_offset(staggered.data()), (67 * 64) % 4096);
  TableMemory moved(std::move(staggered));
  EXPECT_EQ(staggered.data(), nullptr);
  EXPECT_EQ(moved.data()[0], 1);
  EXPECT_EQ(moved.data()[bytes - 1], 2);
  TableMemory assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.data()[bytes - 1], 2);
}

}  // namespace
}  // namespace pstrain
