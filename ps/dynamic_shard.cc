#include "ps/dynamic_shard.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/id_index.h"
#include "common/status_macros.h"
#include "partitioners/key_routing.h"
#include "ps/initializers.h"
#include "ps/table_memory.h"

namespace pstrain {
namespace {

// The record's header. `step` is the low 32 bits of the last global step (ages are computed modulo
// 2^32, so TTLs below 2^31 steps are exact); `live` is 0 for a free record.
struct RecordHeader {
  int64_t key;
  uint32_t step;
  uint32_t count;
  uint32_t generation;
  uint32_t live;
};
static_assert(sizeof(RecordHeader) == DynamicShard::kHeaderBytes, "header layout");

inline RecordHeader* Header(char* record) { return reinterpret_cast<RecordHeader*>(record); }
inline const RecordHeader* Header(const char* record) {
  return reinterpret_cast<const RecordHeader*>(record);
}
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

// A row copy: rows of 16 floats (the common width) as four 16-byte moves, others by memcpy.
inline void CopyRow(char* to, const float* from, int64_t bytes) {
  if (bytes == 64) {
    std::memcpy(to, from, 64);
  } else {
    std::memcpy(to, from, static_cast<size_t>(bytes));
  }
}

inline int64_t LoadKey(const char* p) {
  int64_t k;
  std::memcpy(&k, p, sizeof(k));
  return k;
}

// A key's hash in the shard: MixKey, whose top 32 bits are the routing hash that placed the key in
// this shard (so checking a request's keys and hashing them for the shard is one MixKey each). The
// routing hash's low 3 bits pick the stripe (the shard holds a contiguous range of routing hashes,
// of 2^32 / num_shards values, over which those bits are uniform); the low 32 bits, independent of
// the top ones, are the index entry's tag and home.
inline uint64_t StripeHash(int64_t key) { return MixKey(key); }
inline int StripeOf(uint64_t hash) { return static_cast<int>((hash >> 32) & 7); }
static_assert(DynamicShard::kStripes == 8, "StripeOf takes 3 bits");
inline uint32_t Tag(uint64_t hash) { return static_cast<uint32_t>(hash); }
inline uint64_t Entry(uint64_t hash, uint32_t record) {
  return (uint64_t{Tag(hash)} << 32) | (uint64_t{record} + 1);
}
inline uint32_t EntryRecord(uint64_t entry) { return static_cast<uint32_t>(entry) - 1; }
inline uint32_t EntryTag(uint64_t entry) { return static_cast<uint32_t>(entry >> 32); }

// A key's last step moves only forward (async workers send steps out of order); compared modulo 2^32.
inline void Touch(uint32_t* last, uint32_t step) {
  if (static_cast<int32_t>(step - *last) > 0) *last = step;
}

inline uint32_t SaturatingAdd(uint32_t a, uint32_t b) {
  return a > std::numeric_limits<uint32_t>::max() - b ? std::numeric_limits<uint32_t>::max() : a + b;
}

// A training lookup's sighting of a held key: one more sighting, its last step moved up to `step`,
// stamped with the save generation.
inline void CountSighting(RecordHeader* h, uint32_t step, uint32_t generation) {
  h->count = SaturatingAdd(h->count, 1);
  Touch(&h->step, step);
  h->generation = generation;
}

constexpr int kFirstBlockShift = 6;  // the first block holds 64 records
constexpr int64_t kMinIndex = 16;    // entries in a stripe's first index
constexpr int64_t kDefaultSketchBytes = int64_t{1} << 20;
constexpr int kSketchRows = 4;
// Bytes of index per key that max_bytes counts (8-byte entries, the index between 3/8 and 3/4
// full: 16 bytes at half full).
constexpr int64_t kIndexBytesPerKey = 16;
// Walk's pipeline: the index entry of the key this many positions ahead is prefetched, and the
// record of the key kRecordAhead ahead (found in an index line that has had time to arrive).
constexpr int64_t kIndexAhead = 32;
constexpr int64_t kRecordAhead = 16;
constexpr int64_t kWalkRing = 32;  // a power of two above kRecordAhead
static_assert(kWalkRing > kRecordAhead && (kWalkRing & (kWalkRing - 1)) == 0, "ring size");
constexpr int64_t kDefaultExportKeys = 65536;

// Blocks of records: small blocks first (64 records, then doubling, while a block is under 2 MiB:
// small tables stay small), then big blocks of one 2 MiB page each (huge pages where the kernel
// gives them: TableMemory) of as many records as fit. No record straddles a block, and the unused
// tail of a table is at most one big block per stripe.
constexpr int64_t kBigBlockBytes = int64_t{2} << 20;
constexpr int64_t kHugePage = int64_t{2} << 20;

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

// A uniform draw in [0, 1) from (a, b, c).
double Draw(uint64_t a, uint64_t b, uint64_t c) {
  const uint64_t bits = MixKey(static_cast<int64_t>(MixKey(static_cast<int64_t>(a ^ MixKey(static_cast<int64_t>(b)))) ^ c));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

// The cursor of an export: (stripe, next record number), 8 bytes little-endian.
std::string EncodeCursor(int stripe, uint32_t record) {
  const uint64_t v = (uint64_t{static_cast<uint32_t>(stripe)} << 32) | record;
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}

}  // namespace

// A stripe: its lock, its index and its records. Changed only under `mu`; a checkpoint reads it
// under `mu` too, with the store's update gate keeping every writer out.
struct DynamicShard::Stripe {
  mutable absl::Mutex mu;
  TableMemory index_memory;
  uint64_t* index = nullptr;  // entries: (hash's low 32 bits << 32) | (record + 1); 0 = empty
  uint64_t mask = 0;          // capacity - 1 (no index before the first insert)
  int64_t entries = 0;
  std::vector<TableMemory> blocks;
  uint32_t next_record = 0;  // records [0, next_record) have been handed out
  std::vector<uint32_t> free_records;
  int64_t live = 0;
  uint64_t erasures = 0;  // keys erased so far (Walk: an erase may open an earlier empty entry)
  // Keys' room (index entries and records) that requests have reserved here and will use under
  // this lock alone (StoreMissing); MakeRoom keeps it for them.
  int64_t promised = 0;
  int64_t next_sweep_step = 0;
  std::vector<std::pair<int64_t, uint32_t>> erased;  // (key, generation), while tracked
  BudgetReservation reservation;  // blocks and index
};

DynamicShard::DynamicShard(VariableShardDef def) : def_(std::move(def)) {}

DynamicShard::~DynamicShard() = default;

absl::StatusOr<std::unique_ptr<DynamicShard>> DynamicShard::Create(const VariableShardDef& def,
                                                                   MemoryBudget* budget) {
  const std::string who = absl::StrCat("dynamic table shard \"", def.name(), "\"");
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", why));
  };
  if (def.name().empty()) return absl::InvalidArgumentError("shard definition with an empty name");
  if (!def.has_dynamic()) return invalid("not a dynamic table (no dynamic definition)");
  const DynamicTableDef& d = def.dynamic();
  if (def.dtype() != DT_FLOAT32) {
    return invalid(absl::StrCat("dtype ", DataType_Name(def.dtype()), " is not supported (float32)"));
  }
  if (d.dim() < 1 || d.dim() > (int64_t{1} << 20)) {
    return invalid(absl::StrCat("dim ", d.dim(), " must be in [1, 1048576]"));
  }
  if (def.full_shape_size() != 1 || def.full_shape(0) != d.dim()) {
    return invalid(absl::StrCat("full_shape must be [dim] = [", d.dim(), "]"));
  }
  if (def.row_offset() != 0 || def.num_rows() != 0) {
    return invalid("row_offset and num_rows must be 0 (a dynamic table has no row range)");
  }
  if (def.num_shards() < 1 || def.shard_index() < 0 || def.shard_index() >= def.num_shards()) {
    return invalid(absl::StrCat("shard_index ", def.shard_index(), " out of range for ",
                                def.num_shards(), " shards"));
  }
  if (d.admit_min_count() < 0 || d.admit_min_count() > 255) {
    return invalid(absl::StrCat("admit_min_count ", d.admit_min_count(), " must be in [0, 255]"));
  }
  if (!(d.admit_probability() >= 0 && d.admit_probability() <= 1)) {
    return invalid(absl::StrCat("admit_probability ", d.admit_probability(),
                                " must be in [0, 1]"));
  }
  if (d.admission_sketch_bytes() < 0 || d.admission_sketch_bytes() > (int64_t{1} << 32)) {
    return invalid(absl::StrCat("admission_sketch_bytes ", d.admission_sketch_bytes(),
                                " must be in [0, 4 GiB]"));
  }
  if (d.ttl_steps() < 0 || d.ttl_steps() >= (int64_t{1} << 31)) {
    return invalid(absl::StrCat("ttl_steps ", d.ttl_steps(), " must be in [0, 2^31)"));
  }
  if (d.max_rows() < 0 || d.max_bytes() < 0) {
    return invalid("max_rows and max_bytes must not be negative");
  }
  if (!std::isfinite(d.default_value())) return invalid("default_value must be finite");
  if (absl::Status s = ValidateInitializer(def.initializer()); !s.ok()) {
    return invalid(s.message());
  }

