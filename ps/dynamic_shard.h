// One shard of a dynamic table on a ps: rows keyed by int64, each key's record made when the key
// first appears.
//
// A key's record holds, in one allocation, a 24-byte header (key, last step, count, generation),
// its row (dim floats) and every optimizer slot's row: a key is present with all of them or not at
// all, so a checkpoint or an export can never see a row without its slots. Records live in blocks
// that never move (a record keeps its place while its key lives); an index (open addressing,
// linear probing, 8 bytes per entry: 32 bits of the key's hash and the record's number, at most 3/4
// full) finds them. The shard is split into kStripes stripes by the key's hash, each with its own
// index, blocks and lock.
//
// Semantics (TF Recommenders-Addons / DeepRec's EmbeddingVariable, made exact):
//   - Training lookup (insert): a key not held is stored with its initial row, drawn from (the
//     initializer's seed, the key) and so the same however the table is sharded or restored, and
//     slots at the optimizer's initial values. Each occurrence counts one sighting (`count`) and
//     moves the key's last step up to the request's step (never back: async workers' steps arrive
//     out of order).
//   - Evaluation lookup: never changes the table; a key not held reads the default row (every float
//     DynamicTableDef.default_value).
//   - Admission (admit_min_count / admit_probability; off when both are 0): a key is stored only
//     once a training lookup sees it and either its sightings so far (this one included), as
//     counted by a count-min sketch of admission_sketch_bytes (4 rows of 8-bit saturating counters,
//     conservative update), reach admit_min_count, or a draw made at this sighting from (seed,
//     key, sighting) falls under admit_probability. The sketch may overcount a key (collisions),
//     never undercount. Until then the key reads the default row and its gradients are dropped.
//   - TTL (ttl_steps > 0): the shard's step is the largest step of any request it got. A key whose
//     last step is more than ttl_steps behind it is expired: it is never read, updated, exported,
//     saved or counted again (a training lookup stores it afresh), and its memory is freed by the
//     first training lookup or update at least max(1, ttl_steps / 8) steps after the last sweep.
//   - Capacity (max_rows, or max_bytes / (record bytes + 16 bytes of index), split evenly over the
//     table's shards): an insert that would take the shard past its capacity first evicts the
//     shard's least recently used keys: the smallest last step first; among equal steps, fewer
//     sightings first, then the smaller key. It evicts until the shard holds at most capacity -
//     capacity/16 - (keys being inserted) keys, so that evictions come in batches. Keys the same
//     request inserts are never evicted by it; a request that would insert more keys than the
//     capacity inserts the first `capacity` of them (by position) and reads the others as default.
//   - Memory: every allocation is reserved in the ps's MemoryBudget first; a growth past it fails
//     with kResourceExhausted naming the table and the bytes, and the failing op changes nothing.
//   - Disk tier (DynamicTableDef.disk_tier; ps/disk_tier.h): the capacity and the memory budget
//     bound the keys in RAM, not the keys held. Keys that don't fit move to the tier on the ps's
//     disk, in batches, coldest first by the capacity's order (a stripe short of memory moves its
//     own coldest 1/16th), never keys of the request making room; a key RAM lacks is read from
//     disk and moved back to RAM by a training lookup or an update (an evaluation lookup reads it
//     where it is). A key is in one tier at a time, with its header, row and slots, so admission,
//     TTL, erasure, exports, checkpoints and Stats see the same table either way. The keys of a
//     request that RAM lacks are read together (one MultiGet), with every stripe locked: that is
//     where keys move between tiers; keys found in RAM never wait for the disk. A move the disk
//     refuses (full, past disk_max_bytes) fails the op with kResourceExhausted and moves nothing;
//     a corrupt tier file is kDataLoss naming it.
//   - Stored formats (DynamicTableDef.row_format, slot_format; ps/row_format.h): rows in float16,
//     bfloat16 or int8 with the row's range, slots in float16 or bfloat16. Lookups, exports (unless
//     asked for the stored format), checkpoints and the optimizer see float32: a row is converted
//     as it is read and rounded as it is stored, stochastically for updates (gradients,
//     assign-adds), to nearest for values set (initial rows, assigns, restores). The disk tier
//     keeps records as RAM does.
//
// Thread-safe. Finds and updates of existing keys lock one stripe at a time, and so do a training
// lookup's inserts when no key can be turned away (no admission, no capacity: room is reserved in
// every stripe first, then each stripe's keys stored under its lock); with admission or a capacity,
// and for assigns, inserting keys locks every stripe of the shard (in order) for the insert's
// duration, which is where evictions happen. Every insert goes through one path (Insert), its
// cases parameters.
// Incremental checkpoints: every change stamps the key's record with the ps's current generation;
// erased and evicted keys are remembered with theirs while erasures are tracked.
//
// The parts, each a unit with its own tests (as LevelDB's cache splits into its hash table, its
// LRU cache and the sharded cache over them):
//   ps/dynamic_records.h    RecordTable: one stripe's records in blocks, and their index
//   ps/dynamic_admission.h  AdmissionSketch: the count-min sketch and the admission rule
//   ps/dynamic_eviction.h   StepClock (steps and TTL) and the capacity's eviction order
//   ps/dynamic_export.h     ExportCursor: where an export goes on
//   ps/dynamic_erasures.h   ErasureLog: erased keys for incremental saves
//   this file               DynamicShard: the stripes, the ops over them, checkpoints' access
#ifndef PSTRAIN_PS_DYNAMIC_SHARD_H_
#define PSTRAIN_PS_DYNAMIC_SHARD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/thread_pool.h"
#include "proto/ps_service.pb.h"
#include "ps/disk_tier.h"
#include "ps/dynamic_admission.h"
#include "ps/dynamic_erasures.h"
#include "ps/dynamic_eviction.h"
#include "ps/dynamic_records.h"
#include "ps/memory_budget.h"
#include "ps/optimizers.h"
#include "ps/row_format.h"
#include "ps/update_view.h"

