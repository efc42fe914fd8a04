#include "ps/dynamic_records.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

// Lines of 64 bytes that `bytes` bytes starting `offset` bytes into a line span.
int64_t LinesSpanned(int64_t offset, int64_t bytes) { return (offset % 64 + bytes + 63) / 64; }

// The distance between records of `record` bytes (a multiple of 8), of which a lookup reads the
// first `prefix` (the header and the row). Records follow each other in a block, so their
// offsets into a cache line cycle; a few bytes of padding can keep every record's prefix within
// as few lines as it needs (a 152-byte record of 16 floats with Adagrad has the header and row on
// three lines for a quarter of its offsets; at 160 bytes, on two for all). Padding is added only
// if it lowers the lines a lookup reads on average, and at most 1/16 of the record (at least 8).
int64_t RecordStride(int64_t record, int64_t prefix) {
  record = (record + 7) / 8 * 8;
  auto average_lines = [&](int64_t stride) {
    int64_t lines = 0;
    // 8 offsets (a stride is a multiple of 8) make a cycle.
    for (int64_t i = 0; i < 8; ++i) lines += LinesSpanned(i * stride, prefix);
    return lines;
  };
  int64_t best = record;
  for (int64_t stride = record + 8; stride <= record + std::max<int64_t>(8, record / 16);
       stride += 8) {
    if (average_lines(stride) < average_lines(best)) best = stride;
  }
  return best;
}

}  // namespace

RecordLayout RecordLayout::For(int64_t data_bytes, int64_t prefix_bytes) {
  constexpr int64_t kHeader = sizeof(RecordHeader);
  RecordLayout layout;
  layout.record_bytes = RecordStride(kHeader + data_bytes, kHeader + prefix_bytes);
  size_t small = 1;  // blocks 0..small-1 cover records [0, 2^(5 + small))
  while (small < 20 &&
         (int64_t{1} << (kFirstBlockShift - 1 + small)) * layout.record_bytes < kHugePage) {
    ++small;
  }
  layout.small_blocks = small;
  layout.small_records = uint32_t{1} << (kFirstBlockShift - 1 + small);
  layout.big_block_records =
      static_cast<uint32_t>(std::max<int64_t>(1, kBigBlockBytes / layout.record_bytes));
  if (layout.big_block_records > 1) {
    layout.big_block_magic = ~uint64_t{0} / layout.big_block_records + 1;
  }
  return layout;
}

absl::Status RecordTable::MakeRoom(int64_t new_keys, const std::string& who, int64_t headroom) {
  if (new_keys <= 0) return absl::OkStatus();
  // Room promised to callers that insert later is kept for them.
  new_keys += promised_;
  // The index: at most 3/4 full.
  const int64_t need_entries = entries_ + new_keys;
  const int64_t capacity = index_ == nullptr ? 0 : static_cast<int64_t>(mask_) + 1;
  int64_t grown = std::max(capacity, kMinIndex);
  while (need_entries * 4 > grown * 3) grown *= 2;
  // The blocks: enough records, free ones first.
  const int64_t fresh =
      std::max<int64_t>(0, new_keys - static_cast<int64_t>(free_records_.size()));
  int64_t have = 0;
  for (size_t b = 0; b < blocks_.size(); ++b) have += layout_.BlockRecords(b);
  if (static_cast<int64_t>(next_record_) + fresh > int64_t{0xfffffffe}) {
    return absl::ResourceExhaustedError(
        absl::StrCat(who, ": a stripe can't hold more than 2^32 - 2 records"));
  }
  std::vector<int64_t> block_sizes;  // bytes of each new block
  int64_t block_bytes = 0;
  for (size_t b = blocks_.size(); have < next_record_ + fresh; ++b) {
    const int64_t records = layout_.BlockRecords(b);
    int64_t bytes = records * layout_.record_bytes;
    if (b >= layout_.small_blocks) {
      bytes = (bytes + RecordLayout::kHugePage - 1) / RecordLayout::kHugePage *
              RecordLayout::kHugePage;
    }
    block_sizes.push_back(bytes);
    block_bytes += bytes;
    have += records;
  }
  const int64_t index_bytes = grown != capacity ? grown * 8 : 0;
  RETURN_IF_ERROR(reservation_.Add(block_bytes + index_bytes, who, headroom));
  for (int64_t bytes : block_sizes) {
    TableMemory block(static_cast<size_t>(bytes));
    if (block.data() == nullptr) {
      reservation_.Remove(block_bytes + index_bytes);
      return absl::ResourceExhaustedError(
          absl::StrCat(who, ": out of memory for a block of ", bytes, " bytes"));
    }
    blocks_.push_back(std::move(block));
  }
  if (grown != capacity) {
    TableMemory memory(static_cast<size_t>(grown * 8));
    if (memory.data() == nullptr) {
      reservation_.Remove(index_bytes);
      return absl::ResourceExhaustedError(
          absl::StrCat(who, ": out of memory for an index of ", grown, " entries"));
    }
    uint64_t* index = reinterpret_cast<uint64_t*>(memory.data());  // zeroed
    const uint64_t mask = static_cast<uint64_t>(grown) - 1;
    for (int64_t i = 0; i < capacity; ++i) {
      const uint64_t e = index_[i];
      if (e == 0) continue;
      uint64_t j = EntryTag(e) & mask;
      while (index[j] != 0) j = (j + 1) & mask;
      index[j] = e;
    }
    reservation_.Remove(capacity * 8);
    index_memory_ = std::move(memory);
    index_ = index;
    mask_ = mask;
  }
  return absl::OkStatus();
}

char* RecordTable::InsertAt(int64_t key, uint64_t hash, uint64_t pos, uint32_t step,
                            uint32_t count, uint32_t generation) {
  uint32_t r;
  if (!free_records_.empty()) {
    r = free_records_.back();
    free_records_.pop_back();
  } else {
    r = next_record_++;
  }
  char* record = Record(r);
  RecordHeader* h = Header(record);
  h->key = key;
  h->step = step;
  h->count = count;
  h->generation = generation;
  h->live = 1;
  index_[pos] = Entry(hash, r);
  ++entries_;
  ++live_;
  return record;
}

int64_t RecordTable::EraseAt(uint64_t pos) {
  const uint32_t r = EntryRecord(index_[pos]);
  RecordHeader* h = Header(Record(r));
  const int64_t key = h->key;
  h->live = 0;
  free_records_.push_back(r);
  ++erasures_;
  // Backward-shift deletion: entries after `pos` whose home is not in (i, j] move back, so every
  // probe sequence stays unbroken without tombstones.
  uint64_t i = pos;
  for (uint64_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
    const uint64_t e = index_[j];
    if (e == 0) break;
    const uint64_t home = EntryTag(e) & mask_;
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (!stays) {
      index_[i] = e;
      i = j;
    }
  }
  index_[i] = 0;
  --entries_;
  --live_;
  return key;
}

}  // namespace pstrain