  std::unique_ptr<DynamicShard> shard(new DynamicShard(def));
  shard->dim_ = d.dim();
  if (def.has_optimizer()) {
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = Optimizer::Create(def.optimizer());
    if (!optimizer.ok()) return invalid(optimizer.status().message());
    shard->optimizer_ = std::move(*optimizer);
    *shard->def_.mutable_optimizer() = shard->optimizer_->def();
    shard->num_slots_ = shard->optimizer_->num_slots();
    for (int s = 0; s < shard->num_slots_; ++s) {
      shard->slot_init_.push_back(shard->optimizer_->slot_initial_value(s));
    }
  }
  shard->record_bytes_ = RecordStride(kHeaderBytes + 4 * shard->record_floats(),
                                      kHeaderBytes + 4 * shard->dim_);
  size_t small = 1;  // blocks 0..small-1 cover records [0, 2^(5 + small))
  while (small < 20 && (int64_t{1} << (kFirstBlockShift - 1 + small)) * shard->record_bytes_ <
                           kHugePage) {
    ++small;
  }
  shard->small_blocks_ = small;
  shard->small_records_ = uint32_t{1} << (kFirstBlockShift - 1 + small);
  shard->big_block_records_ =
      static_cast<uint32_t>(std::max<int64_t>(1, kBigBlockBytes / shard->record_bytes_));
  if (shard->big_block_records_ > 1) {
    shard->big_block_magic_ = ~uint64_t{0} / shard->big_block_records_ + 1;
  }
  int64_t capacity = d.max_rows();
  if (d.max_bytes() > 0) {
    const int64_t by_bytes = d.max_bytes() / (shard->record_bytes_ + kIndexBytesPerKey);
    if (by_bytes == 0) {
      return invalid(absl::StrCat("max_bytes ", d.max_bytes(), " is less than one key's ",
                                  shard->record_bytes_ + kIndexBytesPerKey, " bytes"));
    }
    capacity = capacity == 0 ? by_bytes : std::min(capacity, by_bytes);
  }
  if (capacity > 0) capacity = (capacity + def.num_shards() - 1) / def.num_shards();
  shard->capacity_ = capacity;
  shard->ttl_ = d.ttl_steps();
  shard->default_row_.assign(static_cast<size_t>(shard->dim_), d.default_value());
  shard->stripes_ = std::make_unique<Stripe[]>(kStripes);
  for (int s = 0; s < kStripes; ++s) shard->stripes_[s].reservation = BudgetReservation(budget);
  shard->sketch_reservation_ = BudgetReservation(budget);
  if (d.admit_min_count() > 1 || d.admit_probability() > 0) {
    int64_t bytes = d.admission_sketch_bytes() > 0 ? d.admission_sketch_bytes()
                                                   : kDefaultSketchBytes;
    bytes = std::max<int64_t>(kSketchRows, bytes / kSketchRows * kSketchRows);
    RETURN_IF_ERROR(shard->sketch_reservation_.Add(bytes, who));
    shard->sketch_.assign(static_cast<size_t>(bytes), 0);
  }
  return shard;
}

// ---- Records and the index of one stripe.

inline char* DynamicShard::Record(const Stripe& s, uint32_t r) const {
  size_t block;
  uint32_t offset;
  if (r < small_records_) {
    if (r < (1u << kFirstBlockShift)) {
      block = 0;
      offset = r;
    } else {
      const int width = 32 - __builtin_clz(r);  // r is in [2^(width-1), 2^width)
      block = static_cast<size_t>(width - kFirstBlockShift);
      offset = r - (1u << (width - 1));
    }
  } else {
    const uint32_t i = r - small_records_;
    // i / big_block_records_ without a division (Lemire, Kaser and Kurz's fastdiv).
    const uint32_t q = big_block_magic_ == 0
                           ? i
                           : static_cast<uint32_t>(
                                 (static_cast<unsigned __int128>(big_block_magic_) * i) >> 64);
    block = small_blocks_ + q;
    offset = i - q * big_block_records_;
  }
  return s.blocks[block].data() + static_cast<int64_t>(offset) * record_bytes_;
}

int64_t DynamicShard::BlockRecords(size_t block) const {
  if (block >= small_blocks_) return big_block_records_;
  return block == 0 ? (int64_t{1} << kFirstBlockShift)
                    : (int64_t{1} << (kFirstBlockShift - 1 + block));
}

inline bool DynamicShard::Probe(const Stripe& s, int64_t key, uint64_t hash, uint64_t* pos) const {
  if (s.index == nullptr) return false;
  const uint32_t tag = Tag(hash);
  for (uint64_t i = tag & s.mask;; i = (i + 1) & s.mask) {
    const uint64_t e = s.index[i];
    if (e == 0 || (EntryTag(e) == tag && Header(Record(s, EntryRecord(e)))->key == key)) {
      *pos = i;
      return e != 0;
    }
  }
}

template <typename Fn>
inline __attribute__((always_inline)) void DynamicShard::Walk(
    const Stripe& s, const int64_t* keys, const uint64_t* hashes, const int32_t* positions,
    int64_t n, int64_t record_prefix, Fn&& fn) const {
  if (s.index == nullptr) {  // nothing stored yet
    for (int64_t k = 0; k < n; ++k) fn(positions[k], uint64_t{0}, static_cast<char*>(nullptr));
    return;
  }
  // For position k, at k % kWalkRing: the index position stage 2 found (with kEmptyBit set if it
  // is the empty position that ends the key's probe sequence: the key is not held), and if not
  // empty, the entry there and its record; if empty, the stripe's erasures then.
  constexpr uint64_t kEmptyBit = uint64_t{1} << 63;
  uint64_t found[kWalkRing];
  uint64_t found_erasures[kWalkRing];
  uint64_t found_entry[kWalkRing];
  char* found_record[kWalkRing];
  const uint64_t* index = s.index;
  const uint64_t mask = s.mask;
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
        found_erasures[slot] = s.erasures;
        return;
      }
      if (EntryTag(e) == tag) {
        found[slot] = i;
        found_entry[slot] = e;
        found_record[slot] = Record(s, EntryRecord(e));
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
    // fn may have changed the index since stage 2 (its lock is held throughout): an insert fills
    // empty entries, an erase shifts entries back and may leave an empty entry before the one
    // found. The position is used only if it still holds the same entry, or is still empty with
    // no erase since; otherwise the key is probed afresh.
    const uint64_t e = s.index[pos];
    if ((f & kEmptyBit) != 0) {
      if (e == 0 && found_erasures[slot] == s.erasures) {
        fn(p, pos, static_cast<char*>(nullptr));
        continue;
      }
    } else if (e == found_entry[slot] && Header(found_record[slot])->key == keys[p]) {
      fn(p, pos, found_record[slot]);
      continue;
    }
    uint64_t probed = 0;
    char* record = Probe(s, keys[p], hashes[p], &probed) ? Record(s, EntryRecord(s.index[probed]))
                                                          : nullptr;
    fn(p, probed, record);
  }
}