namespace pstrain {

// What the store tells a shard about the request an operation belongs to.
struct DynamicOpContext {
  int64_t step = 0;             // the request's global step (0: none given)
  uint32_t generation = 1;      // the ps's current save generation: stamps every change
  bool track_erasures = false;  // remember erased and evicted keys (for incremental saves)
};

// One record as a checkpoint or an export sees it. `data` is the row then each slot's row as the
// shard stores them (record_data_bytes(); DynamicShard::DecodeRecord reads them as floats); valid
// while the shard is not changed.
struct DynamicRecordView {
  int64_t key = 0;
  int64_t step = 0;       // the last global step that touched it
  uint32_t count = 0;     // training-lookup sightings
  uint32_t generation = 0;
  const char* data = nullptr;
};

// A record to put back (restore): the same fields, owned.
struct DynamicRecord {
  int64_t key = 0;
  int64_t step = 0;
  uint32_t count = 0;
  std::vector<float> data;  // dim * (1 + slots)
};

class DynamicShard;

// A dynamic shard's disk tier's records changed after a generation, one at a time, in the
// checkpoints' order (routing hash, then the key as unsigned), from a snapshot of the tier: what a
// save streams beside RAM's sorted records, never holding the tier in memory.
class DynamicDiskRecords {
 public:
  // The next record (view.data valid until the next call), or false at the end or on an error.
  bool Next(DynamicRecordView* view);
  // Errors: the tier's (kDataLoss, kInternal).
  absl::Status status() const { return reader_->status(); }

 private:
  friend class DynamicShard;
  DynamicDiskRecords(const DynamicShard* shard, std::unique_ptr<DiskTier::Reader> reader,
                     uint32_t since);
  const DynamicShard* shard_;
  std::unique_ptr<DiskTier::Reader> reader_;
  uint32_t since_;
  std::string data_;
};

class DynamicShard {
 public:
  static constexpr int kStripes = 8;
  static constexpr int kHeaderBytes = 24;

  // Validates `def` (dynamic set, dim > 0, float32, the admission and eviction parameters) and
  // reserves the admission sketch. With def.dynamic().disk_tier, the shard's tier is made in
  // `disk` (the ps's store). Errors: kInvalidArgument naming the shard and the field (a disk tier
  // without a store); kResourceExhausted (the budget).
  static absl::StatusOr<std::unique_ptr<DynamicShard>> Create(
      const VariableShardDef& def, MemoryBudget* budget,
      std::shared_ptr<DiskStore> disk = nullptr);
  ~DynamicShard();
  DynamicShard(const DynamicShard&) = delete;
  DynamicShard& operator=(const DynamicShard&) = delete;

