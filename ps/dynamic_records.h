// One stripe's keys of a dynamic table shard (ps/dynamic_shard.h): its records, and the index that
// finds them. The shard holds kStripes of these, each under its stripe's lock; a RecordTable has no
// lock of its own (not thread-safe: its owner serializes every call, readers included).
//
// A key's record holds, in one allocation, a 24-byte header (RecordHeader: key, last step, count,
// generation, live) then its row and every optimizer slot's row (dim floats each, or fewer bytes
// in a stored format: ps/row_format.h): a key is present
// with all of them or not at all. Records live in blocks that never move (a record keeps its place
// while its key lives; an erased key's record is reused by a later insert):
//
//   blocks: [64 records][64][128][256]...  small ones, doubling while a block is under 2 MiB
//           [2 MiB][2 MiB]...               then big ones of one (huge) page each
//
// The index is open addressing with linear probing: 8 bytes per entry, (the key's hash's low 32
// bits as its tag << 32) | (record number + 1), 0 for empty; at most 3/4 full; erasures shift
// later entries back (no tombstones). Walk() pipelines a batch of finds so that the memory's
// latency overlaps. A disk tier would sit here: records whose key is in the index but whose data
// lives elsewhere.
#ifndef PSTRAIN_PS_DYNAMIC_RECORDS_H_
#define PSTRAIN_PS_DYNAMIC_RECORDS_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ps/memory_budget.h"
#include "ps/table_memory.h"

namespace pstrain {

// A record's header. `step` is the low 32 bits of the last global step that touched the key (ages
// are computed modulo 2^32); `live` is 0 for a free record.
struct RecordHeader {
  int64_t key;
  uint32_t step;
  uint32_t count;       // training-lookup sightings
  uint32_t generation;  // the save generation of its last change
  uint32_t live;
};
static_assert(sizeof(RecordHeader) == 24, "header layout");

inline RecordHeader* Header(char* record) { return reinterpret_cast<RecordHeader*>(record); }
inline const RecordHeader* Header(const char* record) {
  return reinterpret_cast<const RecordHeader*>(record);
}
// The row, then each slot's row (of a record stored as float32).
inline float* Floats(char* record) { return reinterpret_cast<float*>(record + sizeof(RecordHeader)); }
inline const float* Floats(const char* record) {
  return reinterpret_cast<const float*>(record + sizeof(RecordHeader));
}

// Prefetches every line of [p, p + bytes). Read prefetches (rw 0): a write prefetch needs
// PREFETCHW, which GCC targets only when told the CPU has it (-march=native), and otherwise emits
// nothing at all.
inline __attribute__((always_inline)) void PrefetchLines(const void* p, int64_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t line = begin & ~uintptr_t{63}; line < begin + bytes; line += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(line));
  }
}

// How a shard's records are laid out: the same for each of its stripes.
struct RecordLayout {
  static constexpr int kFirstBlockShift = 6;  // the first block holds 64 records
  static constexpr int64_t kBigBlockBytes = int64_t{2} << 20;
  static constexpr int64_t kHugePage = int64_t{2} << 20;

  // Records of `data_bytes` bytes after the header (the row and slots, as stored), of which a
  // lookup reads the header and the first `prefix_bytes` (the row).
  static RecordLayout For(int64_t data_bytes, int64_t prefix_bytes);

  // Bytes from one record to the next (a multiple of 8; header, floats, and padding where it lets a
  // lookup's prefix span fewer cache lines on average).
  int64_t record_bytes = 0;
  // Small blocks cover records [0, small_records); big blocks hold big_block_records each.
  size_t small_blocks = 0;
  uint32_t small_records = 0;
  uint32_t big_block_records = 1;
  // i / big_block_records as (i * big_block_magic) >> 64 (exact for 32-bit i; 0: divide by 1).
  uint64_t big_block_magic = 0;

  // Records in block `block`.
  int64_t BlockRecords(size_t block) const {
    if (block >= small_blocks) return big_block_records;
    return block == 0 ? (int64_t{1} << kFirstBlockShift)
                      : (int64_t{1} << (kFirstBlockShift - 1 + block));
  }
  // Record r's block and its place in it.
  inline void Locate(uint32_t r, size_t* block, uint32_t* offset) const;
};

class RecordTable {
 public:
  // Memory is reserved in `budget` (not owned; may be null).
  RecordTable(const RecordLayout& layout, MemoryBudget* budget)
      : layout_(layout), reservation_(budget) {}
  RecordTable(const RecordTable&) = delete;
  RecordTable& operator=(const RecordTable&) = delete;

  const RecordLayout& layout() const { return layout_; }

  // Record number r (r < next_record()).
  inline char* Record(uint32_t r) const;
  // The record of the index entry at `pos` (which must hold one).
  char* RecordAt(uint64_t pos) const { return Record(EntryRecord(index_[pos])); }
  // Finds `key` (`hash` its 64-bit hash): true and its index position, or false and the empty
  // position where it would go (0 before the first insert).
  inline bool Probe(int64_t key, uint64_t hash, uint64_t* pos) const;
  // Probe's record, or null.
  char* Find(int64_t key, uint64_t hash) const {
    uint64_t pos = 0;
    return Probe(key, hash, &pos) ? RecordAt(pos) : nullptr;
  }