absl::Status DynamicShard::MakeRoom(Stripe& s, int64_t new_keys) {
  if (new_keys <= 0) return absl::OkStatus();
  const std::string who = absl::StrCat("dynamic table shard \"", name(), "\"");
  // Room promised to requests that store keys under this stripe's lock alone (StoreMissing) is
  // kept for them.
  new_keys += s.promised;
  // The index: at most 3/4 full.
  const int64_t need_entries = s.entries + new_keys;
  int64_t capacity = s.index == nullptr ? 0 : static_cast<int64_t>(s.mask) + 1;
  int64_t grown = std::max(capacity, kMinIndex);
  while (need_entries * 4 > grown * 3) grown *= 2;
  // The blocks: enough records, free ones first.
  const int64_t fresh = std::max<int64_t>(0, new_keys - static_cast<int64_t>(s.free_records.size()));
  int64_t have = 0;
  for (size_t b = 0; b < s.blocks.size(); ++b) have += BlockRecords(b);
  if (static_cast<int64_t>(s.next_record) + fresh > int64_t{0xfffffffe}) {
    return absl::ResourceExhaustedError(
        absl::StrCat(who, ": a stripe can't hold more than 2^32 - 2 records"));
  }
  std::vector<int64_t> block_sizes;  // bytes of each new block
  int64_t block_bytes = 0;
  for (size_t b = s.blocks.size(); have < s.next_record + fresh; ++b) {
    const int64_t records = BlockRecords(b);
    int64_t bytes = records * record_bytes_;
    if (b >= small_blocks_) bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    block_sizes.push_back(bytes);
    block_bytes += bytes;
    have += records;
  }
  const int64_t index_bytes = grown != capacity ? grown * 8 : 0;
  RETURN_IF_ERROR(s.reservation.Add(block_bytes + index_bytes, who));
  for (int64_t bytes : block_sizes) {
    TableMemory block(static_cast<size_t>(bytes));
    if (block.data() == nullptr) {
      s.reservation.Remove(block_bytes + index_bytes);
      return absl::ResourceExhaustedError(
          absl::StrCat(who, ": out of memory for a block of ", bytes, " bytes"));
    }
    s.blocks.push_back(std::move(block));
  }
  if (grown != capacity) {
    TableMemory memory(static_cast<size_t>(grown * 8));
    if (memory.data() == nullptr) {
      s.reservation.Remove(index_bytes);
      return absl::ResourceExhaustedError(
          absl::StrCat(who, ": out of memory for an index of ", grown, " entries"));
    }
    uint64_t* index = reinterpret_cast<uint64_t*>(memory.data());  // zeroed
    const uint64_t mask = static_cast<uint64_t>(grown) - 1;
    for (int64_t i = 0; i < capacity; ++i) {
      const uint64_t e = s.index[i];
      if (e == 0) continue;
      uint64_t j = EntryTag(e) & mask;
      while (index[j] != 0) j = (j + 1) & mask;
      index[j] = e;
    }
    s.reservation.Remove(capacity * 8);
    s.index_memory = std::move(memory);
    s.index = index;
    s.mask = mask;
  }
  return absl::OkStatus();
}

char* DynamicShard::InsertAt(Stripe& s, int64_t key, uint64_t hash, uint64_t pos, uint32_t step,
                             uint32_t count, const DynamicOpContext& ctx) {
  uint32_t r;
  if (!s.free_records.empty()) {
    r = s.free_records.back();
    s.free_records.pop_back();
  } else {
    r = s.next_record++;
  }
  char* record = Record(s, r);
  RecordHeader* h = Header(record);
  h->key = key;
  h->step = step;
  h->count = count;
  h->generation = ctx.generation;
  h->live = 1;
  float* f = Floats(record);
  InitializeFloatForKey(def_.initializer(), key, dim_, f);
  for (int slot = 0; slot < num_slots_; ++slot) {
    std::fill(f + (slot + 1) * dim_, f + (slot + 2) * dim_, slot_init_[slot]);
  }
  s.index[pos] = Entry(hash, r);
  ++s.entries;
  ++s.live;
  return record;
}

void DynamicShard::EraseAt(Stripe& s, uint64_t pos, const DynamicOpContext& ctx) {
  const uint32_t r = EntryRecord(s.index[pos]);
  RecordHeader* h = Header(Record(s, r));
  if (ctx.track_erasures) s.erased.emplace_back(h->key, ctx.generation);
  h->live = 0;
  s.free_records.push_back(r);
  ++s.erasures;
  // Backward-shift deletion: entries after `pos` whose home is not in (i, j] move back, so every
  // probe sequence stays unbroken without tombstones.
  uint64_t i = pos;
  for (uint64_t j = (i + 1) & s.mask;; j = (j + 1) & s.mask) {
    const uint64_t e = s.index[j];
    if (e == 0) break;
    const uint64_t home = EntryTag(e) & s.mask;
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (!stays) {
      s.index[i] = e;
      i = j;
    }
  }
  s.index[i] = 0;
  --s.entries;
  --s.live;
}

void DynamicShard::SweepDueStripes(const DynamicOpContext& ctx) {
  if (ttl_ == 0) return;
  for (int i = 0; i < kStripes; ++i) {
    absl::MutexLock lock(&stripes_[i].mu);
    MaybeSweep(stripes_[i], ctx);
  }
}