  const VariableShardDef& def() const { return def_; }
  const std::string& name() const { return def_.name(); }
  int64_t dim() const { return dim_; }
  // Bytes of a row as lookups and updates carry it (float32).
  int64_t row_bytes() const { return dim_ * 4; }
  int num_slots() const { return num_slots_; }
  const Optimizer* optimizer() const { return optimizer_.get(); }
  // Floats per record read as float32: the row and each slot's row.
  int64_t record_floats() const { return dim_ * (1 + num_slots_); }
  // How the row and the slots are stored (ps/row_format.h), and the bytes they take.
  RowFormat row_format() const { return row_format_; }
  RowFormat slot_format() const { return slot_format_; }
  int64_t stored_row_bytes() const { return stored_row_bytes_; }
  int64_t record_data_bytes() const { return stored_row_bytes_ + num_slots_ * stored_slot_bytes_; }
  // A record's stored data (a view's, a tier's value after the header) as record_floats() floats.
  void DecodeRecord(const char* data, float* out) const;
  // Bytes of one record (header, row, slots; a multiple of 8).
  int64_t record_bytes() const { return layout_.record_bytes; }
  // The shard's capacity in keys (0: none); with a disk tier, in RAM.
  int64_t capacity() const { return capacity_; }
  // The disk tier, or null.
  DiskTier* disk_tier() const { return tier_.get(); }

  // A request's positions grouped by the stripe of their key (a counting sort): stripe i's are
  // positions[begin[i], begin[i + 1]), in their order in the request.
  struct Groups {
    std::vector<int32_t> positions;
    int64_t begin[kStripes + 1] = {};
    const int32_t* of(int stripe) const { return positions.data() + begin[stripe]; }
    int64_t size(int stripe) const { return begin[stripe + 1] - begin[stripe]; }
  };
  // An op's keys as PrepareKeys checked them: each key, its hash (the routing hash that placed it
  // in this shard also picks its stripe and index position) and the positions by stripe.
  struct KeyBatch {
    std::vector<int64_t> keys;
    std::vector<uint64_t> hashes;
    Groups groups;
    int64_t size() const { return static_cast<int64_t>(keys.size()); }
  };

  // Checks `keys` and prepares them for Lookup or Update, in one pass (each key hashed once).
  // Errors: kInvalidArgument naming the shard: keys not whole int64s, a key that routes to
  // another shard of the table (naming it, its position and both shards).
  absl::Status PrepareKeys(absl::string_view keys, absl::string_view what, KeyBatch* batch) const;
  // PrepareKeys' checks alone.
  absl::Status ValidateKeys(absl::string_view keys, absl::string_view what) const;
  // Rows for the prepared keys, keys.size() * row_bytes() bytes into `out`. With `insert`, a
  // training lookup (see above). Errors: kResourceExhausted (an insert past the budget: nothing is
  // inserted, nothing counted; a move to disk refused); kDataLoss (a corrupt tier file).
  absl::Status Lookup(const KeyBatch& keys, bool insert, const DynamicOpContext& ctx, char* out,
                      ThreadPool* pool);
  // PrepareKeys, then Lookup (its errors, then Lookup's).
  absl::Status Lookup(absl::string_view keys, bool insert, const DynamicOpContext& ctx, char* out,
                      ThreadPool* pool);

  // Errors: kInvalidArgument naming the shard (a range instead of keys, values that are not one
  // row per key, float32 only, gradients without an optimizer, ERASE with values), and those of
  // PrepareKeys; on success `batch` holds the op's keys, prepared.
  absl::Status ValidateUpdate(const UpdateOpView& op, KeyBatch* batch) const;
  absl::Status ValidateUpdate(const UpdateOpView& op) const;
  // Applies an op that ValidateUpdate accepted, `keys` its batch. Errors: kResourceExhausted (an
  // assign that inserts past the budget; nothing changes; a move to disk refused: the rows it
  // concerns are not updated); kDataLoss (a corrupt tier file).
  absl::Status Update(const UpdateOpView& op, const KeyBatch& keys, const DynamicOpContext& ctx,
                      ThreadPool* pool);
  // ValidateUpdate's preparation (the op validated already), then Update.
  absl::Status Update(const UpdateOpView& op, const DynamicOpContext& ctx, ThreadPool* pool);

