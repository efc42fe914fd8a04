#include "ps/dynamic_shard.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/id_index.h"
#include "common/status_macros.h"
#include "partitioners/key_routing.h"
#include "ps/dynamic_export.h"
#include "ps/initializers.h"

namespace pstrain {
namespace {

static_assert(sizeof(RecordHeader) == DynamicShard::kHeaderBytes, "header layout");

// A row copy: rows of 16 floats (the common width) as four 16-byte moves, others by memcpy.
inline void CopyRow(char* to, const float* from, int64_t bytes) {
  if (bytes == 64) {
    std::memcpy(to, from, 64);
  } else {
    std::memcpy(to, from, static_cast<size_t>(bytes));
  }
}

// A key's hash in the shard: MixKey, whose top 32 bits are the routing hash that placed the key in
// this shard (so checking a request's keys and hashing them for the shard is one MixKey each). The
// routing hash's low 3 bits pick the stripe (the shard holds a contiguous range of routing hashes,
// of 2^32 / num_shards values, over which those bits are uniform); the low 32 bits, independent of
// the top ones, are the index entry's tag and home (RecordTable).
inline uint64_t StripeHash(int64_t key) { return MixKey(key); }
inline int StripeOf(uint64_t hash) { return static_cast<int>((hash >> 32) & 7); }
static_assert(DynamicShard::kStripes == 8, "StripeOf takes 3 bits");

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

// Bytes of index per key that max_bytes counts (8-byte entries, the index between 3/8 and 3/4
// full: 16 bytes at half full).
constexpr int64_t kIndexBytesPerKey = 16;
constexpr int64_t kDefaultExportKeys = 65536;
// Requests of fewer positions run on the calling thread alone: waking a helper costs more than it
// saves.
constexpr int64_t kMinParallelPositions = 4096;

// Locks and the analysis: a stripe's fields are ABSL_GUARDED_BY its lock, and the code that runs
// with every stripe locked (LockAll) asserts each stripe it touches (AssertHeld). The callbacks of
// RecordTable::Walk, ForEachLive and ErasureLog::Since run under the lock their caller holds; the
// analysis doesn't carry locks into lambdas, so they are marked ABSL_NO_THREAD_SAFETY_ANALYSIS.

// Floats to convert a record in, one buffer per thread.
float* ScratchFloats(int64_t n) {
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < n) scratch.resize(static_cast<size_t>(n));
  return scratch.data();
}

// Stochastic rounding's random bits for `key`'s row in the op numbered `op` (a stream of its
// own; the same op on the same table state rounds the same way, whichever thread runs it, so
// that a table and its copy, tiered or not, stay equal).
inline RoundingBits KeyRoundingBits(uint64_t op, int64_t key) {
  return RoundingBits(MixKey(static_cast<int64_t>(op)) ^ MixKey(key) * 0x9e3779b97f4a7c15ULL);
}

}  // namespace

inline void DynamicShard::ReadRow(const char* data, char* out) const {
  if (plain_) {
    CopyRow(out, reinterpret_cast<const float*>(data), row_bytes());
  } else {
    DecodeRow(row_format_, data, dim_, out);
  }
}

// What Choose decided: the positions to store (the admitted keys' positions, repeats included),
// grouped by stripe, with the room each stripe needs (one per key); the positions held already;
// the keys turned away (first position, sightings).
struct DynamicShard::Chosen {
  Groups store;
  int64_t room[kStripes] = {};
  std::vector<int32_t> present;
  std::vector<std::pair<int32_t, uint32_t>> rejected;
};

DynamicShard::DynamicShard(VariableShardDef def)
    : def_(std::move(def)), clock_(def_.dynamic().ttl_steps()) {}

DynamicShard::~DynamicShard() = default;

std::string DynamicShard::Who() const {
  return absl::StrCat("dynamic table shard \"", name(), "\"");
}

// ---- Stored rows.

void DynamicShard::DecodeRecord(const char* data, float* out) const {
  DecodeRow(row_format_, data, dim_, out);
  for (int slot = 0; slot < num_slots_; ++slot) {
    DecodeRow(slot_format_, data + stored_row_bytes_ + slot * stored_slot_bytes_, dim_,
              out + (slot + 1) * dim_);
  }
}

void DynamicShard::StoreRecord(const float* floats, char* data, RoundingBits* bits) const {
  EncodeRow(row_format_, floats, dim_, data, bits);
  for (int slot = 0; slot < num_slots_; ++slot) {
    EncodeRow(slot_format_, floats + (slot + 1) * dim_, dim_,
              data + stored_row_bytes_ + slot * stored_slot_bytes_, bits);
  }
}

absl::StatusOr<std::unique_ptr<DynamicShard>> DynamicShard::Create(
    const VariableShardDef& def, MemoryBudget* budget, std::shared_ptr<DiskStore> disk) {
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
  if (d.disk_max_bytes() < 0) return invalid("disk_max_bytes must not be negative");
  if (d.disk_tier() && disk == nullptr) {
    return invalid("asks for a disk tier, but the ps has no disk store");
  }
  if (absl::Status s = ValidateInitializer(def.initializer()); !s.ok()) {
    return invalid(s.message());
  }
  if (!RowFormat_IsValid(d.row_format())) {
    return invalid(absl::StrCat("row_format ", d.row_format(), " is not a RowFormat"));
  }
  if (!IsSlotFormat(d.slot_format())) {
    return invalid(absl::StrCat("slot_format ", d.slot_format(),
                                " must be FLOAT32, FLOAT16 or BFLOAT16"));
  }

  std::unique_ptr<DynamicShard> shard(new DynamicShard(def));
  shard->budget_ = budget;
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
  shard->row_format_ = d.row_format();
  shard->slot_format_ = d.slot_format();
  shard->stored_row_bytes_ = RowBytes(shard->row_format_, shard->dim_);
  shard->stored_slot_bytes_ = RowBytes(shard->slot_format_, shard->dim_);
  shard->plain_ = shard->row_format_ == ROW_FLOAT32 &&
                  (shard->slot_format_ == ROW_FLOAT32 || shard->num_slots_ == 0);
  shard->layout_ = RecordLayout::For(shard->record_data_bytes(), shard->stored_row_bytes_);
  int64_t capacity = d.max_rows();
  if (d.max_bytes() > 0) {
    const int64_t by_bytes = d.max_bytes() / (shard->record_bytes() + kIndexBytesPerKey);
    if (by_bytes == 0) {
      return invalid(absl::StrCat("max_bytes ", d.max_bytes(), " is less than one key's ",
                                  shard->record_bytes() + kIndexBytesPerKey, " bytes"));
    }
    capacity = capacity == 0 ? by_bytes : std::min(capacity, by_bytes);
  }
  if (capacity > 0) capacity = (capacity + def.num_shards() - 1) / def.num_shards();
  shard->capacity_ = capacity;
  shard->default_row_.assign(static_cast<size_t>(shard->dim_), d.default_value());
  for (int s = 0; s < kStripes; ++s) {
    shard->stripes_.push_back(std::make_unique<Stripe>(shard->layout_, budget));
  }
  AdmissionOptions admission;
  admission.min_count = d.admit_min_count();
  admission.probability = d.admit_probability();
  admission.sketch_bytes = d.admission_sketch_bytes();
  admission.seed = def.initializer().seed();
  RETURN_IF_ERROR(shard->admission_.Start(admission, budget, who));
  if (d.disk_tier()) {
    DiskTierOptions tier;
    tier.max_bytes = d.disk_max_bytes();
    ASSIGN_OR_RETURN(shard->tier_, DiskTier::Open(std::move(disk), tier,
                                                  kHeaderBytes + shard->record_data_bytes(), who));
  }
  return shard;
}