void DynamicShard::MaybeSweep(Stripe& s, const DynamicOpContext& ctx) {
  if (ttl_ == 0) return;
  const int64_t now = step_.load(std::memory_order_relaxed);
  if (now < s.next_sweep_step) return;
  s.next_sweep_step = now + std::max<int64_t>(1, ttl_ / 8);
  for (uint32_t r = 0; r < s.next_record; ++r) {
    const RecordHeader* h = Header(Record(s, r));
    if (h->live == 0 || !Expired(h->step)) continue;
    uint64_t pos = 0;
    if (Probe(s, h->key, StripeHash(h->key), &pos)) {
      EraseAt(s, pos, ctx);
      evicted_ttl_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void DynamicShard::LockAll() const {
  for (int i = 0; i < kStripes; ++i) stripes_[i].mu.Lock();
}

void DynamicShard::UnlockAll() const {
  for (int i = kStripes - 1; i >= 0; --i) stripes_[i].mu.Unlock();
}

void DynamicShard::EvictLeastRecentlyUsed(int64_t target, const DynamicOpContext& ctx) {
  int64_t held = 0;
  for (int i = 0; i < kStripes; ++i) held += stripes_[i].live;
  if (held <= target) return;
  struct Candidate {
    uint32_t age;  // steps since its last step (larger: less recently used)
    uint32_t count;
    int64_t key;
    int stripe;
  };
  std::vector<Candidate> all;
  all.reserve(static_cast<size_t>(held));
  const uint32_t now = static_cast<uint32_t>(step_.load(std::memory_order_relaxed));
  for (int i = 0; i < kStripes; ++i) {
    const Stripe& s = stripes_[i];
    for (uint32_t r = 0; r < s.next_record; ++r) {
      const RecordHeader* h = Header(Record(s, r));
      if (h->live != 0) all.push_back({now - h->step, h->count, h->key, i});
    }
  }
  const auto first_to_go = [](const Candidate& a, const Candidate& b) {
    if (a.age != b.age) return a.age > b.age;
    if (a.count != b.count) return a.count < b.count;
    return a.key < b.key;
  };
  const size_t evict = static_cast<size_t>(held - std::max<int64_t>(0, target));
  std::nth_element(all.begin(), all.begin() + (evict - 1), all.end(), first_to_go);
  for (size_t k = 0; k < evict; ++k) {
    Stripe& s = stripes_[all[k].stripe];
    uint64_t pos = 0;
    if (Probe(s, all[k].key, StripeHash(all[k].key), &pos)) {
      const bool expired = Expired(Header(Record(s, EntryRecord(s.index[pos])))->step);
      EraseAt(s, pos, ctx);
      (expired ? evicted_ttl_ : evicted_capacity_).fetch_add(1, std::memory_order_relaxed);
    }
  }
}

// ---- Admission.

uint32_t DynamicShard::SketchCount(int64_t key) const {
  const uint64_t width = sketch_.size() / kSketchRows;
  uint32_t least = 255;
  for (int row = 0; row < kSketchRows; ++row) {
    const uint64_t at = MixKey(key ^ static_cast<int64_t>(0x51afd7ed558ccd00ULL * (row + 1))) % width;
    least = std::min<uint32_t>(least, sketch_[row * width + at]);
  }
  return least;
}

void DynamicShard::SketchAdd(int64_t key, uint32_t n) {
  // Conservative update: only the counters at the key's least count grow.
  const uint64_t width = sketch_.size() / kSketchRows;
  const uint32_t least = SketchCount(key);
  const uint32_t to = std::min<uint32_t>(255, least + n);
  for (int row = 0; row < kSketchRows; ++row) {
    const uint64_t at = MixKey(key ^ static_cast<int64_t>(0x51afd7ed558ccd00ULL * (row + 1))) % width;
    uint8_t& c = sketch_[row * width + at];
    if (c < to) c = static_cast<uint8_t>(to);
  }
}

bool DynamicShard::Admits(int64_t key, uint32_t occurrences) const {
  const DynamicTableDef& d = def_.dynamic();
  if (sketch_.empty()) return true;  // admission off (admit_min_count 0 or 1, no probability)
  const uint32_t before = SketchCount(key);
  if (d.admit_min_count() > 1 && before + occurrences >= static_cast<uint32_t>(d.admit_min_count())) {
    return true;
  }
  if (d.admit_probability() > 0) {
    for (uint32_t k = 1; k <= occurrences; ++k) {
      if (Draw(def_.initializer().seed(), static_cast<uint64_t>(key), before + k) <
          d.admit_probability()) {
        return true;
      }
    }
  }
  return false;
}

// ---- Steps and TTL.

uint32_t DynamicShard::EffectiveStep(const DynamicOpContext& ctx) const {
  return static_cast<uint32_t>(ctx.step > 0 ? ctx.step : step_.load(std::memory_order_relaxed));
}

bool DynamicShard::Expired(uint32_t record_step) const {
  return ttl_ > 0 &&
         static_cast<uint32_t>(static_cast<uint32_t>(step_.load(std::memory_order_relaxed)) -
                               record_step) > static_cast<uint32_t>(ttl_);
}

int64_t DynamicShard::FullStep(uint32_t record_step) const {
  // The step at most 2^31 away from the shard's whose low 32 bits are record_step.
  const int64_t now = step_.load(std::memory_order_relaxed);
  return now + static_cast<int32_t>(record_step - static_cast<uint32_t>(now));
}

void DynamicShard::AdvanceStep(int64_t step) {
  int64_t now = step_.load(std::memory_order_relaxed);
  while (step > now && !step_.compare_exchange_weak(now, step, std::memory_order_relaxed)) {
  }
}

// ---- Operations.

absl::Status DynamicShard::PrepareKeys(absl::string_view bytes, absl::string_view what,
                                       KeyBatch* batch) const {
  if (bytes.size() % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("dynamic table shard \"", name(), "\": ", what,
                                                   " keys are ", bytes.size(),
                                                   " bytes, not whole int64s"));
  }
  const int64_t n = static_cast<int64_t>(bytes.size() / 8);
  batch->keys.resize(static_cast<size_t>(n));
  batch->hashes.resize(static_cast<size_t>(n));
  if (n > 0) std::memcpy(batch->keys.data(), bytes.data(), static_cast<size_t>(n) * 8);
  // The shard's keys are those whose routing hash (the hash's top 32 bits) is in its range.
  const int num_shards = def_.num_shards();
  const std::pair<uint64_t, uint64_t> range = RoutingHashRange(def_.shard_index(), num_shards);
  int64_t count[kStripes] = {};
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t h = StripeHash(batch->keys[i]);
    if ((h >> 32) < range.first || (h >> 32) >= range.second) {
      const int64_t key = batch->keys[i];
      return absl::InvalidArgumentError(absl::StrCat(
          "dynamic table shard \"", name(), "\": ", what, " key ", key, " (position ", i,
          ") belongs to shard ", ShardOfKey(key, num_shards), " of table \"", def_.variable(),
          "\"'s ", num_shards, ", not to this one (shard ", def_.shard_index(), ")"));
    }
    batch->hashes[i] = h;
    ++count[StripeOf(h)];
  }
  Groups& groups = batch->groups;
  int64_t next[kStripes];
  groups.begin[0] = 0;
  for (int i = 0; i < kStripes; ++i) {
    next[i] = groups.begin[i];
    groups.begin[i + 1] = groups.begin[i] + count[i];
  }
  groups.positions.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    groups.positions[next[StripeOf(batch->hashes[i])]++] = static_cast<int32_t>(i);
  }
  return absl::OkStatus();
}

absl::Status DynamicShard::ValidateKeys(absl::string_view keys, absl::string_view what) const {
  KeyBatch batch;
  return PrepareKeys(keys, what, &batch);
}

void DynamicShard::ForEachStripe(const Groups& groups, ThreadPool* pool,
                                 const std::function<void(int)>& fn) const {
  int busy[kStripes];
  int num_busy = 0;
  for (int i = 0; i < kStripes; ++i) {
    if (groups.size(i) > 0) busy[num_busy++] = i;
  }
  if (num_busy == 0) return;
  // Small requests on this thread alone: waking a helper costs more than it saves.
  if (groups.begin[kStripes] < 4096) pool = nullptr;
  const int workers = pool == nullptr ? 1 : std::min(num_busy, 1 + pool->num_threads());
  // Each worker (the caller, and the pool's threads that join in time) takes stripes the request
  // hasn't run yet, one at a time, preferring one whose lock no other request holds now: requests
  // running side by side then walk different stripes, where taking the stripes in the same order
  // queued them on the same lock in step (a sleep and a wake-up each time). Workers, and
  // requests (a counter), start at different stripes.
  std::atomic<bool> claimed[kStripes];
  for (int k = 0; k < num_busy; ++k) claimed[k].store(false, std::memory_order_relaxed);
  const int start = static_cast<int>(next_start_.fetch_add(1, std::memory_order_relaxed) %
                                     static_cast<uint32_t>(num_busy));
  ParallelFor(pool, workers, [&](int64_t worker) {
    const int first = start + static_cast<int>(worker) * num_busy / workers;
    for (;;) {
      int chosen = -1;
      bool unclaimed = false;
      for (int j = 0; j < num_busy && chosen < 0; ++j) {
        const int k = (first + j) % num_busy;
        if (claimed[k].load(std::memory_order_relaxed)) continue;
        unclaimed = true;
        absl::Mutex& mu = stripes_[busy[k]].mu;
        if (!mu.TryLock()) continue;
        if (claimed[k].exchange(true)) {
          mu.Unlock();  // another worker of this request took it meanwhile
        } else {
          chosen = k;
        }
      }
      if (chosen < 0) {
        if (!unclaimed) return;
        // Every stripe left is held by another request: wait for the first one.
        for (int j = 0; j < num_busy && chosen < 0; ++j) {
          const int k = (first + j) % num_busy;
          if (!claimed[k].exchange(true)) {
            stripes_[busy[k]].mu.Lock();
            chosen = k;
          }
        }
        if (chosen < 0) return;
      }
      fn(busy[chosen]);
      stripes_[busy[chosen]].mu.Unlock();
    }
  });
}