  // Up to `max_keys` keys from `cursor` (see ExportRequest): RAM's stripes, then the disk tier in
  // key order; with `stored_format`, values as stored (stored_row_bytes() each), else float32.
  // Errors: kInvalidArgument (a malformed cursor); kDataLoss (a corrupt tier file).
  absl::Status Export(absl::string_view cursor, int64_t max_keys, bool with_slots,
                      ExportResponse* response, bool stored_format = false) const;

  DynamicShardStats Stats() const;
  // The stripe that holds `key` (for tests of how work is spread).
  static int StripeOfKey(int64_t key);
  // Keys held, in both tiers (expired keys not counted in RAM; on disk, until the next sweep).
  int64_t Size() const;
  // Bytes held in RAM: records' blocks, indexes, tombstones, the sketch (not the ps's disk store).
  int64_t BytesHeld() const;
  // Gradients applied so far (Adam's t).
  int64_t apply_count() const { return apply_count_.load(); }
  void set_apply_count(int64_t n) { apply_count_.store(n); }

  // ---- Checkpoints. The caller keeps the shard from changing (the store's update gate) while
  // these run; readers (exports, stats) may run beside them.
  // Calls fn for every live, unexpired record changed after generation `since` (0: all), RAM's
  // then the disk tier's (a disk record's view.data is valid during its call only). Errors:
  // kDataLoss, kInternal (reading the tier).
  absl::Status ForEachRecord(uint32_t since,
                             const std::function<void(const DynamicRecordView&)>& fn) const;
  // ForEachRecord's RAM records alone (view.data valid while the shard is not changed).
  void ForEachRamRecord(uint32_t since,
                        const std::function<void(const DynamicRecordView&)>& fn) const;
  // The disk tier's records (see DynamicDiskRecords); null without a tier.
  std::unique_ptr<DynamicDiskRecords> DiskRecords(uint32_t since) const;
  // Keys erased or evicted after generation `since` and not stored again since, as tracked.
  std::vector<int64_t> ErasedSince(uint32_t since) const;
  // Forgets tracked erasures of generation `through` or earlier (no later delta needs them).
  void ForgetErasuresThrough(uint32_t through);
  // A restore fills a fresh shard, which no one else sees yet: stores `record` (replacing the key's
  // record if held), or erases a key. Errors: kInvalidArgument (a record of the wrong size, a key
  // of another shard), kResourceExhausted. With a disk tier, records past RAM go to disk.
  absl::Status PutRecord(const DynamicRecord& record);
  // Errors: those of the disk tier.
  absl::Status EraseKey(int64_t key);
  // The shard's step (restores set it from the saved records: the largest last step).
  int64_t step() const { return clock_.step(); }
  void AdvanceStep(int64_t step) { clock_.Advance(step); }

 private:
  friend class DynamicDiskRecords;
  // A stripe: its lock, and the keys its lock guards. A checkpoint reads it under `mu` too, with
  // the store's update gate keeping every writer out.
  struct Stripe {
    explicit Stripe(const RecordLayout& layout, MemoryBudget* budget) : table(layout, budget) {}
    mutable absl::Mutex mu;
    RecordTable table ABSL_GUARDED_BY(mu);
    ErasureLog erased ABSL_GUARDED_BY(mu);  // while erasures are tracked
    int64_t next_sweep_step ABSL_GUARDED_BY(mu) = 0;
  };
  // How Insert runs; what differs between a training lookup's inserts and an assign's.
  struct InsertCall {
    // Turn away keys the admission sketch doesn't admit (a training lookup; an assign stores all).
    bool admission = false;
    // Count each position's sighting (a training lookup).
    bool sighting = false;
    // The caller holds every stripe's lock (else Insert takes each stripe's lock in turn, which
    // it may only when no key can be turned away: no admission, no capacity).
    bool locked = false;
    // If not null: records[p] is set to the record of each position of `missing` whose key is held
    // at the end (valid while the stripes stay locked).
    std::vector<char*>* records = nullptr;
    // If not null: the row of each position held at the end is copied to out + p * row_bytes().
    char* out = nullptr;
  };
  struct Chosen;

  explicit DynamicShard(VariableShardDef def);

  std::string Who() const;
  // Asserts (and tells the analysis) that the caller holds `s`'s lock: code that runs with every
  // stripe locked (LockAll) calls it before it touches a stripe.
  static void AssertHeld(const Stripe& s) ABSL_ASSERT_EXCLUSIVE_LOCK(s.mu) { s.mu.AssertHeld(); }