// ---- One stripe.

char* DynamicShard::InsertAt(RecordTable& table, int64_t key, uint64_t hash, uint64_t pos,
                             uint32_t step, uint32_t count, const DynamicOpContext& ctx) {
  char* record = table.InsertAt(key, hash, pos, step, count, ctx.generation);
  float* f = plain_ ? Floats(record) : ScratchFloats(record_floats());
  InitializeFloatForKey(def_.initializer(), key, dim_, f);
  for (int slot = 0; slot < num_slots_; ++slot) {
    std::fill(f + (slot + 1) * dim_, f + (slot + 2) * dim_, slot_init_[slot]);
  }
  if (!plain_) StoreRecord(f, Data(record), /*bits=*/nullptr);
  return record;
}

void DynamicShard::EraseAt(RecordTable& table, ErasureLog& erased, uint64_t pos,
                           const DynamicOpContext& ctx) {
  const int64_t key = table.EraseAt(pos);
  if (ctx.track_erasures) erased.Add(key, ctx.generation);
}

void DynamicShard::MaybeSweep(Stripe& s, const DynamicOpContext& ctx) {
  if (!clock_.SweepDue(&s.next_sweep_step)) return;
  RecordTable& table = s.table;
  std::vector<int64_t> expired;
  table.ForEachLive([&](const char* record) {
    if (clock_.Expired(Header(record)->step)) expired.push_back(Header(record)->key);
  });
  for (int64_t key : expired) {
    uint64_t pos = 0;
    if (table.Probe(key, StripeHash(key), &pos)) {
      EraseAt(table, s.erased, pos, ctx);
      evicted_ttl_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

int64_t DynamicShard::StoreWalk(Stripe& s, const int64_t* keys, const uint64_t* hashes,
                                const int32_t* positions, int64_t n, bool sighting,
                                const DynamicOpContext& ctx, std::vector<char*>* records,
                                char* out) {
  const int64_t rb = row_bytes();
  const uint32_t step = clock_.Effective(ctx.step);
  RecordTable& table = s.table;
  ErasureLog& erased = s.erased;
  int64_t inserted = 0;
  // One walk finds or stores each key: a key another request stored since this one looked (or
  // that repeats one stored just before) counts a sighting; an expired one is stored afresh.
  table.Walk(keys, hashes, positions, n, kHeaderBytes,
             [&](int32_t p, uint64_t pos, char* record) ABSL_NO_THREAD_SAFETY_ANALYSIS __attribute__((always_inline)) {
               if (record != nullptr) {
                 RecordHeader* h = Header(record);
                 if (!clock_.Expired(h->step)) {
                   if (sighting) CountSighting(h, step, ctx.generation);
                   if (records != nullptr) (*records)[p] = record;
                   if (out != nullptr) ReadRow(Data(record), out + p * rb);
                   return;
                 }
                 EraseAt(table, erased, pos, ctx);
                 evicted_ttl_.fetch_add(1, std::memory_order_relaxed);
                 table.Probe(keys[p], hashes[p], &pos);  // now missing: the empty position
               }
               record = InsertAt(table, keys[p], hashes[p], pos, step, sighting ? 1 : 0, ctx);
               if (records != nullptr) (*records)[p] = record;
               // Copied while the row is in cache, just written.
               if (out != nullptr) ReadRow(Data(record), out + p * rb);
               ++inserted;
             });
  admitted_.fetch_add(inserted, std::memory_order_relaxed);
  return inserted;
}

// ---- Across stripes.

absl::Status DynamicShard::SweepDueStripes(const DynamicOpContext& ctx) {
  if (clock_.ttl() == 0) return absl::OkStatus();
  for (int i = 0; i < kStripes; ++i) {
    Stripe& s = *stripes_[i];
    absl::MutexLock lock(&s.mu);
    MaybeSweep(s, ctx);
  }
  return tier_ == nullptr ? absl::OkStatus() : SweepDiskIfDue(ctx);
}

void DynamicShard::LockAll() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (int i = 0; i < kStripes; ++i) stripes_[i]->mu.Lock();
}

void DynamicShard::UnlockAll() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (int i = kStripes - 1; i >= 0; --i) stripes_[i]->mu.Unlock();
}

int64_t DynamicShard::LiveLocked() const {
  int64_t held = 0;
  for (int i = 0; i < kStripes; ++i) {
    const Stripe& s = *stripes_[i];
    AssertHeld(s);
    held += s.table.live();
  }
  return held;
}

void DynamicShard::EvictLeastRecentlyUsed(int64_t keep, const DynamicOpContext& ctx) {
  const int64_t held = LiveLocked();
  if (held <= keep) return;
  std::vector<EvictionCandidate> all;
  all.reserve(static_cast<size_t>(held));
  const uint32_t now = static_cast<uint32_t>(clock_.step());
  for (int i = 0; i < kStripes; ++i) {
    const Stripe& s = *stripes_[i];
    AssertHeld(s);
    s.table.ForEachLive([&](const char* record) {
      const RecordHeader* h = Header(record);
      all.push_back({now - h->step, h->count, h->key, i});
    });
  }
  const size_t evict = static_cast<size_t>(held - std::max<int64_t>(0, keep));
  EvictionOrder(evict, &all);
  for (size_t k = 0; k < evict; ++k) {
    Stripe& s = *stripes_[all[k].stripe];
    AssertHeld(s);
    uint64_t pos = 0;
    if (s.table.Probe(all[k].key, StripeHash(all[k].key), &pos)) {
      const bool expired = clock_.Expired(Header(s.table.RecordAt(pos))->step);
      EraseAt(s.table, s.erased, pos, ctx);
      (expired ? evicted_ttl_ : evicted_capacity_).fetch_add(1, std::memory_order_relaxed);
    }
  }
}

// ---- The disk tier.

std::vector<EvictionCandidate> DynamicShard::ColdestLocked(
    int stripe, int64_t count, const absl::flat_hash_set<int64_t>& keep) const {
  std::vector<EvictionCandidate> all;
  const uint32_t now = static_cast<uint32_t>(clock_.step());
  for (int i = stripe < 0 ? 0 : stripe; i < (stripe < 0 ? kStripes : stripe + 1); ++i) {
    const Stripe& s = *stripes_[i];
    AssertHeld(s);
    s.table.ForEachLive([&](const char* record) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      const RecordHeader* h = Header(record);
      if (!keep.empty() && keep.contains(h->key)) return;
      all.push_back({now - h->step, h->count, h->key, i});
    });
  }
  const size_t n = static_cast<size_t>(std::min<int64_t>(count, static_cast<int64_t>(all.size())));
  EvictionOrder(n, &all);
  all.resize(n);
  return all;
}