int64_t DynamicShard::Find(const int64_t* keys, const uint64_t* hashes, const Groups& groups,
                           bool sighting, bool may_sweep, const DynamicOpContext& ctx,
                           std::vector<uint8_t>* found, char* out, ThreadPool* pool) {
  const int64_t rb = row_bytes();
  const uint32_t step = EffectiveStep(ctx);
  std::atomic<int64_t> found_count{0};
  ForEachStripe(groups, pool, [&](int stripe) {
    Stripe& s = stripes_[stripe];
    if (s.index == nullptr) return;  // nothing stored yet: every key is missing
    int64_t here = 0;
    Walk(s, keys, hashes, groups.of(stripe), groups.size(stripe), kHeaderBytes + rb,
         [&](int32_t p, uint64_t pos, char* record) __attribute__((always_inline)) {
           if (record == nullptr) return;
           RecordHeader* h = Header(record);
           if (Expired(h->step)) {
             if (may_sweep) {
               EraseAt(s, pos, ctx);
               evicted_ttl_.fetch_add(1, std::memory_order_relaxed);
             }
             return;
           }
           if (sighting) CountSighting(h, step, ctx.generation);
           // Copied now, under the stripe's lock: once it is released the record may be evicted.
           if (out != nullptr) CopyRow(out + p * rb, Floats(record), rb);
           (*found)[p] = 1;
           ++here;
         });
    found_count.fetch_add(here, std::memory_order_relaxed);
  });
  return found_count.load(std::memory_order_relaxed);
}

DynamicShard::Groups DynamicShard::ByStripe(const uint64_t* hashes, const int32_t* positions,
                                           size_t count) {
  Groups groups;
  int64_t stripe_count[kStripes] = {};
  for (size_t i = 0; i < count; ++i) ++stripe_count[StripeOf(hashes[positions[i]])];
  int64_t next[kStripes];
  for (int i = 0; i < kStripes; ++i) {
    next[i] = groups.begin[i];
    groups.begin[i + 1] = groups.begin[i] + stripe_count[i];
  }
  groups.positions.resize(count);
  for (size_t i = 0; i < count; ++i) {
    groups.positions[next[StripeOf(hashes[positions[i]])]++] = positions[i];
  }
  return groups;
}

void DynamicShard::StoreWalk(Stripe& s, const int64_t* keys, const uint64_t* hashes,
                             const int32_t* positions, int64_t n, bool sighting,
                             const DynamicOpContext& ctx, std::vector<char*>* records,
                             char* out) {
  const int64_t rb = row_bytes();
  const uint32_t step = EffectiveStep(ctx);
  int64_t inserted = 0;
  // One walk finds or stores each key: a key another request stored since this one looked (or
  // that repeats one stored just before) counts a sighting; an expired one is stored afresh.
  Walk(s, keys, hashes, positions, n, kHeaderBytes,
       [&](int32_t p, uint64_t pos, char* record) __attribute__((always_inline)) {
         if (record != nullptr) {
           RecordHeader* h = Header(record);
           if (!Expired(h->step)) {
             if (sighting) CountSighting(h, step, ctx.generation);
             if (records != nullptr) (*records)[p] = record;
             if (out != nullptr) CopyRow(out + p * rb, Floats(record), rb);
             return;
           }
           EraseAt(s, pos, ctx);
           evicted_ttl_.fetch_add(1, std::memory_order_relaxed);
           Probe(s, keys[p], hashes[p], &pos);  // now missing: the empty position
         }
         record = InsertAt(s, keys[p], hashes[p], pos, step, sighting ? 1 : 0, ctx);
         if (records != nullptr) (*records)[p] = record;
         // Copied while the row is in cache, just written.
         if (out != nullptr) CopyRow(out + p * rb, Floats(record), rb);
         ++inserted;
       });
  admitted_.fetch_add(inserted, std::memory_order_relaxed);
}

absl::Status DynamicShard::InsertMissingUnbounded(const int64_t* keys, const uint64_t* hashes,
                                                  const std::vector<int32_t>& missing,
                                                  bool sighting, const DynamicOpContext& ctx,
                                                  std::vector<char*>* records, char* out,
                                                  ThreadPool* pool) {
  const Groups groups = ByStripe(hashes, missing.data(), missing.size());
  // Memory first, for every position (some may be held by now, or repeat another: room to spare
  // stays reserved for later inserts), so that a failure stores nothing.
  for (int i = 0; i < kStripes; ++i) RETURN_IF_ERROR(MakeRoom(stripes_[i], groups.size(i)));
  int busy[kStripes];
  int num_busy = 0;
  for (int i = 0; i < kStripes; ++i) {
    if (groups.size(i) > 0) busy[num_busy++] = i;
  }
  // Every stripe is locked by the caller: a stripe per piece, on the pool's threads too.
  ParallelFor(missing.size() < 4096 ? nullptr : pool, num_busy, [&](int64_t piece) {
    const int stripe = busy[piece];
    StoreWalk(stripes_[stripe], keys, hashes, groups.of(stripe), groups.size(stripe), sighting,
              ctx, records, out);
  });
  return absl::OkStatus();
}

absl::Status DynamicShard::StoreMissing(const KeyBatch& batch, const std::vector<int32_t>& missing,
                                        const DynamicOpContext& ctx, char* out,
                                        ThreadPool* pool) {
  const Groups groups = ByStripe(batch.hashes.data(), missing.data(), missing.size());
  // Room first, in every stripe the keys go to, each under its own lock: reserved (MakeRoom) and
  // promised to this request, so that no other request's inserts take it before this one runs;
  // if any stripe can't make room, nothing is stored and the promises are taken back.
  absl::Status room;
  int made = 0;
  for (; made < kStripes; ++made) {
    if (groups.size(made) == 0) continue;
    Stripe& s = stripes_[made];
    absl::MutexLock lock(&s.mu);
    room = MakeRoom(s, groups.size(made));
    if (!room.ok()) break;
    s.promised += groups.size(made);
  }
  if (!room.ok()) {
    for (int i = 0; i < made; ++i) {
      if (groups.size(i) == 0) continue;
      absl::MutexLock lock(&stripes_[i].mu);
      stripes_[i].promised -= groups.size(i);
    }
    return room;
  }
  ForEachStripe(groups, pool, [&](int stripe) {
    Stripe& s = stripes_[stripe];
    s.promised -= groups.size(stripe);  // used now, under the same lock
    StoreWalk(s, batch.keys.data(), batch.hashes.data(), groups.of(stripe), groups.size(stripe),
              /*sighting=*/true, ctx, /*records=*/nullptr, out);
  });
  return absl::OkStatus();
}

