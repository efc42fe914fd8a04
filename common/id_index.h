// Deduplication on the data path (the client's pull and push, the ps's sparse apply).
//
// IdIndex: first positions of ids. An open-addressing table with linear probing that is reused from
// call to call: Reset() costs nothing per slot (slots carry the generation that wrote them), so n
// ids cost n probes into a table of at most 4n slots. About 4x faster than absl::flat_hash_map for
// 16K-id batches, which allocates and clears per batch.
//
// RepeatFinder (below): the repeats of a batch, using an IdIndex over its few candidates only.
//
// Not thread-safe: each is used by one batch at a time. Positions are below 2^31 (a batch of ids
// is far smaller).
#ifndef PSTRAIN_COMMON_ID_INDEX_H_
#define PSTRAIN_COMMON_ID_INDEX_H_

#include <cstdint>
#include <vector>

namespace pstrain {

class IdIndex {
 public:
  // Empties the index and makes room for up to `max_ids` distinct ids.
  void Reset(int64_t max_ids);

  // The position recorded for `id`, or, if `id` is new, records and returns `pos`; *inserted says
  // which. At most Reset()'s max_ids distinct ids may be inserted.
  int64_t FindOrInsert(int64_t id, int64_t pos, bool* inserted) {
    uint64_t i = Hash(id) & mask_;
    for (;;) {
      Slot& slot = slots_[i];
      if (slot.generation != generation_) {
        slot = Slot{id, generation_, static_cast<int32_t>(pos)};
        *inserted = true;
        return pos;
      }
      if (slot.id == id) {
        *inserted = false;
        return slot.pos;
      }
      i = (i + 1) & mask_;
    }
  }

  // The position recorded for `id`, or -1.
  int64_t Find(int64_t id) const {
    for (uint64_t i = Hash(id) & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.generation != generation_) return -1;
      if (slot.id == id) return slot.pos;
    }
  }

 private:
  // 16 bytes per slot.
  struct Slot {
    int64_t id = 0;
    uint32_t generation = 0;  // the slot is in use iff this is the current generation
    int32_t pos = 0;
  };
  static uint64_t Hash(int64_t id) {
    // Fibonacci hashing, then the high bits folded down (the mask keeps the low ones).
    const uint64_t h = static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
  }

  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  uint32_t generation_ = 0;
};

// The repeats in a batch of ids: (first position, later position) for every position whose id
// occurred earlier in the batch. Cheaper than an IdIndex over the whole batch when repeats are few,
// as they are in a push (a client that summed its repeats sends none; 16K uniform ids from 4M rows
// repeat ~31 times): one pass sets each id's hash bit in a bitmap of 16 bits per id (32 KiB for
// 16K ids, so it stays in L1/L2 while an IdIndex's 512 KiB did not on a busy ps), and only the
// ids whose bit was already set, ~1/32 of them, are candidates; a second pass finds the candidates'
// first positions exactly. ~5 ns per id here against ~9 for an IdIndex. Strictly increasing ids
// (a client that sorted its distinct ids) are known to repeat none after one compare each.
//
// Not thread-safe: one per thread (ThreadRepeatFinder()).
class RepeatFinder {
 public:
  struct Repeat {
    int64_t first;  // position of the id's first occurrence
    int64_t later;  // a later position with the same id
  };
  // The repeats among the n ids at `ids` (native int64, any alignment), in increasing `later`
  // order. The result is valid until the next call.
  const std::vector<Repeat>& Find(const char* ids, int64_t n);

 private:
  std::vector<uint64_t> seen_;        // the bitmap of the first pass
  std::vector<uint64_t> candidate_;   // the candidates' bits
  std::vector<int64_t> candidates_;   // positions whose bit was already set
  IdIndex candidate_ids_, first_;
  std::vector<Repeat> repeats_;
};

// This thread's finder.
RepeatFinder& ThreadRepeatFinder();

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_ID_INDEX_H_