absl::Status DynamicShard::MoveToDiskLocked(const std::vector<EvictionCandidate>& victims,
                                            const DynamicOpContext& ctx) {
  if (victims.empty()) return absl::OkStatus();
  const int64_t vb = tier_->value_bytes();
  std::vector<int64_t> keys;
  std::vector<char> values;
  keys.reserve(victims.size());
  values.reserve(victims.size() * static_cast<size_t>(vb));
  for (const EvictionCandidate& v : victims) {
    const Stripe& s = *stripes_[v.stripe];
    AssertHeld(s);
    const char* record = s.table.Find(v.key, StripeHash(v.key));
    if (record == nullptr || clock_.Expired(Header(record)->step)) continue;  // erased below
    keys.push_back(v.key);
    values.insert(values.end(), record, record + vb);
  }
  RETURN_IF_ERROR(tier_->Write(keys, values.data(), {}, static_cast<int64_t>(keys.size())));
  for (const EvictionCandidate& v : victims) {
    Stripe& s = *stripes_[v.stripe];
    AssertHeld(s);
    uint64_t pos = 0;
    if (!s.table.Probe(v.key, StripeHash(v.key), &pos)) continue;
    if (clock_.Expired(Header(s.table.RecordAt(pos))->step)) {
      EraseAt(s.table, s.erased, pos, ctx);
      evicted_ttl_.fetch_add(1, std::memory_order_relaxed);
    } else {
      s.table.EraseAt(pos);  // moved, not gone: no erasure to remember
    }
  }
  moved_to_disk_.fetch_add(static_cast<int64_t>(keys.size()), std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status DynamicShard::EnsureRoomLocked(const int64_t* need, const KeyBatch& batch,
                                            const DynamicOpContext& ctx) {
  int64_t total = 0;
  for (int i = 0; i < kStripes; ++i) total += need[i];
  if (total == 0) return absl::OkStatus();
  // The request's keys, which stay: made only if keys must move.
  std::optional<absl::flat_hash_set<int64_t>> kept;
  auto keep = [&]() -> const absl::flat_hash_set<int64_t>& {
    if (!kept.has_value()) kept.emplace(batch.keys.begin(), batch.keys.end());
    return *kept;
  };
  int64_t keep_keys = 0;
  const int64_t held = LiveLocked();
  if (EvictionNeeded(capacity_, held, total, &keep_keys)) {
    RETURN_IF_ERROR(MoveToDiskLocked(
        ColdestLocked(-1, held - std::max<int64_t>(0, keep_keys), keep()), ctx));
  }
  const int64_t headroom = BudgetHeadroom();
  for (int i = 0; i < kStripes; ++i) {
    if (need[i] == 0) continue;
    Stripe& s = *stripes_[i];
    AssertHeld(s);
    // New memory only while it leaves the budget's last eighth; else the stripe's coldest keys
    // go to disk and their records are reused.
    absl::Status room = s.table.MakeRoom(need[i], Who(), headroom);
    if (room.ok() || !absl::IsResourceExhausted(room)) {
      RETURN_IF_ERROR(room);
      continue;
    }
    // The memory can't grow: the stripe's coldest sixteenth (at least what it needs) to disk.
    const std::vector<EvictionCandidate> victims =
        ColdestLocked(i, std::max(need[i], s.table.live() / 16), keep());
    // (Nothing to move: a stripe new to RAM may use the last eighth.)
    RETURN_IF_ERROR(MoveToDiskLocked(victims, ctx));
    RETURN_IF_ERROR(s.table.MakeRoom(need[i], Who()));
  }
  return absl::OkStatus();
}

absl::Status DynamicShard::FaultInLocked(const KeyBatch& batch,
                                         const std::vector<int32_t>& positions, bool promote,
                                         bool room_for_new, const DynamicOpContext& ctx,
                                         char* out, std::vector<uint8_t>* found) {
  const int64_t rb = row_bytes();
  // 1. The keys RAM lacks, each once; the positions of each.
  std::vector<int64_t> keys;
  std::vector<uint64_t> hashes;
  std::vector<std::pair<int32_t, int32_t>> position_key;  // (position, index in keys)
  absl::flat_hash_map<int64_t, int32_t> index_of;
  for (int32_t p : positions) {
    const Stripe& s = *stripes_[StripeOf(batch.hashes[p])];
    AssertHeld(s);
    const char* record = s.table.Find(batch.keys[p], batch.hashes[p]);
    if (record != nullptr) {
      // Held in RAM (by now: another request may have moved it back). An expired record is in
      // RAM alone: the insert that follows stores the key afresh.
      if (!promote && !clock_.Expired(Header(record)->step)) {
        ReadRow(Data(record), out + p * rb);
        (*found)[p] = 1;
      }
      continue;
    }
    auto [it, added] = index_of.emplace(batch.keys[p], static_cast<int32_t>(keys.size()));
    if (added) {
      keys.push_back(batch.keys[p]);
      hashes.push_back(batch.hashes[p]);
    }
    position_key.emplace_back(p, it->second);
  }
  if (keys.empty()) return absl::OkStatus();
  // 2. One read for all of them.
  const int64_t vb = tier_->value_bytes();
  std::vector<char> values(keys.size() * static_cast<size_t>(vb));
  std::vector<uint8_t> held;
  RETURN_IF_ERROR(tier_->Read(keys.data(), keys.size(), values.data(), &held));
  std::vector<int64_t> expired;
  for (size_t k = 0; k < keys.size(); ++k) {
    if (!held[k]) continue;
    RecordHeader h;
    std::memcpy(&h, values.data() + k * vb, sizeof(h));
    if (clock_.Expired(h.step)) {
      held[k] = 0;
      expired.push_back(keys[k]);
    }
  }
  if (!promote) {
    for (const auto& [p, k] : position_key) {
      if (!held[k]) continue;
      ReadRow(values.data() + k * vb + kHeaderBytes, out + p * rb);
      (*found)[p] = 1;
    }
    return absl::OkStatus();  // expired keys stay until a sweep: an evaluation changes nothing
  }
  // 3. Room, then the held keys back into RAM with their headers (generation kept: a move is not
  //    a change).
  int64_t need[kStripes] = {};
  for (size_t k = 0; k < keys.size(); ++k) {
    if (held[k] || room_for_new) ++need[StripeOf(hashes[k])];
  }
  RETURN_IF_ERROR(EnsureRoomLocked(need, batch, ctx));
  std::vector<int64_t> off_disk;
  for (size_t k = 0; k < keys.size(); ++k) {
    if (!held[k]) continue;
    Stripe& s = *stripes_[StripeOf(hashes[k])];
    AssertHeld(s);
    RecordHeader h;
    std::memcpy(&h, values.data() + k * vb, sizeof(h));
    uint64_t pos = 0;
    s.table.Probe(keys[k], hashes[k], &pos);
    char* record = s.table.InsertAt(keys[k], hashes[k], pos, h.step, h.count, h.generation);
    std::memcpy(Data(record), values.data() + k * vb + kHeaderBytes,
                static_cast<size_t>(vb - kHeaderBytes));
    off_disk.push_back(keys[k]);
  }
  const int64_t moved = static_cast<int64_t>(off_disk.size());
  off_disk.insert(off_disk.end(), expired.begin(), expired.end());
  absl::Status deleted =
      tier_->Write({}, nullptr, off_disk, -static_cast<int64_t>(off_disk.size()));
  if (!deleted.ok()) {
    // The disk keeps them: out of RAM again.
    for (int64_t i = 0; i < moved; ++i) {
      Stripe& s = *stripes_[StripeOf(StripeHash(off_disk[i]))];
      AssertHeld(s);
      uint64_t pos = 0;
      if (s.table.Probe(off_disk[i], StripeHash(off_disk[i]), &pos)) s.table.EraseAt(pos);
    }
    return deleted;
  }
  for (int64_t key : expired) {
    Stripe& s = *stripes_[StripeOf(StripeHash(key))];
    AssertHeld(s);
    if (ctx.track_erasures) s.erased.Add(key, ctx.generation);
  }
  evicted_ttl_.fetch_add(static_cast<int64_t>(expired.size()), std::memory_order_relaxed);
  moved_to_ram_.fetch_add(moved, std::memory_order_relaxed);
  return absl::OkStatus();
}

int64_t DynamicShard::BudgetHeadroom() const {
  return budget_ == nullptr ? 0 : budget_->limit() / 8;
}

absl::Status DynamicShard::SweepDiskIfDue(const DynamicOpContext& ctx) {
  absl::MutexLock sweep(&tier_sweep_mu_);
  if (!clock_.SweepDue(&tier_next_sweep_) || tier_->rows() == 0) return absl::OkStatus();
  LockAll();
  std::vector<int64_t> expired;
  absl::Status status = tier_->Scan(nullptr,
                                    [&](int64_t key, const char* value) {
                                      RecordHeader h;
                                      std::memcpy(&h, value, sizeof(h));
                                      if (clock_.Expired(h.step)) expired.push_back(key);
                                      return true;
                                    });
  if (status.ok()) {
    status = tier_->Write({}, nullptr, expired, -static_cast<int64_t>(expired.size()));
  }
  if (status.ok()) {
    for (int64_t key : expired) {
      Stripe& s = *stripes_[StripeOf(StripeHash(key))];
      AssertHeld(s);
      if (ctx.track_erasures) s.erased.Add(key, ctx.generation);
    }
    evicted_ttl_.fetch_add(static_cast<int64_t>(expired.size()), std::memory_order_relaxed);
  }
  UnlockAll();
  return status;
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


// Each worker (the caller, and the pool's threads that join in time) takes stripes the request
// hasn't run yet, one at a time, preferring one whose lock no other request holds now: requests
// running side by side then walk different stripes, where taking the stripes in the same order
// queued them on the same lock in step (a sleep and a wake-up each time). Workers, and requests (a
// counter), start at different stripes. (The analysis can't follow locks chosen at run time; fn
// runs with its stripe's lock held.)
void DynamicShard::ForEachStripe(const Groups& groups, ThreadPool* pool,
                                 const std::function<void(int)>& fn) const
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  int busy[kStripes];
  int num_busy = 0;
  for (int i = 0; i < kStripes; ++i) {
    if (groups.size(i) > 0) busy[num_busy++] = i;
  }
  if (num_busy == 0) return;
  if (groups.begin[kStripes] < kMinParallelPositions) pool = nullptr;
  const int workers = pool == nullptr ? 1 : std::min(num_busy, 1 + pool->num_threads());
  std::atomic<bool> claimed[kStripes];
  for (int k = 0; k < num_busy; ++k) claimed[k].store(false, std::memory_order_relaxed);
  const int start = static_cast<int>(next_start_.fetch_add(1, std::memory_order_relaxed) %
                                     static_cast<uint32_t>(num_busy));
  ParallelFor(pool, workers, [&](int64_t worker) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const int first = start + static_cast<int>(worker) * num_busy / workers;
    for (;;) {
      int chosen = -1;
      bool unclaimed = false;
      for (int j = 0; j < num_busy && chosen < 0; ++j) {
        const int k = (first + j) % num_busy;
        if (claimed[k].load(std::memory_order_relaxed)) continue;
        unclaimed = true;
        absl::Mutex& mu = stripes_[busy[k]]->mu;
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
            stripes_[busy[k]]->mu.Lock();
            chosen = k;
          }
        }
        if (chosen < 0) return;
      }
      fn(busy[chosen]);
      stripes_[busy[chosen]]->mu.Unlock();
    }
  });
}