absl::Status DynamicShard::InsertMissing(const int64_t* keys, const uint64_t* hashes,
                                         const std::vector<int32_t>& missing, bool admission,
                                         bool sighting, const DynamicOpContext& ctx,
                                         std::vector<char*>* records, char* out,
                                         ThreadPool* pool) {
  const uint32_t step = EffectiveStep(ctx);
  // Every stripe is locked by the caller: pieces of the work can run on the pool's threads, one
  // stripe each, as long as each stays in its stripe.
  auto each_stripe = [&](const Groups& groups, const std::function<void(int stripe)>& fn) {
    int busy[kStripes];
    int num_busy = 0;
    for (int i = 0; i < kStripes; ++i) {
      if (groups.size(i) > 0) busy[num_busy++] = i;
    }
    ParallelFor(groups.begin[kStripes] < 4096 ? nullptr : pool, num_busy,
                [&](int64_t k) { fn(busy[k]); });
  };

  if ((!admission || sketch_.empty()) && capacity_ == 0) {
    return InsertMissingUnbounded(keys, hashes, missing, sighting, ctx, records, out, pool);
  }

  // 1. Which positions are still missing (another request may have stored some meanwhile): a
  //    probe per position, prefetched, a stripe per piece. state[p]: 1 held now, 2 missing.
  std::vector<uint8_t> state(records->size(), 0);
  const Groups missing_by_stripe = ByStripe(hashes, missing.data(), missing.size());
  each_stripe(missing_by_stripe, [&](int stripe) {
    Stripe& s = stripes_[stripe];
    Walk(s, keys, hashes, missing_by_stripe.of(stripe), missing_by_stripe.size(stripe),
         kHeaderBytes,
         [&](int32_t p, uint64_t pos, char* record) __attribute__((always_inline)) {
           state[p] = 2;
           if (record == nullptr) return;
           RecordHeader* h = Header(record);
           if (Expired(h->step)) {
             EraseAt(s, pos, ctx);  // expired: stored afresh below
             evicted_ttl_.fetch_add(1, std::memory_order_relaxed);
             return;
           }
           if (sighting) CountSighting(h, step, ctx.generation);
           state[p] = 1;
         });
  });

  // 2. The missing keys, each once (at its first position, with how often it occurs).
  struct NewKey {
    int32_t first;
    uint32_t occurrences;
    bool admitted;
  };
  std::vector<NewKey> fresh;
  std::vector<int32_t> later;     // positions repeating a fresh key
  std::vector<int32_t> later_of;  // ... and which
  std::vector<int32_t> present;   // positions whose key is held now
  {
    std::vector<int32_t> still;
    still.reserve(missing.size());
    for (int32_t p : missing) {
      if (state[p] == 1) {
        present.push_back(p);
      } else {
        still.push_back(p);
      }
    }
    std::vector<int64_t> still_keys(still.size());
    for (size_t i = 0; i < still.size(); ++i) still_keys[i] = keys[still[i]];
    const std::vector<RepeatFinder::Repeat>& repeats = ThreadRepeatFinder().Find(
        reinterpret_cast<const char*>(still_keys.data()), static_cast<int64_t>(still.size()));
    std::vector<int32_t> fresh_of(still.size(), -1);
    fresh.reserve(still.size());
    auto repeat = repeats.begin();
    for (size_t i = 0; i < still.size(); ++i) {
      if (repeat != repeats.end() && repeat->later == static_cast<int64_t>(i)) {
        const int32_t f = fresh_of[repeat->first];
        ++fresh[f].occurrences;
        fresh_of[i] = f;
        later.push_back(still[i]);
        later_of.push_back(f);
        ++repeat;
        continue;
      }
      fresh_of[i] = static_cast<int32_t>(fresh.size());
      fresh.push_back({still[i], 1, true});
    }
  }

  // 3. Which keys are stored: admission, then the capacity (the first `capacity` new keys win).
  int64_t to_store = 0;
  for (NewKey& k : fresh) {
    k.admitted = !admission || Admits(keys[k.first], k.occurrences);
    if (k.admitted && capacity_ > 0 && to_store >= capacity_) k.admitted = false;
    if (k.admitted) ++to_store;
  }
  // 4. Room: evictions first (they stand even if the memory below can't be had), then memory for
  //    every stripe, so that a failure stores nothing and counts nothing.
  int64_t held = 0;
  for (int i = 0; i < kStripes; ++i) held += stripes_[i].live;
  if (capacity_ > 0 && held + to_store > capacity_) {
    EvictLeastRecentlyUsed(capacity_ - capacity_ / 16 - to_store, ctx);
  }
  std::vector<int32_t> stored;  // first positions of the keys to store
  stored.reserve(static_cast<size_t>(to_store));
  int64_t per_stripe[kStripes] = {};
  for (const NewKey& k : fresh) {
    if (!k.admitted) continue;
    stored.push_back(k.first);
    ++per_stripe[StripeOf(hashes[k.first])];
  }
  for (int i = 0; i < kStripes; ++i) {
    // Memory kept by the stripes that did make room stays reserved for their next inserts.
    RETURN_IF_ERROR(MakeRoom(stripes_[i], per_stripe[i]));
  }
  // 5. Store: the sketch counts the keys turned away; the rest are inserted, a stripe per piece.
  std::vector<uint32_t> occurrences(records->size(), 0);
  for (const NewKey& k : fresh) {
    if (k.admitted) {
      occurrences[k.first] = k.occurrences;
    } else if (admission) {
      SketchAdd(keys[k.first], k.occurrences);
      rejected_.fetch_add(k.occurrences, std::memory_order_relaxed);
    }
  }
  const Groups stored_by_stripe = ByStripe(hashes, stored.data(), stored.size());
  each_stripe(stored_by_stripe, [&](int stripe) {
    Stripe& s = stripes_[stripe];
    const int64_t stored_here = stored_by_stripe.size(stripe);
    // Each key is missing (and each once): Walk gives the empty position where it goes.
    Walk(s, keys, hashes, stored_by_stripe.of(stripe), stored_here, /*record_prefix=*/0,
         [&](int32_t p, uint64_t pos, char* /*held: never*/) __attribute__((always_inline)) {
           (*records)[p] =
               InsertAt(s, keys[p], hashes[p], pos, step, sighting ? occurrences[p] : 0, ctx);
         });
    admitted_.fetch_add(stored_here, std::memory_order_relaxed);
  });
  for (size_t i = 0; i < later.size(); ++i) {
    (*records)[later[i]] = (*records)[fresh[later_of[i]].first];
  }
  // Keys that were present: their records now (an eviction above may have taken one, if the
  // capacity is so small that even keys of this step had to go: it then reads as missing).
  for (int32_t p : present) {
    Stripe& s = stripes_[StripeOf(hashes[p])];
    uint64_t pos = 0;
    if (Probe(s, keys[p], hashes[p], &pos)) (*records)[p] = Record(s, EntryRecord(s.index[pos]));
  }
  if (out != nullptr) {
    const int64_t rb = row_bytes();
    for (int32_t p : missing) {
      if ((*records)[p] != nullptr) CopyRow(out + p * rb, Floats((*records)[p]), rb);
    }
  }
  return absl::OkStatus();
}

absl::Status DynamicShard::Lookup(absl::string_view keys, bool insert, const DynamicOpContext& ctx,
                                  char* out, ThreadPool* pool) {
  KeyBatch batch;
  RETURN_IF_ERROR(PrepareKeys(keys, "lookup", &batch));
  return Lookup(batch, insert, ctx, out, pool);
}

absl::Status DynamicShard::Lookup(const KeyBatch& batch, bool insert, const DynamicOpContext& ctx,
                                  char* out, ThreadPool* pool) {
  const int64_t n = batch.size();
  if (insert) {
    AdvanceStep(ctx.step);
    SweepDueStripes(ctx);
  }
  const std::vector<int64_t>& keys = batch.keys;
  const std::vector<uint64_t>& hashes = batch.hashes;
  const Groups& groups = batch.groups;
  std::vector<uint8_t> found(n, 0);  // bytes: pieces on other threads write their own
  if (Find(keys.data(), hashes.data(), groups, /*sighting=*/insert, /*may_sweep=*/insert, ctx,
           &found, out, pool) == n) {
    return absl::OkStatus();
  }
  std::vector<int32_t> missing;
  for (int64_t i = 0; i < n; ++i) {
    if (!found[i]) missing.push_back(static_cast<int32_t>(i));
  }
  if (insert && sketch_.empty() && capacity_ == 0) {
    // No key can be turned away: stored under each stripe's lock alone, beside other requests.
    return StoreMissing(batch, missing, ctx, out, pool);
  }
  const int64_t rb = row_bytes();
  std::vector<char*> records(n, nullptr);
  if (insert) {
    LockAll();
    absl::Status inserted = InsertMissing(keys.data(), hashes.data(), missing, /*admission=*/true,
                                          /*sighting=*/true, ctx, &records, out, pool);
    UnlockAll();
    RETURN_IF_ERROR(inserted);
  }
  for (int32_t p : missing) {
    if (records[p] == nullptr) CopyRow(out + p * rb, default_row_.data(), rb);
  }
  return absl::OkStatus();
}