  // ---- Stored rows (ps/row_format.h). Every row is stored as float32 (plain_), or converted here.
  // A record's stored data, after its header.
  static char* Data(char* record) { return record + kHeaderBytes; }
  static const char* Data(const char* record) { return record + kHeaderBytes; }
  // The row of the record data `data` as row_bytes() bytes of floats at `out`.
  void ReadRow(const char* data, char* out) const;
  // Stores record_floats() floats (row, then slots) as record data: stochastically rounded with
  // `bits` (an update), to nearest without.
  void StoreRecord(const float* floats, char* data, RoundingBits* bits) const;

  // ---- One stripe, its lock held (a stripe's table and erasures are passed in by reference:
  // reaching them needs the lock).
  // Stores `key` at the empty index position `pos` of `table` (room made first) with its initial
  // row and slots. Returns its record.
  char* InsertAt(RecordTable& table, int64_t key, uint64_t hash, uint64_t pos, uint32_t step,
                 uint32_t count, const DynamicOpContext& ctx);
  // Removes the key at index position `pos`, remembering it in `erased` while erasures are
  // tracked.
  static void EraseAt(RecordTable& table, ErasureLog& erased, uint64_t pos,
                      const DynamicOpContext& ctx);
  // Erases the stripe's expired keys, if a sweep is due.
  void MaybeSweep(Stripe& s, const DynamicOpContext& ctx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Finds or stores each key at `positions` (room made first; repeats and keys stored meanwhile
  // count a sighting; an expired key is stored afresh), setting records[p] and copying rows to
  // `out` where those are not null. Returns how many keys it stored.
  int64_t StoreWalk(Stripe& s, const int64_t* keys, const uint64_t* hashes,
                    const int32_t* positions, int64_t n, bool sighting,
                    const DynamicOpContext& ctx, std::vector<char*>* records, char* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

  // ---- Across stripes.
  // MaybeSweep on every stripe, each under its lock (training lookups and updates, at their start),
  // and the disk tier's sweep. Errors: the tier's.
  absl::Status SweepDueStripes(const DynamicOpContext& ctx);
  // Runs fn(stripe index) for each stripe with positions in `groups`, each under its lock, over
  // `pool`.
  void ForEachStripe(const Groups& groups, ThreadPool* pool,
                     const std::function<void(int)>& fn) const;
  // Runs fn(stripe index) for each stripe with positions in `groups`, over `pool`, every stripe
  // locked by the caller.
  void ForEachLockedStripe(const Groups& groups, ThreadPool* pool,
                           const std::function<void(int)>& fn) const;
  // Finds every key, copying its row to `out` (if not null) under its stripe's lock; for training
  // lookups counts each found key's sighting. found[p]: the key at p is held (and unexpired).
  // Returns how many positions were found.
  int64_t Find(const KeyBatch& batch, bool sighting, bool may_sweep, const DynamicOpContext& ctx,
               std::vector<uint8_t>* found, char* out, ThreadPool* pool);
  // The one insert path: stores the keys at `missing` (positions of `batch`) that are still
  // missing, as `call` says (see InsertCall). With admission or a capacity (every stripe locked),
  // Choose decides first which keys are stored, evicting to make room. Errors:
  // kResourceExhausted (memory: nothing stored, nothing counted; evictions stand).
  absl::Status Insert(const KeyBatch& batch, const std::vector<int32_t>& missing,
                      const InsertCall& call, const DynamicOpContext& ctx, ThreadPool* pool);
  // Every stripe locked: which of `missing` are still missing (counting the sightings of those
  // held now), which of those keys are admitted and fit the capacity, and evictions to make room.
  void Choose(const KeyBatch& batch, const std::vector<int32_t>& missing, const InsertCall& call,
              const DynamicOpContext& ctx, ThreadPool* pool, Chosen* chosen);
  // Update's three kinds of op (validated, keys prepared). Errors: the disk tier's.
  absl::Status Erase(const KeyBatch& batch, const DynamicOpContext& ctx);
  absl::Status ApplyGradients(const UpdateOpView& op, const KeyBatch& batch,
                              const DynamicOpContext& ctx, ThreadPool* pool);
  // ASSIGN and ASSIGN_ADD. Errors: kResourceExhausted (storing the keys: nothing changes).
  absl::Status Assign(const UpdateOpView& op, const KeyBatch& batch, const DynamicOpContext& ctx,
                      ThreadPool* pool);
  // Every stripe locked: evicts least recently used keys until at most `keep` are held (without a
  // disk tier: with one, FaultInLocked moves them to disk).
  void EvictLeastRecentlyUsed(int64_t keep, const DynamicOpContext& ctx);

  // ---- The disk tier. Keys move between tiers only with every stripe locked (or, in a restore,
  // which no request sees, under one stripe's lock).
  // For the positions whose keys RAM lacks: reads them from disk at once. With `promote`, moves
  // those the disk holds into RAM (making room first, for the keys not found too if
  // `room_for_new`: the insert that follows), expired ones off the disk; else copies their rows
  // to out + p * row_bytes() and sets found[p] (an evaluation: nothing changes), and copies the
  // rows of keys RAM holds by now likewise. Errors: the tier's; kResourceExhausted (no room).
  absl::Status FaultInLocked(const KeyBatch& batch, const std::vector<int32_t>& positions,
                             bool promote, bool room_for_new, const DynamicOpContext& ctx,
                             char* out, std::vector<uint8_t>* found);
  // Room in RAM for need[i] more keys in stripe i, moving the coldest keys not of `batch` to disk:
  // below the capacity, and out of each stripe that would need new memory past the budget's
  // headroom (BudgetHeadroom).
  absl::Status EnsureRoomLocked(const int64_t* need, const KeyBatch& batch,
                                const DynamicOpContext& ctx);
  // Up to `count` of the coldest keys not in `keep`, of stripe `stripe` (-1: every stripe), in
  // the capacity's eviction order; the stripes are locked.
  std::vector<EvictionCandidate> ColdestLocked(int stripe, int64_t count,
                                               const absl::flat_hash_set<int64_t>& keep) const;
  // Moves `victims` (held in RAM, their stripes locked) to disk in one write, then frees them
  // (expired ones are erased). Errors: the tier's write (nothing moves).
  absl::Status MoveToDiskLocked(const std::vector<EvictionCandidate>& victims,
                                const DynamicOpContext& ctx);
  // The part of the ps's memory budget a shard with a tier leaves to others: it takes new memory
  // only while that much stays free, and otherwise reuses its own records (moving its coldest
  // keys to disk), so that the last eighth stays for the tables and stripes that have nothing to
  // move yet.
  int64_t BudgetHeadroom() const;
  // Drops the disk tier's expired keys if a sweep is due (every stripe locked by the caller).
  absl::Status SweepDiskIfDue(const DynamicOpContext& ctx);
  // Keys held in every stripe (every stripe locked).
  int64_t LiveLocked() const;
  // `positions` grouped by the stripe of their key, in order.
  static Groups ByStripe(const uint64_t* hashes, const int32_t* positions, size_t count);
  void LockAll() const;
  void UnlockAll() const;

  VariableShardDef def_;
  int64_t dim_ = 0;
  int num_slots_ = 0;
  RowFormat row_format_ = ROW_FLOAT32;
  RowFormat slot_format_ = ROW_FLOAT32;
  int64_t stored_row_bytes_ = 0;
  int64_t stored_slot_bytes_ = 0;
  bool plain_ = true;  // row and slots in float32
  RecordLayout layout_;
  int64_t capacity_ = 0;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<float> slot_init_;  // per slot
  std::vector<float> default_row_;

  std::vector<std::unique_ptr<Stripe>> stripes_;
  std::unique_ptr<DiskTier> tier_;
  MemoryBudget* budget_ = nullptr;  // not owned; may be null
  absl::Mutex tier_sweep_mu_;
  int64_t tier_next_sweep_ ABSL_GUARDED_BY(tier_sweep_mu_) = 0;
  // Changed only with every stripe locked.
  AdmissionSketch admission_;
  StepClock clock_;

  // Where requests start taking stripes (ForEachStripe): each the next.
  mutable std::atomic<uint32_t> next_start_{0};
  std::atomic<int64_t> apply_count_{0};
  // Ops that rounded stored rows stochastically (each op's rounding streams derive from its number).
  std::atomic<uint64_t> rounding_ops_{0};
  // Stats.
  std::atomic<int64_t> admitted_{0}, rejected_{0}, evicted_ttl_{0}, evicted_capacity_{0},
      erased_{0}, dropped_gradients_{0}, moved_to_disk_{0}, moved_to_ram_{0};
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_DYNAMIC_SHARD_H_
