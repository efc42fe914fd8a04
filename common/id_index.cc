#include "common/id_index.h"

#include <algorithm>
#include <cstring>

namespace pstrain {

void IdIndex::Reset(int64_t max_ids) {
  // At most half full: short probe sequences.
  uint64_t size = 16;
  while (size < 2 * static_cast<uint64_t>(max_ids > 0 ? max_ids : 0)) size <<= 1;
  if (size > slots_.size()) {
    slots_.assign(size, Slot{});
    generation_ = 0;
  }
  mask_ = size - 1;
  // Slots of a smaller earlier table beyond `size` are simply not probed; the generation makes
  // every slot within it free. After 2^32 - 1 batches the generations wrap: start the slots afresh.
  if (++generation_ == 0) {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    generation_ = 1;
  }
}

namespace {

int64_t IdAt(const char* ids, int64_t i) {
  int64_t id;
  std::memcpy(&id, ids + 8 * i, sizeof(id));
  return id;
}

uint64_t BitOf(int64_t id, int shift) {
  return (static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> shift;  // the high bits
}

}  // namespace

const std::vector<RepeatFinder::Repeat>& RepeatFinder::Find(const char* ids, int64_t n) {
  repeats_.clear();
  if (n <= 1) return repeats_;
  // Strictly increasing ids repeat none: a client that sorted its distinct ids (as ps-lite's must
  // be; ps_bench --sorted_ids) costs one compare per id, not the bitmap's ~5 ns. Any other batch
  // leaves this loop at its first step down, almost always within a few ids.
  int64_t previous = IdAt(ids, 0);
  int64_t i = 1;
  for (; i < n; ++i) {
    const int64_t id = IdAt(ids, i);
    if (id <= previous) break;
    previous = id;
  }
  if (i == n) return repeats_;
  int bits_log2 = 6;
  while ((int64_t{1} << bits_log2) < 16 * n) ++bits_log2;
  const int shift = 64 - bits_log2;
  const size_t words = (size_t{1} << bits_log2) / 64;
  seen_.assign(words, 0);
  candidates_.clear();
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bit = BitOf(IdAt(ids, i), shift);
    uint64_t& word = seen_[bit >> 6];
    const uint64_t mask = uint64_t{1} << (bit & 63);
    if ((word & mask) != 0) {
      candidates_.push_back(i);  // this id, or one with the same bit, came before
    } else {
      word |= mask;
    }
  }
  if (candidates_.empty()) return repeats_;
  // Every repeated id is among the candidates' ids. Walk the batch again: positions whose bit is a
  // candidate's and whose id is a candidate's get their first positions recorded exactly.
  candidate_.assign(words, 0);
  candidate_ids_.Reset(static_cast<int64_t>(candidates_.size()));
  bool inserted = false;
  for (int64_t i : candidates_) {
    const int64_t id = IdAt(ids, i);
    const uint64_t bit = BitOf(id, shift);
    candidate_[bit >> 6] |= uint64_t{1} << (bit & 63);
    candidate_ids_.FindOrInsert(id, i, &inserted);
  }
  first_.Reset(static_cast<int64_t>(candidates_.size()));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = IdAt(ids, i);
    const uint64_t bit = BitOf(id, shift);
    if (((candidate_[bit >> 6] >> (bit & 63)) & 1) == 0) continue;
    if (candidate_ids_.Find(id) < 0) continue;  // shares a bit with a candidate, is not one
    const int64_t first = first_.FindOrInsert(id, i, &inserted);
    if (!inserted) repeats_.push_back({first, i});
  }
  return repeats_;
}

RepeatFinder& ThreadRepeatFinder() {
  thread_local RepeatFinder finder;
  return finder;
}

}  // namespace pstrain