absl::Status DynamicShard::ValidateUpdate(const UpdateOpView& op, KeyBatch* batch) const {
  const std::string who = absl::StrCat("dynamic table shard \"", name(), "\"");
  if (op.kind != UpdateOp::ASSIGN && op.kind != UpdateOp::ASSIGN_ADD &&
      op.kind != UpdateOp::APPLY_GRADIENT && op.kind != UpdateOp::ERASE) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": unknown update kind ", static_cast<int>(op.kind)));
  }
  if (!op.sparse) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": updates name keys; a row range is not allowed"));
  }
  RETURN_IF_ERROR(PrepareKeys(op.ids, UpdateOp::Kind_Name(op.kind), batch));
  const int64_t n = static_cast<int64_t>(op.ids.size() / 8);
  if (op.kind == UpdateOp::ERASE) {
    if (op.values_bytes != 0) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": ERASE takes no values"));
    }
    return absl::OkStatus();
  }
  if (op.dtype != DT_FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": values are ", DataType_Name(op.dtype),
                                                   " but the table is float32"));
  }
  if (op.kind == UpdateOp::APPLY_GRADIENT && optimizer_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": the table has no optimizer"));
  }
  if (op.values_bytes != n * row_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": ", op.values_bytes, " bytes of values for ", n, " keys of ", dim_,
        " float32 (", n * row_bytes(), " bytes); wrong width?"));
  }
  return absl::OkStatus();
}

absl::Status DynamicShard::ValidateUpdate(const UpdateOpView& op) const {
  KeyBatch batch;
  return ValidateUpdate(op, &batch);
}

absl::Status DynamicShard::Update(const UpdateOpView& op, const DynamicOpContext& ctx,
                                  ThreadPool* pool) {
  KeyBatch batch;
  RETURN_IF_ERROR(PrepareKeys(op.ids, UpdateOp::Kind_Name(op.kind), &batch));
  return Update(op, batch, ctx, pool);
}

absl::Status DynamicShard::Update(const UpdateOpView& op, const KeyBatch& batch,
                                  const DynamicOpContext& ctx, ThreadPool* pool) {
  const int64_t n = batch.size();
  AdvanceStep(ctx.step);
  SweepDueStripes(ctx);
  const std::vector<int64_t>& keys = batch.keys;
  const std::vector<uint64_t>& hashes = batch.hashes;
  const Groups& by_stripe = batch.groups;
  const uint32_t step = EffectiveStep(ctx);

  if (op.kind == UpdateOp::ERASE) {
    ForEachStripe(by_stripe, /*pool=*/nullptr, [&](int stripe) {
      Stripe& s = stripes_[stripe];
      int64_t erased = 0;
      Walk(s, keys.data(), hashes.data(), by_stripe.of(stripe), by_stripe.size(stripe),
           /*record_prefix=*/kHeaderBytes,
           [&](int32_t /*p*/, uint64_t pos, char* record) __attribute__((always_inline)) {
             if (record == nullptr) return;
             EraseAt(s, pos, ctx);
             ++erased;
           });
      erased_.fetch_add(erased, std::memory_order_relaxed);
    });
    return absl::OkStatus();
  }

  const ValueRows rows(op.values, row_bytes());
  const std::vector<const char*> src = rows.RowAddresses();

  if (op.kind == UpdateOp::APPLY_GRADIENT) {
    const int64_t t = apply_count_.fetch_add(1) + 1;
    const StepScalars scalars = optimizer_->Prepare(t, ctx.step > 0 ? ctx.step - 1 : t - 1);
    // Repeated keys are summed first (as TF's sparse apply): the optimizer sees each key once.
    std::vector<const UnalignedFloat*> grad(n);
    for (int64_t i = 0; i < n; ++i) grad[i] = reinterpret_cast<const UnalignedFloat*>(src[i]);
    std::vector<float> sums;
    const std::vector<RepeatFinder::Repeat>& repeats =
        ThreadRepeatFinder().Find(op.ids.data(), n);
    if (!repeats.empty()) {
      absl::flat_hash_map<int64_t, int64_t> sum_of;  // first position -> its row in `sums`
      for (const RepeatFinder::Repeat& r : repeats) sum_of.emplace(r.first, 0);
      sums.resize(sum_of.size() * dim_);
      int64_t next = 0;
      for (auto& [first, row] : sum_of) {
        row = next++;
        std::memcpy(sums.data() + row * dim_, src[first], row_bytes());
      }
      for (const RepeatFinder::Repeat& r : repeats) {
        float* sum = sums.data() + sum_of[r.first] * dim_;
        for (int64_t k = 0; k < dim_; ++k) sum[k] += grad[r.later][k];
        grad[r.later] = nullptr;
      }
      for (const auto& [first, row] : sum_of) grad[first] = sums.data() + row * dim_;
    }
    std::vector<char*> records(n, nullptr);
    ForEachStripe(by_stripe, pool, [&](int stripe) {
      Stripe& s = stripes_[stripe];
      if (s.index == nullptr) {
        dropped_gradients_.fetch_add(by_stripe.size(stripe),
                                     std::memory_order_relaxed);
        return;
      }
      Walk(s, keys.data(), hashes.data(), by_stripe.of(stripe), by_stripe.size(stripe),
           record_bytes_,
           [&](int32_t p, uint64_t /*pos*/, char* record) __attribute__((always_inline)) {
             if (grad[p] == nullptr) return;  // a repeat, summed into its first position
             if (record == nullptr || Expired(Header(record)->step)) {
               dropped_gradients_.fetch_add(1, std::memory_order_relaxed);
               return;
             }
             RecordHeader* h = Header(record);
             Touch(&h->step, step);
             h->generation = ctx.generation;
             float* var = Floats(record);
             float* slot_rows[4];
             for (int slot = 0; slot < num_slots_; ++slot) {
               slot_rows[slot] = var + (slot + 1) * dim_;
             }
             optimizer_->ApplyRow(var, slot_rows, grad[p], dim_, scalars);
           });
    });
    return absl::OkStatus();
  }

  // ASSIGN / ASSIGN_ADD: keys not held are stored first (no admission), then written in position
  // order (with repeated keys the last assign wins; assign-adds add up), every stripe locked.
  LockAll();
  std::vector<char*> records(n, nullptr);
  std::vector<int32_t> missing;
  for (int64_t i = 0; i < n; ++i) {
    Stripe& s = stripes_[StripeOf(hashes[i])];
    uint64_t pos = 0;
    if (!Probe(s, keys[i], hashes[i], &pos) ||
        Expired(Header(Record(s, EntryRecord(s.index[pos])))->step)) {
      missing.push_back(static_cast<int32_t>(i));
    }
  }
  absl::Status inserted = InsertMissing(keys.data(), hashes.data(), missing, /*admission=*/false,
                                        /*sighting=*/false, ctx, &records, /*out=*/nullptr, pool);
  if (inserted.ok()) {
    for (int64_t i = 0; i < n; ++i) {
      // Every key's record now (inserting may have evicted keys to make room).
      Stripe& s = stripes_[StripeOf(hashes[i])];
      uint64_t pos = 0;
      records[i] = Probe(s, keys[i], hashes[i], &pos) ? Record(s, EntryRecord(s.index[pos])) : nullptr;
      if (records[i] == nullptr) continue;  // a capacity smaller than the keys assigned
      RecordHeader* h = Header(records[i]);
      Touch(&h->step, step);
      h->generation = ctx.generation;
      float* row = Floats(records[i]);
      const UnalignedFloat* v = reinterpret_cast<const UnalignedFloat*>(src[i]);
      if (op.kind == UpdateOp::ASSIGN) {
        for (int64_t k = 0; k < dim_; ++k) row[k] = v[k];
      } else {
        for (int64_t k = 0; k < dim_; ++k) row[k] += v[k];
      }
    }
  }
  UnlockAll();
  return inserted;
}

