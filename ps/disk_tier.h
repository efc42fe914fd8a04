// The disk tiers of a ps's dynamic table shards (ps/dynamic_shard.h): the records that don't fit
// a shard's RAM, in one RocksDB database per ps on its local disk (a DiskStore), each shard's under
// a prefix of its own (a DiskTier), keyed by the table's key. One database per ps, not per shard:
// its write buffers and block cache are the ps's, whatever the number of tables, and a restore's
// staged shards share them.
//
// The store is a cache of the checkpoint, not a checkpoint: Open wipes its directory, the database
// runs without a write-ahead log, a tier's rows are deleted when the tier goes, and the directory
// is removed when the store goes. What survives a ps that dies is what its last checkpoint saved
// (the checkpoint reads both tiers).
//
// Records are kept in the checkpoints' order: by the key's routing hash (partitioners/
// key_routing.h), then the key as unsigned, so a save streams the tier beside RAM's sorted records.
// A record on disk is the RAM record's bytes (ps/dynamic_records.h: the 24-byte header, then the
// row and each slot's row); the shard keeps its tiers disjoint (a key is in RAM or on disk, never
// both), so the tier knows how many rows it holds without asking RocksDB. Requests are batched: a
// lookup's keys are read together (MultiGet), a batch of moved rows is one WriteBatch.
//
// Memory: the write buffers (2 x write_buffer_bytes) and the block cache (cache_bytes, which holds
// the files' index and filter blocks too) are reserved in the ps's MemoryBudget at Open (8 MiB by
// default; ForBudget sizes them to a small budget).
//
// Errors name the shard and the directory: a write past max_bytes or one the disk refuses (full,
// failing) is kResourceExhausted and writes nothing; a corrupt file is kDataLoss (RocksDB's message
// names the file); other I/O errors are kInternal.
//
// Thread-safe (RocksDB's own locking); the shard serializes the calls that move rows between its
// tiers.
#ifndef PSTRAIN_PS_DISK_TIER_H_
#define PSTRAIN_PS_DISK_TIER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ps/memory_budget.h"

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace pstrain {

struct DiskStoreOptions {
  // The store's directory; wiped at Open, removed with the store. Required.
  std::string dir;
  // RocksDB's memtable size (two are kept); 2 MiB.
  int64_t write_buffer_bytes = int64_t{2} << 20;
  // The block cache (data, index and filter blocks); 4 MiB.
  int64_t cache_bytes = int64_t{4} << 20;
  // Reads with O_DIRECT, past the kernel's page cache (whose memory the budget doesn't count): for
  // tables far larger than the machine's memory, and for honest benchmarks. Default false.
  bool direct_reads = false;
  // The environment RocksDB runs in (not owned); null: the default.
  rocksdb::Env* env = nullptr;

  // These options with buffers sized to a ps whose memory budget is `budget_bytes` (0: none): at
  // most a quarter of it in all (write buffers of a 16th, a cache of an eighth), at least 192 KiB.
  DiskStoreOptions ForBudget(int64_t budget_bytes) const;
};

// The ps's database. Thread-safe.
class DiskStore {
 public:
  // Errors: kInvalidArgument (no directory, sizes out of range), kResourceExhausted (the memory
  // budget, naming `who`), kInternal (the directory can't be made, RocksDB won't open).
  static absl::StatusOr<std::shared_ptr<DiskStore>> Open(const DiskStoreOptions& options,
                                                         MemoryBudget* budget,
                                                         const std::string& who = "disk store");
  ~DiskStore();
  DiskStore(const DiskStore&) = delete;
  DiskStore& operator=(const DiskStore&) = delete;

  const std::string& dir() const { return options_.dir; }
  int64_t memory_bytes() const { return memory_.bytes(); }
  // The database's files (SST) on disk now.
  int64_t FileBytes() const;
  // Flushes the memtable into a file (tests, and a look at file sizes).
  absl::Status Flush();

 private:
  friend class DiskTier;
  struct Db;
  DiskStore(const DiskStoreOptions& options, MemoryBudget* budget);

  const DiskStoreOptions options_;
  BudgetReservation memory_;
  std::unique_ptr<Db> db_;
  std::atomic<uint32_t> next_prefix_{1};
};

struct DiskTierOptions {
  // The most bytes of rows the tier may hold (record bytes x rows); 0: no limit.
  int64_t max_bytes = 0;
};

struct DiskTierCounters {
  int64_t rows = 0;           // rows held
  int64_t bytes = 0;          // rows x value bytes
  int64_t file_bytes = 0;     // the store's files (SST) on disk now (every tier's)
  int64_t hits = 0;           // keys read and found
  int64_t misses = 0;         // keys read and not found
  int64_t bytes_read = 0;     // value bytes returned by reads (found keys)
  int64_t bytes_written = 0;  // value bytes written (rows moved to disk)
  int64_t memory_bytes = 0;   // the store's, reserved in the budget (write buffers, cache)
};

class DiskTier {
 public:
  // A fresh, empty tier in `store` for records of `value_bytes` bytes. `who` names the shard in
  // errors. Errors: kInvalidArgument (no store, value_bytes < 1, max_bytes < 0).
  static absl::StatusOr<std::unique_ptr<DiskTier>> Open(std::shared_ptr<DiskStore> store,
                                                        const DiskTierOptions& options,
                                                        int64_t value_bytes, std::string who);
  // Deletes the tier's rows (one range deletion).
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  const std::string& dir() const { return store_->dir(); }
  DiskStore* store() const { return store_.get(); }
  int64_t value_bytes() const { return value_bytes_; }
  int64_t rows() const { return rows_.load(std::memory_order_relaxed); }

  // Reads `n` keys at once: found[i] = 1 and the record at values + i * value_bytes() if held.
  // Errors: kDataLoss (a corrupt file), kInternal (other I/O errors).
  absl::Status Read(const int64_t* keys, size_t n, char* values, std::vector<uint8_t>* found);
  // Whether `key` is held (one read). Errors: as Read.
  absl::StatusOr<bool> Has(int64_t key);

  // One atomic write: the records `put_values` (value_bytes() each) under `put_keys`, and the
  // deletion of `delete_keys`. `rows_delta` is how many rows the tier holds more after it (the
  // caller knows which puts are new keys and which deletions remove held ones). Errors:
  // kResourceExhausted (past max_bytes, or the disk refused the write: nothing is written),
  // kInternal.
  absl::Status Write(const std::vector<int64_t>& put_keys, const char* put_values,
                     const std::vector<int64_t>& delete_keys, int64_t rows_delta);

  // Records in order, one at a time, from one consistent view (a snapshot of the tier).
  class Reader {
   public:
    ~Reader();
    bool Valid() const;
    int64_t key() const;
    const char* value() const;  // value_bytes(), valid until Next (maybe unaligned)
    void Next();
    // Errors: kDataLoss (a corrupt file or entry), kInternal.
    absl::Status status() const;

   private:
    friend class DiskTier;
    struct Impl;
    explicit Reader(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
  };
  // From *from_key (inclusive; null: the first record).
  std::unique_ptr<Reader> NewReader(const int64_t* from_key = nullptr) const;

  // Calls fn(key, record) for every record from *from_key (inclusive; null: the first) in the
  // tier's order, from one
  // consistent view, until fn returns false; *next (may be null) is the key fn declined, and
  // *more whether there was one. `record` is valid during the call only (and maybe unaligned).
  // Errors: as Read.
  absl::Status Scan(const int64_t* from_key, const std::function<bool(int64_t, const char*)>& fn,
                    int64_t* next = nullptr, bool* more = nullptr) const;
  // The store's Flush.
  absl::Status Flush() { return store_->Flush(); }

  DiskTierCounters Counters() const;

 private:
  DiskTier(std::shared_ptr<DiskStore> store, const DiskTierOptions& options, int64_t value_bytes,
           std::string who, uint32_t prefix);
  void EncodeKey(int64_t key, char* out) const;
  absl::Status FromRocks(absl::string_view what, const void* status) const;
  absl::Status BadEntry(size_t key_bytes, size_t value_bytes) const;

  const std::shared_ptr<DiskStore> store_;
  const DiskTierOptions options_;
  const int64_t value_bytes_;
  const std::string who_;
  const uint32_t prefix_;
  std::atomic<int64_t> rows_{0};
  mutable std::atomic<int64_t> hits_{0}, misses_{0}, bytes_read_{0}, bytes_written_{0};
};


}  // namespace pstrain

#endif  // PSTRAIN_PS_DISK_TIER_H_