  // Walks `n` positions in order, calling fn(p, pos, record) for each p = positions[k]: `record`
  // is keys[p]'s record if the key is held (else null), `pos` its index position (or, if not held,
  // the empty position where it would go). A pipeline hides the memory's latency: the home index
  // entry of the key kIndexAhead positions ahead is prefetched; kRecordAhead ahead, the key's entry
  // is found by its tag in the (by then arrived) index and the first `record_prefix` bytes of its
  // record are prefetched. fn may erase or insert but not grow the index: a position found ahead
  // is checked again before use, and probed afresh if it changed.
  template <typename Fn>
  void Walk(const int64_t* keys, const uint64_t* hashes, const int32_t* positions, int64_t n,
            int64_t record_prefix, Fn&& fn) const;

  // Makes room for `new_keys` more keys (records and index entries) beyond the room promised to
  // others (Promise), reserving the memory in the budget for `who` (a shard's name, for errors).
  // Errors: kResourceExhausted (the budget, the machine, or 2^32 - 2 records), nothing changed.
  // With `headroom`, the memory taken must leave that many bytes of the budget (a tiered shard
  // would rather move keys to disk).
  absl::Status MakeRoom(int64_t new_keys, const std::string& who, int64_t headroom = 0);
  // Room made for `keys` keys that a caller will insert later (while other callers' MakeRoom runs
  // in between) is kept for it; Unpromise gives it up, or marks it used.
  void Promise(int64_t keys) { promised_ += keys; }
  void Unpromise(int64_t keys) { promised_ -= keys; }

  // Stores `key` at the empty index position `pos` (Probe's, room made first) in a free record,
  // with its header; its floats are left to the caller. Returns the record.
  char* InsertAt(int64_t key, uint64_t hash, uint64_t pos, uint32_t step, uint32_t count,
                 uint32_t generation);
  // Removes the key at index position `pos` (its record is freed for reuse). Returns the key.
  int64_t EraseAt(uint64_t pos);

  // fn(record) for every live record, in record order.
  template <typename Fn>
  void ForEachLive(Fn&& fn) const {
    for (uint32_t r = 0; r < next_record_; ++r) {
      char* record = Record(r);
      if (Header(record)->live != 0) fn(record);
    }
  }

  // Keys held.
  int64_t live() const { return live_; }
  // Records handed out so far: record numbers are < this.
  uint32_t next_record() const { return next_record_; }
  // Bytes of blocks and index reserved, and of the free list's memory.
  int64_t reserved_bytes() const { return reservation_.bytes(); }
  int64_t free_list_bytes() const {
    return static_cast<int64_t>(free_records_.capacity() * sizeof(uint32_t));
  }

 private:
  // Walk's pipeline: the index entry of the key this many positions ahead is prefetched, and the
  // record of the key kRecordAhead ahead (found in an index line that has had time to arrive).
  static constexpr int64_t kIndexAhead = 32;
  static constexpr int64_t kRecordAhead = 16;
  static constexpr int64_t kWalkRing = 32;  // a power of two above kRecordAhead
  static_assert(kWalkRing > kRecordAhead && (kWalkRing & (kWalkRing - 1)) == 0, "ring size");
  static constexpr int64_t kMinIndex = 16;  // entries in the first index

  static uint32_t Tag(uint64_t hash) { return static_cast<uint32_t>(hash); }
  static uint64_t Entry(uint64_t hash, uint32_t record) {
    return (uint64_t{Tag(hash)} << 32) | (uint64_t{record} + 1);
  }
  static uint32_t EntryRecord(uint64_t entry) { return static_cast<uint32_t>(entry) - 1; }
  static uint32_t EntryTag(uint64_t entry) { return static_cast<uint32_t>(entry >> 32); }

  const RecordLayout layout_;
  TableMemory index_memory_;
  uint64_t* index_ = nullptr;  // entries, or null before the first insert
  uint64_t mask_ = 0;          // capacity - 1
  int64_t entries_ = 0;
  std::vector<TableMemory> blocks_;
  uint32_t next_record_ = 0;  // records [0, next_record_) have been handed out
  std::vector<uint32_t> free_records_;
  int64_t live_ = 0;
  uint64_t erasures_ = 0;  // keys erased so far (Walk: an erase may open an earlier empty entry)
  int64_t promised_ = 0;   // keys' room kept for callers (Promise)
  BudgetReservation reservation_;  // blocks and index
};

// ---- Inline: the hot path.