void DynamicShard::ForEachLockedStripe(const Groups& groups, ThreadPool* pool,
                                       const std::function<void(int)>& fn) const {
  int busy[kStripes];
  int num_busy = 0;
  for (int i = 0; i < kStripes; ++i) {
    if (groups.size(i) > 0) busy[num_busy++] = i;
  }
  // A stripe per piece, on the pool's threads too: each piece stays in its stripe.
  ParallelFor(groups.begin[kStripes] < kMinParallelPositions ? nullptr : pool, num_busy,
              [&](int64_t k) { fn(busy[k]); });
}

int64_t DynamicShard::Find(const KeyBatch& batch, bool sighting, bool may_sweep,
                           const DynamicOpContext& ctx, std::vector<uint8_t>* found, char* out,
                           ThreadPool* pool) {
  const int64_t rb = row_bytes();
  const uint32_t step = clock_.Effective(ctx.step);
  const Groups& groups = batch.groups;
  std::atomic<int64_t> found_count{0};
  ForEachStripe(groups, pool, [&](int stripe) {
    Stripe& s = *stripes_[stripe];
    AssertHeld(s);
    RecordTable& table = s.table;
    ErasureLog& erased = s.erased;
    int64_t here = 0;
    table.Walk(batch.keys.data(), batch.hashes.data(), groups.of(stripe), groups.size(stripe),
               kHeaderBytes + rb,
               [&](int32_t p, uint64_t pos, char* record) ABSL_NO_THREAD_SAFETY_ANALYSIS __attribute__((always_inline)) {
                 if (record == nullptr) return;
                 RecordHeader* h = Header(record);
                 if (clock_.Expired(h->step)) {
                   if (may_sweep) {
                     EraseAt(table, erased, pos, ctx);
                     evicted_ttl_.fetch_add(1, std::memory_order_relaxed);
                   }
                   return;
                 }
                 if (sighting) CountSighting(h, step, ctx.generation);
                 // Copied now, under the stripe's lock: once it is released the record may be
                 // evicted.
                 if (out != nullptr) ReadRow(Data(record), out + p * rb);
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

absl::Status DynamicShard::Insert(const KeyBatch& batch, const std::vector<int32_t>& missing,
                                  const InsertCall& call, const DynamicOpContext& ctx,
                                  ThreadPool* pool) {
  // (With a disk tier, Choose counts the room exactly: FaultInLocked made that much.)
  const bool turns_away =
      (call.admission && admission_.on()) || capacity_ > 0 || tier_ != nullptr;
  if (tier_ != nullptr && !call.locked) {
    return absl::InternalError(
        absl::StrCat(Who(), ": an insert into a shard with a disk tier must hold every lock"));
  }
  if (turns_away && !call.locked) {
    return absl::InternalError(absl::StrCat(
        Who(), ": an insert that may turn keys away must hold every stripe's lock"));
  }
  // 1. Which keys to store, and the room each stripe needs. Without admission or a capacity, every
  //    missing position (some may be held by now, or repeat another: room to spare stays reserved
  //    for later inserts).
  Chosen chosen;
  if (turns_away) {
    Choose(batch, missing, call, ctx, pool, &chosen);
  } else {
    chosen.store = ByStripe(batch.hashes.data(), missing.data(), missing.size());
    for (int i = 0; i < kStripes; ++i) chosen.room[i] = chosen.store.size(i);
  }
  // 2. Room first, in every stripe the keys go to, so that a failure stores nothing. With every
  //    stripe locked, made there (memory kept by the stripes that did make room stays reserved for
  //    their next inserts); else under each stripe's lock in turn, and promised to this request,
  //    so that no other request's inserts take it before this one's stores run; if a stripe can't
  //    make room, the promises are taken back.
  absl::Status room;
  int made = 0;
  for (; made < kStripes && room.ok(); ++made) {
    if (chosen.room[made] == 0) continue;
    Stripe& s = *stripes_[made];
    if (call.locked) {
      AssertHeld(s);
      room = s.table.MakeRoom(chosen.room[made], Who());
      continue;
    }
    absl::MutexLock lock(&s.mu);
    room = s.table.MakeRoom(chosen.room[made], Who());
    if (room.ok()) s.table.Promise(chosen.room[made]);
  }
  if (!room.ok()) {
    for (int i = 0; !call.locked && i < made - 1; ++i) {
      if (chosen.room[i] == 0) continue;
      absl::MutexLock lock(&stripes_[i]->mu);
      stripes_[i]->table.Unpromise(chosen.room[i]);
    }
    return room;
  }
  // 3. The sketch counts the keys turned away; the rest are stored, a stripe per piece.
  for (const auto& [first, occurrences] : chosen.rejected) {
    admission_.Add(batch.keys[first], occurrences);
    rejected_.fetch_add(occurrences, std::memory_order_relaxed);
  }
  auto store = [&](int stripe) {
    Stripe& s = *stripes_[stripe];
    AssertHeld(s);
    if (!call.locked) s.table.Unpromise(chosen.room[stripe]);  // used now, under the same lock
    StoreWalk(s, batch.keys.data(), batch.hashes.data(), chosen.store.of(stripe),
              chosen.store.size(stripe), call.sighting, ctx, call.records, call.out);
  };
  if (call.locked) {
    ForEachLockedStripe(chosen.store, pool, store);
  } else {
    ForEachStripe(chosen.store, pool, store);
  }
  // 4. Keys that were present: their records now (an eviction in Choose may have taken one, if
  //    the capacity is so small that even keys of this step had to go: it then reads as missing).
  const int64_t rb = row_bytes();
  for (int32_t p : chosen.present) {
    Stripe& s = *stripes_[StripeOf(batch.hashes[p])];
    AssertHeld(s);
    char* record = s.table.Find(batch.keys[p], batch.hashes[p]);
    if (call.records != nullptr) (*call.records)[p] = record;
    if (call.out != nullptr && record != nullptr) ReadRow(Data(record), call.out + p * rb);
  }
  return absl::OkStatus();
}

void DynamicShard::Choose(const KeyBatch& batch, const std::vector<int32_t>& missing,
                          const InsertCall& call, const DynamicOpContext& ctx, ThreadPool* pool,
                          Chosen* chosen) {
  const int64_t* keys = batch.keys.data();
  const uint64_t* hashes = batch.hashes.data();
  const uint32_t step = clock_.Effective(ctx.step);
  // 1. Which positions are still missing (another request may have stored some meanwhile): a
  //    probe per position, prefetched, a stripe per piece. state[p]: 1 held now, 2 missing.
  std::vector<uint8_t> state(batch.size(), 0);
  const Groups missing_by_stripe = ByStripe(hashes, missing.data(), missing.size());
  ForEachLockedStripe(missing_by_stripe, pool, [&](int stripe) {
    Stripe& s = *stripes_[stripe];
    AssertHeld(s);
    RecordTable& table = s.table;
    ErasureLog& erased = s.erased;
    table.Walk(keys, hashes, missing_by_stripe.of(stripe), missing_by_stripe.size(stripe),
               kHeaderBytes,
               [&](int32_t p, uint64_t pos, char* record) ABSL_NO_THREAD_SAFETY_ANALYSIS __attribute__((always_inline)) {
                 state[p] = 2;
                 if (record == nullptr) return;
                 RecordHeader* h = Header(record);
                 if (clock_.Expired(h->step)) {
                   EraseAt(table, erased, pos, ctx);  // expired: stored afresh below
                   evicted_ttl_.fetch_add(1, std::memory_order_relaxed);
                   return;
                 }
                 if (call.sighting) CountSighting(h, step, ctx.generation);
                 state[p] = 1;
               });
  });
  // 2. The missing keys, each once (at its first position, with how often it occurs), and the
  //    positions repeating each.
  struct NewKey {
    int32_t first;
    uint32_t occurrences;
  };
  std::vector<NewKey> fresh;
  std::vector<int32_t> still;  // positions still missing
  still.reserve(missing.size());
  for (int32_t p : missing) {
    if (state[p] == 1) {
      chosen->present.push_back(p);
    } else {
      still.push_back(p);
    }
  }
  std::vector<int32_t> fresh_of(still.size(), -1);  // still[i]'s key's index in `fresh`
  {
    std::vector<int64_t> still_keys(still.size());
    for (size_t i = 0; i < still.size(); ++i) still_keys[i] = keys[still[i]];
    const std::vector<RepeatFinder::Repeat>& repeats = ThreadRepeatFinder().Find(
        reinterpret_cast<const char*>(still_keys.data()), static_cast<int64_t>(still.size()));
    fresh.reserve(still.size());
    auto repeat = repeats.begin();
    for (size_t i = 0; i < still.size(); ++i) {
      if (repeat != repeats.end() && repeat->later == static_cast<int64_t>(i)) {
        fresh_of[i] = fresh_of[repeat->first];
        ++fresh[fresh_of[i]].occurrences;
        ++repeat;
        continue;
      }
      fresh_of[i] = static_cast<int32_t>(fresh.size());
      fresh.push_back({still[i], 1});
    }
  }
  // 3. Which keys are stored: admission, then the capacity (the first `capacity` new keys win).
  std::vector<uint8_t> admitted(fresh.size(), 0);
  int64_t to_store = 0;
  for (size_t f = 0; f < fresh.size(); ++f) {
    const NewKey& k = fresh[f];
    bool in = !call.admission || admission_.Admits(keys[k.first], k.occurrences);
    // (With a disk tier, FaultInLocked made room already, moving keys to disk.)
    if (in && capacity_ > 0 && tier_ == nullptr && to_store >= capacity_) in = false;
    if (in) {
      admitted[f] = 1;
      ++to_store;
      ++chosen->room[StripeOf(hashes[k.first])];
    } else if (call.admission) {
      chosen->rejected.emplace_back(k.first, k.occurrences);
    }
  }
  // 4. Evictions to make room for them (these stand even if the memory can't be had later).
  int64_t keep = 0;
  if (tier_ == nullptr && EvictionNeeded(capacity_, LiveLocked(), to_store, &keep)) {
    EvictLeastRecentlyUsed(keep, ctx);
  }
  std::vector<int32_t> store;  // every position of the keys to store
  for (size_t i = 0; i < still.size(); ++i) {
    if (admitted[fresh_of[i]]) store.push_back(still[i]);
  }
  chosen->store = ByStripe(hashes, store.data(), store.size());
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
    RETURN_IF_ERROR(SweepDueStripes(ctx));
  }
  std::vector<uint8_t> found(n, 0);  // bytes: pieces on other threads write their own
  if (Find(batch, /*sighting=*/insert, /*may_sweep=*/insert, ctx, &found, out, pool) == n) {
    return absl::OkStatus();
  }
  std::vector<int32_t> missing;
  for (int64_t i = 0; i < n; ++i) {
    if (!found[i]) missing.push_back(static_cast<int32_t>(i));
  }
  std::vector<char*> records(n, nullptr);
  if (tier_ != nullptr && !insert) {
    // An evaluation reads what the disk holds where it is.
    LockAll();
    absl::Status read = FaultInLocked(batch, missing, /*promote=*/false, /*room_for_new=*/false,
                                      ctx, out, &found);
    UnlockAll();
    RETURN_IF_ERROR(read);
    const int64_t rb = row_bytes();
    for (int32_t p : missing) {
      if (!found[p]) CopyRow(out + p * rb, default_row_.data(), rb);
    }
    return absl::OkStatus();
  }
  if (insert) {
    InsertCall call;
    call.admission = true;
    call.sighting = true;
    call.out = out;
    if (!admission_.on() && capacity_ == 0 && tier_ == nullptr) {
      // No key can be turned away: stored under each stripe's lock alone, beside other requests.
      return Insert(batch, missing, call, ctx, pool);
    }
    call.locked = true;
    call.records = &records;
    LockAll();
    absl::Status inserted =
        tier_ == nullptr ? absl::OkStatus()
                         : FaultInLocked(batch, missing, /*promote=*/true, /*room_for_new=*/true,
                                         ctx, nullptr, nullptr);
    if (inserted.ok()) inserted = Insert(batch, missing, call, ctx, pool);
    UnlockAll();
    RETURN_IF_ERROR(inserted);
  }
  const int64_t rb = row_bytes();
  for (int32_t p : missing) {
    if (records[p] == nullptr) CopyRow(out + p * rb, default_row_.data(), rb);
  }
  return absl::OkStatus();
}

absl::Status DynamicShard::ValidateUpdate(const UpdateOpView& op, KeyBatch* batch) const {
  const std::string who = Who();
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
  AdvanceStep(ctx.step);
  RETURN_IF_ERROR(SweepDueStripes(ctx));
  switch (op.kind) {
    case UpdateOp::ERASE:
      return Erase(batch, ctx);
    case UpdateOp::APPLY_GRADIENT:
      return ApplyGradients(op, batch, ctx, pool);
    default:
      return Assign(op, batch, ctx, pool);
  }
}

absl::Status DynamicShard::Erase(const KeyBatch& batch, const DynamicOpContext& ctx) {
  const Groups& by_stripe = batch.groups;
  ForEachStripe(by_stripe, /*pool=*/nullptr, [&](int stripe) {
    Stripe& s = *stripes_[stripe];
    AssertHeld(s);
    RecordTable& table = s.table;
    ErasureLog& erased = s.erased;
    int64_t count = 0;
    table.Walk(batch.keys.data(), batch.hashes.data(), by_stripe.of(stripe),
               by_stripe.size(stripe), /*record_prefix=*/kHeaderBytes,
               [&](int32_t /*p*/, uint64_t pos, char* record) ABSL_NO_THREAD_SAFETY_ANALYSIS __attribute__((always_inline)) {
                 if (record == nullptr) return;
                 EraseAt(table, erased, pos, ctx);
                 ++count;
               });
    erased_.fetch_add(count, std::memory_order_relaxed);
  });
  if (tier_ == nullptr) return absl::OkStatus();
  // Keys on disk: every stripe locked, as for any move between tiers (a key this walk missed may
  // have moved to disk meanwhile).
  LockAll();
  std::vector<int64_t> keys;
  std::vector<int> stripe_of;
  absl::flat_hash_set<int64_t> seen;
  for (int64_t i = 0; i < batch.size(); ++i) {
    const int stripe = StripeOf(batch.hashes[i]);
    Stripe& s = *stripes_[stripe];
    AssertHeld(s);
    if (s.table.Find(batch.keys[i], batch.hashes[i]) != nullptr) continue;
    if (seen.insert(batch.keys[i]).second) {
      keys.push_back(batch.keys[i]);
      stripe_of.push_back(stripe);
    }
  }
  std::vector<char> values(keys.size() * static_cast<size_t>(tier_->value_bytes()));
  std::vector<uint8_t> held;
  absl::Status status = tier_->Read(keys.data(), keys.size(), values.data(), &held);
  std::vector<int64_t> gone;
  for (size_t k = 0; status.ok() && k < keys.size(); ++k) {
    if (held[k]) gone.push_back(keys[k]);
  }
  if (status.ok()) {
    status = tier_->Write({}, nullptr, gone, -static_cast<int64_t>(gone.size()));
  }
  if (status.ok()) {
    for (size_t k = 0; k < keys.size(); ++k) {
      if (!held[k] || !ctx.track_erasures) continue;
      Stripe& s = *stripes_[stripe_of[k]];
      AssertHeld(s);
      s.erased.Add(keys[k], ctx.generation);
    }
    erased_.fetch_add(static_cast<int64_t>(gone.size()), std::memory_order_relaxed);
  }
  UnlockAll();
  return status;
}

absl::Status DynamicShard::ApplyGradients(const UpdateOpView& op, const KeyBatch& batch,
                                          const DynamicOpContext& ctx, ThreadPool* pool) {
  const int64_t n = batch.size();
  const Groups& by_stripe = batch.groups;
  const uint32_t step = clock_.Effective(ctx.step);
  const ValueRows rows(op.values, row_bytes());
  const std::vector<const char*> src = rows.RowAddresses();
  const int64_t t = apply_count_.fetch_add(1) + 1;
  const StepScalars scalars = optimizer_->Prepare(t, ctx.step > 0 ? ctx.step - 1 : t - 1);
  const uint64_t rounding_op = plain_ ? 0 : rounding_ops_.fetch_add(1, std::memory_order_relaxed);
  // Repeated keys are summed first (as TF's sparse apply): the optimizer sees each key once.
  std::vector<const UnalignedFloat*> grad(n);
  for (int64_t i = 0; i < n; ++i) grad[i] = reinterpret_cast<const UnalignedFloat*>(src[i]);
  std::vector<float> sums;
  const std::vector<RepeatFinder::Repeat>& repeats = ThreadRepeatFinder().Find(op.ids.data(), n);
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
  auto apply = [&](int32_t p, char* record) __attribute__((always_inline)) {
    RecordHeader* h = Header(record);
    Touch(&h->step, step);
    h->generation = ctx.generation;
    float* var = plain_ ? Floats(record) : ScratchFloats(record_floats());
    if (!plain_) DecodeRecord(Data(record), var);
    float* slot_rows[4];
    for (int slot = 0; slot < num_slots_; ++slot) slot_rows[slot] = var + (slot + 1) * dim_;
    optimizer_->ApplyRow(var, slot_rows, grad[p], dim_, scalars);
    if (!plain_) {
      RoundingBits bits = KeyRoundingBits(rounding_op, h->key);
      StoreRecord(var, Data(record), &bits);
    }
  };
  // With a disk tier, the positions whose keys RAM lacks, by stripe (each written by the worker
  // that holds the stripe).
  std::vector<std::vector<int32_t>> on_disk(tier_ != nullptr ? kStripes : 0);
  ForEachStripe(by_stripe, pool, [&](int stripe) {
    Stripe& s = *stripes_[stripe];
    AssertHeld(s);
    s.table.Walk(batch.keys.data(), batch.hashes.data(), by_stripe.of(stripe),
                 by_stripe.size(stripe), record_bytes(),
                 [&](int32_t p, uint64_t /*pos*/, char* record) ABSL_NO_THREAD_SAFETY_ANALYSIS __attribute__((always_inline)) {
                   if (grad[p] == nullptr) return;  // a repeat, summed into its first position
                   if (record == nullptr && !on_disk.empty()) {
                     on_disk[stripe].push_back(p);
                     return;
                   }
                   if (record == nullptr || clock_.Expired(Header(record)->step)) {
                     dropped_gradients_.fetch_add(1, std::memory_order_relaxed);
                     return;
                   }
                   apply(p, record);
                 });
  });
  std::vector<int32_t> missing;
  for (const std::vector<int32_t>& v : on_disk) missing.insert(missing.end(), v.begin(), v.end());
  if (missing.empty()) return absl::OkStatus();
  // Keys RAM lacked: moved back from disk, then updated, every stripe locked.
  LockAll();
  absl::Status status = FaultInLocked(batch, missing, /*promote=*/true, /*room_for_new=*/false,
                                      ctx, nullptr, nullptr);
  int64_t dropped = 0;
  for (int32_t p : missing) {
    Stripe& s = *stripes_[StripeOf(batch.hashes[p])];
    AssertHeld(s);
    char* record = status.ok() ? s.table.Find(batch.keys[p], batch.hashes[p]) : nullptr;
    if (record == nullptr || clock_.Expired(Header(record)->step)) {
      ++dropped;
    } else {
      apply(p, record);
    }
  }
  UnlockAll();
  dropped_gradients_.fetch_add(dropped, std::memory_order_relaxed);
  return status;
}

absl::Status DynamicShard::Assign(const UpdateOpView& op, const KeyBatch& batch,
                                  const DynamicOpContext& ctx, ThreadPool* pool) {
  // ASSIGN / ASSIGN_ADD: keys not held are stored first (no admission), then written in position
  // order (with repeated keys the last assign wins; assign-adds add up), every stripe locked.
  const int64_t n = batch.size();
  const uint32_t step = clock_.Effective(ctx.step);
  const ValueRows rows(op.values, row_bytes());
  const std::vector<const char*> src = rows.RowAddresses();
  const uint64_t rounding_op = plain_ ? 0 : rounding_ops_.fetch_add(1, std::memory_order_relaxed);
  LockAll();
  if (tier_ != nullptr) {
    std::vector<int32_t> all(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) all[i] = static_cast<int32_t>(i);
    absl::Status moved = FaultInLocked(batch, all, /*promote=*/true, /*room_for_new=*/true, ctx,
                                       nullptr, nullptr);
    if (!moved.ok()) {
      UnlockAll();
      return moved;
    }
  }
  std::vector<char*> records(n, nullptr);
  std::vector<int32_t> missing;
  for (int64_t i = 0; i < n; ++i) {
    Stripe& s = *stripes_[StripeOf(batch.hashes[i])];
    AssertHeld(s);
    const char* record = s.table.Find(batch.keys[i], batch.hashes[i]);
    if (record == nullptr || clock_.Expired(Header(record)->step)) {
      missing.push_back(static_cast<int32_t>(i));
    }
  }
  InsertCall call;
  call.locked = true;
  call.records = &records;
  absl::Status inserted = Insert(batch, missing, call, ctx, pool);
  if (inserted.ok()) {
    for (int64_t i = 0; i < n; ++i) {
      // Every key's record now (inserting may have evicted keys to make room).
      Stripe& s = *stripes_[StripeOf(batch.hashes[i])];
      AssertHeld(s);
      records[i] = s.table.Find(batch.keys[i], batch.hashes[i]);
      if (records[i] == nullptr) continue;  // a capacity smaller than the keys assigned
      RecordHeader* h = Header(records[i]);
      Touch(&h->step, step);
      h->generation = ctx.generation;
      // Stored rows: the slots kept as they are, the row converted and stored again (an add
      // rounded stochastically, an assigned value to nearest).
      float* row = plain_ ? Floats(records[i]) : ScratchFloats(dim_);
      if (!plain_) DecodeRow(row_format_, Data(records[i]), dim_, row);
      const UnalignedFloat* v = reinterpret_cast<const UnalignedFloat*>(src[i]);
      if (op.kind == UpdateOp::ASSIGN) {
        for (int64_t k = 0; k < dim_; ++k) row[k] = v[k];
      } else {
        for (int64_t k = 0; k < dim_; ++k) row[k] += v[k];
      }
      if (!plain_) {
        // (A key repeated in the op rounds with another stream each time.)
        RoundingBits bits = KeyRoundingBits(rounding_op + (static_cast<uint64_t>(i) << 40),
                                            batch.keys[i]);
        EncodeRow(row_format_, row, dim_, Data(records[i]),
                  op.kind == UpdateOp::ASSIGN ? nullptr : &bits);
      }
    }
  }
  UnlockAll();
  return inserted;
}

absl::Status DynamicShard::Export(absl::string_view cursor, int64_t max_keys, bool with_slots,
                                  ExportResponse* response, bool stored_format) const {
  ASSIGN_OR_RETURN(ExportCursor at, ExportCursor::Decode(cursor, kStripes, name()));
  if (max_keys <= 0) max_keys = kDefaultExportKeys;
  const int64_t rb = row_bytes();
  const int64_t value_bytes = stored_format ? stored_row_bytes_ : rb;
  // The reply's fields sized once for the keys it can hold (at most those held now), not grown
  // record by record.
  int64_t held = 0;
  for (int i = at.stripe; i < kStripes; ++i) {
    const Stripe& s = *stripes_[i];
    absl::MutexLock lock(&s.mu);
    held += s.table.live();
  }
  const size_t most = static_cast<size_t>(std::min(held, max_keys));
  response->mutable_keys()->reserve(response->keys().size() + most * 8);
  response->mutable_values()->reserve(response->values().size() + most * value_bytes);
  if (with_slots) {
    response->mutable_slots()->reserve(response->slots().size() + most * rb * num_slots_);
  }
  response->mutable_counts()->reserve(response->counts().size() + most * 4);
  response->mutable_steps()->reserve(response->steps().size() + most * 8);
  int64_t emitted = 0;
  // One key: its header and stored data (a record's, or a tier value's after its header).
  std::vector<float> floats(plain_ ? 0 : static_cast<size_t>(record_floats()));
  auto emit = [&](const RecordHeader& h, const char* data) {
    response->mutable_keys()->append(reinterpret_cast<const char*>(&h.key), 8);
    if (!plain_ && (!stored_format || with_slots)) DecodeRecord(data, floats.data());
    const char* as_floats = plain_ ? data : reinterpret_cast<const char*>(floats.data());
    response->mutable_values()->append(stored_format ? data : as_floats, value_bytes);
    if (with_slots) response->mutable_slots()->append(as_floats + rb, rb * num_slots_);
    response->mutable_counts()->append(reinterpret_cast<const char*>(&h.count), 4);
    const int64_t full_step = clock_.FullStep(h.step);
    response->mutable_steps()->append(reinterpret_cast<const char*>(&full_step), 8);
    ++emitted;
  };
  for (; at.stripe < kStripes; ++at.stripe, at.record = 0) {
    const Stripe& s = *stripes_[at.stripe];
    absl::MutexLock lock(&s.mu);
    for (; at.record < s.table.next_record(); ++at.record) {
      if (emitted == max_keys) {
        response->set_next_cursor(at.Encode());
        return absl::OkStatus();
      }
      const char* r = s.table.Record(at.record);
      const RecordHeader* h = Header(r);
      if (h->live == 0 || clock_.Expired(h->step)) continue;
      emit(*h, Data(r));
    }
  }
  response->clear_next_cursor();
  if (tier_ == nullptr) return absl::OkStatus();
  // The disk tier, in key order.
  int64_t next = 0;
  bool more = false;
  RETURN_IF_ERROR(tier_->Scan(
      at.on_disk ? &at.disk_key : nullptr,
      [&](int64_t /*key*/, const char* value) {
        if (emitted == max_keys) return false;
        RecordHeader h;
        std::memcpy(&h, value, sizeof(h));
        if (clock_.Expired(h.step)) return true;
        emit(h, value + kHeaderBytes);
        return true;
      },
      &next, &more));
  if (more) {
    ExportCursor disk;
    disk.stripe = kStripes;
    disk.on_disk = true;
    disk.disk_key = next;
    response->set_next_cursor(disk.Encode());
  }
  return absl::OkStatus();
}

int DynamicShard::StripeOfKey(int64_t key) { return StripeOf(StripeHash(key)); }

int64_t DynamicShard::Size() const {
  int64_t held = 0;
  for (int i = 0; i < kStripes; ++i) {
    const Stripe& s = *stripes_[i];
    absl::MutexLock lock(&s.mu);
    if (clock_.ttl() == 0) {
      held += s.table.live();
      continue;
    }
    s.table.ForEachLive([&](const char* record) {
      if (!clock_.Expired(Header(record)->step)) ++held;
    });
  }
  return held + (tier_ == nullptr ? 0 : tier_->rows());
}

int64_t DynamicShard::BytesHeld() const {
  int64_t bytes = admission_.bytes();
  for (int i = 0; i < kStripes; ++i) {
    const Stripe& s = *stripes_[i];
    absl::MutexLock lock(&s.mu);
    bytes += s.table.reserved_bytes() + s.erased.bytes() + s.table.free_list_bytes();
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
  stats.set_step(clock_.step());
  if (tier_ != nullptr) {
    const DiskTierCounters c = tier_->Counters();
    stats.set_disk_tier(true);
    stats.set_ram_keys(stats.keys() - c.rows);
    stats.set_disk_keys(c.rows);
    stats.set_disk_bytes(c.bytes);
    stats.set_disk_file_bytes(c.file_bytes);
    stats.set_disk_hits(c.hits);
    stats.set_disk_misses(c.misses);
    stats.set_disk_bytes_read(c.bytes_read);
    stats.set_disk_bytes_written(c.bytes_written);
  } else {
    stats.set_ram_keys(stats.keys());
  }
  stats.set_moved_to_disk(moved_to_disk_.load());
  stats.set_moved_to_ram(moved_to_ram_.load());
  stats.set_row_format(row_format_);
  stats.set_slot_format(slot_format_);
  return stats;
}

// ---- Checkpoints.

absl::Status DynamicShard::ForEachRecord(
    uint32_t since, const std::function<void(const DynamicRecordView&)>& fn) const {
  ForEachRamRecord(since, fn);
  std::unique_ptr<DynamicDiskRecords> disk = DiskRecords(since);
  if (disk == nullptr) return absl::OkStatus();
  DynamicRecordView view;
  while (disk->Next(&view)) fn(view);
  return disk->status();
}

DynamicDiskRecords::DynamicDiskRecords(const DynamicShard* shard,
                                       std::unique_ptr<DiskTier::Reader> reader, uint32_t since)
    : shard_(shard),
      reader_(std::move(reader)),
      since_(since),
      data_(static_cast<size_t>(shard->record_data_bytes()), '\0') {}

bool DynamicDiskRecords::Next(DynamicRecordView* view) {
  for (; reader_->Valid(); reader_->Next()) {
    RecordHeader h;
    std::memcpy(&h, reader_->value(), sizeof(h));
    if (shard_->clock_.Expired(h.step) || (since_ > 0 && h.generation <= since_)) continue;
    std::memcpy(data_.data(), reader_->value() + DynamicShard::kHeaderBytes, data_.size());
    view->key = h.key;
    view->step = shard_->clock_.FullStep(h.step);
    view->count = h.count;
    view->generation = h.generation;
    view->data = data_.data();
    reader_->Next();
    return true;
  }
  return false;
}

std::unique_ptr<DynamicDiskRecords> DynamicShard::DiskRecords(uint32_t since) const {
  if (tier_ == nullptr) return nullptr;
  return std::unique_ptr<DynamicDiskRecords>(
      new DynamicDiskRecords(this, tier_->NewReader(), since));
}

void DynamicShard::ForEachRamRecord(
    uint32_t since, const std::function<void(const DynamicRecordView&)>& fn) const {
  for (int i = 0; i < kStripes; ++i) {
    const Stripe& s = *stripes_[i];
    absl::MutexLock lock(&s.mu);
    s.table.ForEachLive([&](const char* record) {
      const RecordHeader* h = Header(record);
      if (clock_.Expired(h->step) || (since > 0 && h->generation <= since)) return;
      DynamicRecordView view;
      view.key = h->key;
      view.step = clock_.FullStep(h->step);
      view.count = h->count;
      view.generation = h->generation;
      view.data = Data(record);
      fn(view);
    });
  }
}

std::vector<int64_t> DynamicShard::ErasedSince(uint32_t since) const {
  std::vector<int64_t> keys;
  for (int i = 0; i < kStripes; ++i) {
    const Stripe& s = *stripes_[i];
    absl::MutexLock lock(&s.mu);
    const RecordTable& table = s.table;
    s.erased.Since(
        since,
        [&](int64_t key) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          if (table.Find(key, StripeHash(key)) != nullptr) return true;
          if (tier_ == nullptr) return false;
          // Stored again and moved to disk since? (A read error reads as held: the save's scan
          // of the tier meets the same error and fails the save.)
          absl::StatusOr<bool> on_disk = tier_->Has(key);
          return !on_disk.ok() || *on_disk;
        },
        &keys);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

void DynamicShard::ForgetErasuresThrough(uint32_t through) {
  for (int i = 0; i < kStripes; ++i) {
    Stripe& s = *stripes_[i];
    absl::MutexLock lock(&s.mu);
    s.erased.ForgetThrough(through);
  }
}

absl::Status DynamicShard::PutRecord(const DynamicRecord& record) {
  if (static_cast<int64_t>(record.data.size()) != record_floats()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Who(), ": a saved record of key ", record.key, " has ", record.data.size(),
        " floats, expected ", record_floats()));
  }
  if (ShardOfKey(record.key, def_.num_shards()) != def_.shard_index()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Who(), ": key ", record.key, " is not this shard's"));
  }
  AdvanceStep(record.step);
  const uint64_t hash = StripeHash(record.key);
  Stripe& s = *stripes_[StripeOf(hash)];
  absl::MutexLock lock(&s.mu);
  uint64_t pos = 0;
  char* r = nullptr;
  if (s.table.Probe(record.key, hash, &pos)) {
    r = s.table.RecordAt(pos);
  } else {
    // (A restore into a fresh shard asks the disk only once it holds rows.)
    if (tier_ != nullptr && tier_->rows() > 0) {
      ASSIGN_OR_RETURN(const bool on_disk, tier_->Has(record.key));
      if (on_disk) {  // replaced where it is
        std::vector<char> value(static_cast<size_t>(tier_->value_bytes()));
        RecordHeader h{record.key, static_cast<uint32_t>(record.step), record.count, 0, 1};
        std::memcpy(value.data(), &h, sizeof(h));
        StoreRecord(record.data.data(), value.data() + kHeaderBytes, /*bits=*/nullptr);
        return tier_->Write({record.key}, value.data(), {}, /*rows_delta=*/0);
      }
    }
    // With a tier, a stripe past its share of the capacity, or whose memory can't grow, moves its
    // coldest sixteenth to disk.
    const bool full = tier_ != nullptr && capacity_ > 0 &&
                      s.table.live() >= std::max<int64_t>(1, capacity_ / kStripes);
    absl::Status room = full ? absl::ResourceExhaustedError("")
                             : s.table.MakeRoom(1, Who(), tier_ == nullptr ? 0 : BudgetHeadroom());
    if (!room.ok() && tier_ != nullptr && absl::IsResourceExhausted(room)) {
      RETURN_IF_ERROR(MoveToDiskLocked(
          ColdestLocked(StripeOf(hash), std::max<int64_t>(1, s.table.live() / 16), {}),
          DynamicOpContext()));
      room = s.table.MakeRoom(1, Who());
    }
    RETURN_IF_ERROR(room);
    s.table.Probe(record.key, hash, &pos);
    r = InsertAt(s.table, record.key, hash, pos, 0, 0, DynamicOpContext());
  }
  RecordHeader* h = Header(r);
  h->step = static_cast<uint32_t>(record.step);
  h->count = record.count;
  h->generation = 0;  // restored: older than any save that follows
  StoreRecord(record.data.data(), Data(r), /*bits=*/nullptr);
  return absl::OkStatus();
}

absl::Status DynamicShard::EraseKey(int64_t key) {
  const uint64_t hash = StripeHash(key);
  Stripe& s = *stripes_[StripeOf(hash)];
  absl::MutexLock lock(&s.mu);
  uint64_t pos = 0;
  if (s.table.Probe(key, hash, &pos)) {
    EraseAt(s.table, s.erased, pos, DynamicOpContext());
    return absl::OkStatus();
  }
  if (tier_ == nullptr || tier_->rows() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const bool on_disk, tier_->Has(key));
  if (!on_disk) return absl::OkStatus();
  return tier_->Write({}, nullptr, {key}, /*rows_delta=*/-1);
}

}  // namespace pstrain
