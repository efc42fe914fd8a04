// The disk tier of a dynamic table shard (ps/dynamic_shard.h): the records that don't fit the
// shard's RAM, in a RocksDB database on the ps's local disk, keyed by the table's key.
//
// The tier is a cache of the checkpoint, not a checkpoint: Open wipes its directory, the database
// runs without a write-ahead log, and the directory is removed when the tier goes. What survives a
// ps that dies is what its last checkpoint saved (the checkpoint reads both tiers).
//
// Records are kept in the checkpoints' order: by the key's routing hash (partitioners/
// key_routing.h), then the key as unsigned, so a save streams the tier beside RAM's sorted records.
// A record on disk is the RAM record's bytes (ps/dynamic_records.h: the 24-byte header, then the
// row and each slot's row); the shard keeps its tiers disjoint (a key is in RAM or on disk, never
// both), so the tier knows how many rows it holds without asking RocksDB. Requests are batched: a
// lookup's keys are read together (MultiGet), a batch of moved rows is one WriteBatch.
//
// Memory: the write buffers (2 x write_buffer_bytes) and the block cache (cache_bytes, which holds
// the files' index and filter blocks too) are reserved in the ps's MemoryBudget at Open.
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

struct DiskTierOptions {
  // The tier's directory; wiped at Open, removed with the tier. Required.
  std::string dir;
  // The most bytes of rows the tier may hold (record bytes x rows); 0: no limit.
  int64_t max_bytes = 0;
  // RocksDB's memtable size (two are kept); 2 MiB.
  int64_t write_buffer_bytes = int64_t{2} << 20;
  // The block cache (data, index and filter blocks); 4 MiB.
  int64_t cache_bytes = int64_t{4} << 20;
  // The environment RocksDB runs in (not owned); null: the default. Tests wrap it to inject faults.
  rocksdb::Env* env = nullptr;
};

struct DiskTierCounters {
  int64_t rows = 0;           // rows held
  int64_t bytes = 0;          // rows x value bytes
  int64_t file_bytes = 0;     // the database's files (SST) on disk now
  int64_t hits = 0;           // keys read and found
  int64_t misses = 0;         // keys read and not found
  int64_t bytes_read = 0;     // value bytes returned by reads (found keys)
  int64_t bytes_written = 0;  // value bytes written (rows moved to disk)
  int64_t memory_bytes = 0;   // reserved in the budget (write buffers, cache)
};

class DiskTier {
 public:
  // Opens a fresh tier for records of `value_bytes` bytes. `who` names the shard in errors.
  // Errors: kInvalidArgument (no directory, value_bytes < 1), kResourceExhausted (the memory
  // budget), kInternal (the directory can't be made, RocksDB won't open).
  static absl::StatusOr<std::unique_ptr<DiskTier>> Open(const DiskTierOptions& options,
                                                        int64_t value_bytes, std::string who,
                                                        MemoryBudget* budget);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  const std::string& dir() const { return options_.dir; }
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
  std::unique_ptr<Reader> NewReader() const;

  // Calls fn(key, record) for every record from *from_key (inclusive; null: the first) in the
  // tier's order, from one
  // consistent view, until fn returns false; *next (may be null) is the key fn declined, and
  // *more whether there was one. `record` is valid during the call only (and maybe unaligned).
  // Errors: as Read.
  absl::Status Scan(const int64_t* from_key, const std::function<bool(int64_t, const char*)>& fn,
                    int64_t* next = nullptr, bool* more = nullptr) const;
  // Flushes the memtable into a file (tests, and a look at file sizes).
  absl::Status Flush();

  DiskTierCounters Counters() const;

 private:
  struct Db;
  DiskTier(const DiskTierOptions& options, int64_t value_bytes, std::string who,
           MemoryBudget* budget);
  absl::Status FromRocks(absl::string_view what, const void* status) const;
  absl::Status BadEntry(size_t key_bytes, size_t value_bytes) const;

  const DiskTierOptions options_;
  const int64_t value_bytes_;
  const std::string who_;
  BudgetReservation memory_;
  std::unique_ptr<Db> db_;
  std::atomic<int64_t> rows_{0};
  mutable std::atomic<int64_t> hits_{0}, misses_{0}, bytes_read_{0}, bytes_written_{0};
};

// The directory of a shard's tier under a ps's disk directory: the shard's name with every byte
// other than [A-Za-z0-9._-] written as %XX.
std::string DiskTierDirName(absl::string_view shard);

}  // namespace pstrain

#endif  // PSTRAIN_PS_DISK_TIER_H_
