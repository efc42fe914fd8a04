// Memory for a shard's rows and slots. Large tables are mapped with transparent huge pages asked for
// (madvise), so random row accesses miss the TLB far less often (this machine's random 64-byte gather
// goes from ~25 to ~37 M rows/s with huge pages).
//
// A shard's tables are read and written together, row i of each (Adagrad: the value row and its
// accumulator row). Mapped tables start at the same offset modulo 2 MiB (Linux aligns large
// anonymous mappings to huge pages; mmap itself promises only pages), so those rows would share
// their low 21 address bits, which the cache and memory hardware maps onto the same sets and banks:
// on this machine a standalone random Adagrad loop over two such tables ran at ~7 M rows/s per
// core, and at ~15-19 when one table was shifted by a few cache lines (in the ps, where other costs
// weigh more, bench/ps_bench's breakdown.server_adagrad_no_grpc gained ~10%). `stagger_lines`
// shifts the table's start by that many 64-byte lines; a shard gives each of its tables a
// different one.
#ifndef PSTRAIN_PS_TABLE_MEMORY_H_
#define PSTRAIN_PS_TABLE_MEMORY_H_

#include <cstddef>

namespace pstrain {

// Owns one zero-initialized block of memory. Move-only.
class TableMemory {
 public:
  // Tables at least this large are mmapped with MADV_HUGEPAGE; smaller ones come from new[].
  static constexpr size_t kHugePageThreshold = size_t{2} << 20;

  TableMemory() = default;
  // nullptr data() if the memory could not be had.
  explicit TableMemory(size_t bytes, size_t stagger_lines = 0);
  ~TableMemory();
  TableMemory(TableMemory&& other) noexcept;
  TableMemory& operator=(TableMemory&& other) noexcept;
  TableMemory(const TableMemory&) = delete;
  TableMemory& operator=(const TableMemory&) = delete;

  char* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  void Release();

  char* data_ = nullptr;
  size_t bytes_ = 0;
  bool mapped_ = false;
  size_t stagger_bytes_ = 0;  // data_ - the start of the mapping
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_TABLE_MEMORY_H_