inline void RecordLayout::Locate(uint32_t r, size_t* block, uint32_t* offset) const {
  if (r < small_records) {
    if (r < (1u << kFirstBlockShift)) {
      *block = 0;
      *offset = r;
    } else {
      const int width = 32 - __builtin_clz(r);  // r is in [2^(width-1), 2^width)
      *block = static_cast<size_t>(width - kFirstBlockShift);
      *offset = r - (1u << (width - 1));
    }
    return;
  }
  const uint32_t i = r - small_records;
  // i / big_block_records without a division (Lemire, Kaser and Kurz's fastdiv).
  const uint32_t q =
      big_block_magic == 0
          ? i
          : static_cast<uint32_t>((static_cast<unsigned __int128>(big_block_magic) * i) >> 64);
  *block = small_blocks + q;
  *offset = i - q * big_block_records;
}

inline char* RecordTable::Record(uint32_t r) const {
  size_t block;
  uint32_t offset;
  layout_.Locate(r, &block, &offset);
  return blocks_[block].data() + static_cast<int64_t>(offset) * layout_.record_bytes;
}

inline bool RecordTable::Probe(int64_t key, uint64_t hash, uint64_t* pos) const {
  if (index_ == nullptr) {
    *pos = 0;
    return false;
  }
  const uint32_t tag = Tag(hash);
  for (uint64_t i = tag & mask_;; i = (i + 1) & mask_) {
    const uint64_t e = index_[i];
    if (e == 0 || (EntryTag(e) == tag && Header(Record(EntryRecord(e)))->key == key)) {
      *pos = i;
      return e != 0;
    }
  }
}

template <typename Fn>
inline __attribute__((always_inline)) void RecordTable::Walk(const int64_t* keys,
                                                             const uint64_t* hashes,
                                                             const int32_t* positions, int64_t n,
                                                             int64_t record_prefix,
                                                             Fn&& fn) const {
  if (index_ == nullptr) {  // nothing stored yet
    for (int64_t k = 0; k < n; ++k) fn(positions[k], uint64_t{0}, static_cast<char*>(nullptr));
    return;
  }
  // For position k, at k % kWalkRing: the index position stage 2 found (with kEmptyBit set if it
  // is the empty position that ends the key's probe sequence: the key is not held), and if not
  // empty, the entry there and its record; if empty, the erasures then.
  constexpr uint64_t kEmptyBit = uint64_t{1} << 63;
  uint64_t found[kWalkRing];
  uint64_t found_erasures[kWalkRing];
  uint64_t found_entry[kWalkRing];
  char* found_record[kWalkRing];
  const uint64_t* index = index_;
  const uint64_t mask = mask_;
  // Stage 1 (the home entry's line) is written out where it is used, not as a lambda: GCC deems a
  // function that only prefetches side-effect free and drops calls to one it doesn't inline.
  // Stage 2: the key's entry by tag, then its record's lines.
  auto stage2 = [&](int64_t j) __attribute__((always_inline)) {
    const uint32_t tag = Tag(hashes[positions[j]]);
    const int64_t slot = j & (kWalkRing - 1);
    for (uint64_t i = tag & mask;; i = (i + 1) & mask) {
      const uint64_t e = index[i];
      if (e == 0) {
        found[slot] = i | kEmptyBit;
        found_erasures[slot] = erasures_;
        return;
      }
      if (EntryTag(e) == tag) {
        found[slot] = i;
        found_entry[slot] = e;
        found_record[slot] = Record(EntryRecord(e));
        PrefetchLines(found_record[slot], record_prefix);
        return;
      }
    }
  };
  for (int64_t j = 0; j < std::min(n, kIndexAhead); ++j) {
    __builtin_prefetch(&index[Tag(hashes[positions[j]]) & mask]);
  }
  for (int64_t j = 0; j < std::min(n, kRecordAhead); ++j) stage2(j);
  for (int64_t k = 0; k < n; ++k) {
    if (k + kIndexAhead < n) {
      __builtin_prefetch(&index[Tag(hashes[positions[k + kIndexAhead]]) & mask]);
    }
    if (k + kRecordAhead < n) stage2(k + kRecordAhead);
    const int32_t p = positions[k];
    const int64_t slot = k & (kWalkRing - 1);
    const uint64_t f = found[slot];
    const uint64_t pos = f & ~kEmptyBit;
    // fn may have changed the index since stage 2: an insert fills empty entries, an erase shifts
    // entries back and may leave an empty entry before the one found. The position is used only
    // if it still holds the same entry, or is still empty with no erase since; otherwise the key
    // is probed afresh.
    const uint64_t e = index_[pos];
    if ((f & kEmptyBit) != 0) {
      if (e == 0 && found_erasures[slot] == erasures_) {
        fn(p, pos, static_cast<char*>(nullptr));
        continue;
      }
    } else if (e == found_entry[slot] && Header(found_record[slot])->key == keys[p]) {
      fn(p, pos, found_record[slot]);
      continue;
    }
    uint64_t probed = 0;
    char* record = Probe(keys[p], hashes[p], &probed) ? RecordAt(probed) : nullptr;
    fn(p, probed, record);
  }
}

}  // namespace pstrain

#endif  // PSTRAIN_PS_DYNAMIC_RECORDS_H_