absl::Status DynamicShard::Export(absl::string_view cursor, int64_t max_keys, bool with_slots,
                                  ExportResponse* response) const {
  int stripe = 0;
  uint32_t record = 0;
  if (!cursor.empty()) {
    uint64_t v = 0;
    if (cursor.size() != sizeof(v)) {
      return absl::InvalidArgumentError(absl::StrCat("export of \"", name(), "\": a cursor of ",
                                                     cursor.size(), " bytes (not from Export)"));
    }
    std::memcpy(&v, cursor.data(), sizeof(v));
    stripe = static_cast<int>(v >> 32);
    record = static_cast<uint32_t>(v);
    if (stripe >= kStripes) {
      return absl::InvalidArgumentError(
          absl::StrCat("export of \"", name(), "\": a malformed cursor (stripe ", stripe, ")"));
    }
  }
  if (max_keys <= 0) max_keys = kDefaultExportKeys;
  int64_t emitted = 0;
  const int64_t rb = row_bytes();
  for (; stripe < kStripes; ++stripe, record = 0) {
    const Stripe& s = stripes_[stripe];
    absl::MutexLock lock(&s.mu);
    for (; record < s.next_record; ++record) {
      if (emitted == max_keys) {
        response->set_next_cursor(EncodeCursor(stripe, record));
        return absl::OkStatus();
      }
      const char* r = Record(s, record);
      const RecordHeader* h = Header(r);
      if (h->live == 0 || Expired(h->step)) continue;
      response->mutable_keys()->append(reinterpret_cast<const char*>(&h->key), 8);
      response->mutable_values()->append(reinterpret_cast<const char*>(Floats(r)), rb);
      if (with_slots) {
        response->mutable_slots()->append(reinterpret_cast<const char*>(Floats(r) + dim_),
                                          rb * num_slots_);
      }
      response->mutable_counts()->append(reinterpret_cast<const char*>(&h->count), 4);
      const int64_t full_step = FullStep(h->step);
      response->mutable_steps()->append(reinterpret_cast<const char*>(&full_step), 8);
      ++emitted;
    }
  }
  response->clear_next_cursor();
  return absl::OkStatus();
}

int DynamicShard::StripeOfKey(int64_t key) { return StripeOf(StripeHash(key)); }

int64_t DynamicShard::Size() const {
  int64_t held = 0;
  for (int i = 0; i < kStripes; ++i) {
    const Stripe& s = stripes_[i];
    absl::MutexLock lock(&s.mu);
    if (ttl_ == 0) {
      held += s.live;
      continue;
    }
    for (uint32_t r = 0; r < s.next_record; ++r) {
      const RecordHeader* h = Header(Record(s, r));
      if (h->live != 0 && !Expired(h->step)) ++held;
    }
  }
  return held;
}

int64_t DynamicShard::BytesHeld() const {
  int64_t bytes = sketch_reservation_.bytes();
  for (int i = 0; i < kStripes; ++i) {
    const Stripe& s = stripes_[i];
    absl::MutexLock lock(&s.mu);
    bytes += s.reservation.bytes() +
             static_cast<int64_t>(s.erased.capacity() * sizeof(s.erased[0]) +
                                  s.free_records.capacity() * sizeof(uint32_t));
  }
  return bytes;
}

DynamicShardStats DynamicShard::Stats() const {
  DynamicShardStats stats;
  stats.set_shard(name());
  stats.set_keys(Size());
  stats.set_bytes(BytesHeld());
  stats.set_admitted(admitted_.load());
  stats.set_rejected(rejected_.load());
  stats.set_evicted_ttl(evicted_ttl_.load());
  stats.set_evicted_capacity(evicted_capacity_.load());
  stats.set_erased(erased_.load());
  stats.set_dropped_gradients(dropped_gradients_.load());
  stats.set_step(step_.load());
  return stats;
}

// ---- Checkpoints.

void DynamicShard::ForEachRecord(uint32_t since,
                                 const std::function<void(const DynamicRecordView&)>& fn) const {
  for (int i = 0; i < kStripes; ++i) {
    const Stripe& s = stripes_[i];
    absl::MutexLock lock(&s.mu);
    for (uint32_t r = 0; r < s.next_record; ++r) {
      const char* record = Record(s, r);
      const RecordHeader* h = Header(record);
      if (h->live == 0 || Expired(h->step) || (since > 0 && h->generation <= since)) continue;
      DynamicRecordView view;
      view.key = h->key;
      view.step = FullStep(h->step);
      view.count = h->count;
      view.generation = h->generation;
      view.data = Floats(record);
      fn(view);
    }
  }
}

std::vector<int64_t> DynamicShard::ErasedSince(uint32_t since) const {
  std::vector<int64_t> keys;
  for (int i = 0; i < kStripes; ++i) {
    const Stripe& s = stripes_[i];
    absl::MutexLock lock(&s.mu);
    for (const auto& [key, generation] : s.erased) {
      if (generation <= since) continue;
      uint64_t pos = 0;
      if (Probe(s, key, StripeHash(key), &pos)) continue;  // stored again since
      keys.push_back(key);
    }
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

void DynamicShard::ForgetErasuresThrough(uint32_t through) {
  for (int i = 0; i < kStripes; ++i) {
    Stripe& s = stripes_[i];
    absl::MutexLock lock(&s.mu);
    s.erased.erase(std::remove_if(s.erased.begin(), s.erased.end(),
                                  [through](const std::pair<int64_t, uint32_t>& e) {
                                    return e.second <= through;
                                  }),
                   s.erased.end());
  }
}

absl::Status DynamicShard::PutRecord(const DynamicRecord& record) {
  if (static_cast<int64_t>(record.data.size()) != record_floats()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dynamic table shard \"", name(), "\": a saved record of key ", record.key, " has ",
        record.data.size(), " floats, expected ", record_floats()));
  }
  if (ShardOfKey(record.key, def_.num_shards()) != def_.shard_index()) {
    return absl::InvalidArgumentError(absl::StrCat("dynamic table shard \"", name(), "\": key ",
                                                   record.key, " is not this shard's"));
  }
  AdvanceStep(record.step);
  const uint64_t hash = StripeHash(record.key);
  Stripe& s = stripes_[StripeOf(hash)];
  absl::MutexLock lock(&s.mu);
  uint64_t pos = 0;
  char* r = nullptr;
  if (Probe(s, record.key, hash, &pos)) {
    r = Record(s, EntryRecord(s.index[pos]));
  } else {
    RETURN_IF_ERROR(MakeRoom(s, 1));
    Probe(s, record.key, hash, &pos);
    r = InsertAt(s, record.key, hash, pos, 0, 0, DynamicOpContext());
  }
  RecordHeader* h = Header(r);
  h->step = static_cast<uint32_t>(record.step);
  h->count = record.count;
  h->generation = 0;  // restored: older than any save that follows
  std::memcpy(Floats(r), record.data.data(), record.data.size() * sizeof(float));
  return absl::OkStatus();
}

void DynamicShard::EraseKey(int64_t key) {
  const uint64_t hash = StripeHash(key);
  Stripe& s = stripes_[StripeOf(hash)];
  absl::MutexLock lock(&s.mu);
  uint64_t pos = 0;
  if (Probe(s, key, hash, &pos)) EraseAt(s, pos, DynamicOpContext());
}

}  // namespace pstrain
