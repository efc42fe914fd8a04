#include "ps/disk_tier.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "partitioners/key_routing.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace pstrain {
namespace {

// Keys as the tier's prefix (4 big-endian bytes), the routing hash's 4, then the key's 8 (as
// unsigned): RocksDB's byte order is then the checkpoints' order within a tier.
constexpr size_t kKeyBytes = 16;

void PutBigEndian32(uint32_t v, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(v >> (24 - 8 * i));
}

void EncodeRoutedKey(uint32_t prefix, const RoutedKey& routed, char* out) {
  PutBigEndian32(prefix, out);
  PutBigEndian32(routed.route, out + 4);
  for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<char>(routed.key >> (56 - 8 * i));
}

int64_t DecodeKey(const char* p) {
  uint64_t u = 0;
  for (int i = 8; i < 16; ++i) u = (u << 8) | static_cast<unsigned char>(p[i]);
  return static_cast<int64_t>(u);
}

absl::Status FromRocksStatus(const std::string& where, const rocksdb::Status& s) {
  if (s.IsCorruption()) {
    return absl::DataLossError(absl::StrCat(where, "a corrupt file: ", s.ToString()));
  }
  if (s.IsNoSpace() || s.IsIOError()) return absl::ResourceExhaustedError(where + s.ToString());
  return absl::InternalError(where + s.ToString());
}

}  // namespace

// ---- The store.

struct DiskStore::Db {
  std::shared_ptr<rocksdb::Cache> cache;
  rocksdb::Options options;
  std::unique_ptr<rocksdb::DB> db;
  rocksdb::WriteOptions write;
  rocksdb::ReadOptions read;
};

DiskStoreOptions DiskStoreOptions::ForBudget(int64_t budget_bytes) const {
  DiskStoreOptions o = *this;
  if (budget_bytes <= 0) return o;
  // A quarter of the budget in all: two write buffers of a 16th each and a cache of an eighth,
  // which holds the files' index and filter blocks (about 1% of the rows on disk) so that a read
  // of a key costs one block read, not three. Measured on the click log with tables 8x the budget
  // (bench/tier_train_bench): buffers of a 128th and a cache of a 64th ran at 0.54x of this, a 64th
  // and an eighth at 0.66x; an eighth each, at the cost of RAM rows, no faster.
  o.write_buffer_bytes =
      std::max<int64_t>(64 << 10, std::min(o.write_buffer_bytes, budget_bytes / 16));
  o.cache_bytes = std::max<int64_t>(64 << 10, std::min(o.cache_bytes, budget_bytes / 8));
  return o;
}

DiskStore::DiskStore(const DiskStoreOptions& options, MemoryBudget* budget)
    : options_(options), memory_(budget) {}

DiskStore::~DiskStore() {
  if (db_ != nullptr && db_->db != nullptr) {
    db_->db->Close().PermitUncheckedError();  // going away: nothing to keep
    db_->db.reset();
  }
  std::error_code ignored;  // a directory left behind is wiped by the next Open
  std::filesystem::remove_all(options_.dir, ignored);
}

absl::StatusOr<std::shared_ptr<DiskStore>> DiskStore::Open(const DiskStoreOptions& options,
                                                           MemoryBudget* budget,
                                                           const std::string& who) {
  if (options.dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": a disk store needs a directory"));
  }
  if (options.write_buffer_bytes < (64 << 10) || options.cache_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": disk store options out of range (write_buffer_bytes ", options.write_buffer_bytes,
        " (at least 64 KiB), cache_bytes ", options.cache_bytes, ")"));
  }
  std::shared_ptr<DiskStore> store(new DiskStore(options, budget));
  const int64_t memory = 2 * options.write_buffer_bytes + options.cache_bytes;
  if (absl::Status s =
          store->memory_.Add(memory, absl::StrCat(who, " (its write buffers and cache)"));
      !s.ok()) {
    return s;
  }
  std::error_code error;
  std::filesystem::remove_all(options.dir, error);
  if (!error) std::filesystem::create_directories(options.dir, error);
  if (error) {
    return absl::InternalError(absl::StrCat(who, ": can't make the disk store's directory ",
                                            options.dir, ": ", error.message()));
  }
  store->db_ = std::make_unique<Db>();
  Db& d = *store->db_;
  rocksdb::BlockBasedTableOptions table;
  if (options.cache_bytes > 0) {
    // Half the cache is kept for the index and filter blocks (high priority), which data blocks
    // can't push out.
    d.cache = rocksdb::NewLRUCache(static_cast<size_t>(options.cache_bytes), -1,
                                   /*strict_capacity_limit=*/false, /*high_pri_pool_ratio=*/0.5);
    table.block_cache = d.cache;
    table.cache_index_and_filter_blocks = true;
    table.cache_index_and_filter_blocks_with_high_priority = true;
    table.pin_l0_filter_and_index_blocks_in_cache = true;
    table.pin_top_level_index_and_filter = true;
  } else {
    table.no_block_cache = true;
  }
  // Index and filter in 4 KiB partitions under a small top level: a read whose partition isn't
  // cached reads one partition, not a file's whole filter (hundreds of KiB, checksummed on every
  // read). With tables 8x the budget the metadata doesn't fit the cache, and whole filter blocks
  // read again and again took 10% of the click-log job's time (perf, bench/tier_train_bench).
  table.index_type = rocksdb::BlockBasedTableOptions::kTwoLevelIndexSearch;
  table.partition_filters = true;
  table.metadata_block_size = 4096;
  // Point reads of one record: small blocks, a whole-key Bloom filter so that keys never stored
  // (most of a training lookup's misses) cost no disk read, XXH3 checksums (Debian's RocksDB
  // computes CRC-32C in software).
  table.block_size = 4096;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.checksum = rocksdb::kXXH3;
  table.format_version = 5;
  d.options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  d.options.create_if_missing = true;
  d.options.error_if_exists = true;
  d.options.paranoid_checks = true;
  d.options.compression = rocksdb::kNoCompression;  // float rows don't compress
  d.options.write_buffer_size = static_cast<size_t>(options.write_buffer_bytes);
  d.options.max_write_buffer_number = 2;
  // A Bloom filter over each memtable's whole keys (2% of it): most keys a read asks for are in no
  // memtable (keys never stored, rows moved out long ago), and the filter answers them without a
  // skip-list search.
  d.options.memtable_whole_key_filtering = true;
  d.options.memtable_prefix_bloom_size_ratio = 0.02;
  d.options.max_open_files = -1;
  d.options.info_log_level = rocksdb::WARN_LEVEL;
  d.options.keep_log_file_num = 1;
  d.options.max_background_jobs = 2;
  d.options.level_compaction_dynamic_level_bytes = true;
  d.options.avoid_unnecessary_blocking_io = true;
  d.options.use_direct_reads = options.direct_reads;
  if (options.env != nullptr) d.options.env = options.env;
  d.write.disableWAL = true;  // a cache of the checkpoint: nothing to recover after a crash
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(d.options, options.dir, &raw);
  if (!s.ok()) {
    return absl::InternalError(absl::StrCat(who, ": can't open the disk store at ", options.dir,
                                            ": ", s.ToString()));
  }
  d.db.reset(raw);
  return store;
}

int64_t DiskStore::FileBytes() const {
  uint64_t files = 0;
  if (!db_->db->GetIntProperty(rocksdb::DB::Properties::kTotalSstFilesSize, &files)) return 0;
  return static_cast<int64_t>(files);
}

absl::Status DiskStore::Flush() {
  rocksdb::Status s = db_->db->Flush(rocksdb::FlushOptions());
  if (!s.ok()) {
    return FromRocksStatus(absl::StrCat("flushing the disk store ", options_.dir, ": "), s);
  }
  return absl::OkStatus();
}

// ---- A shard's tier.

DiskTier::DiskTier(std::shared_ptr<DiskStore> store, const DiskTierOptions& options,
                   int64_t value_bytes, std::string who, uint32_t prefix)
    : store_(std::move(store)),
      options_(options),
      value_bytes_(value_bytes),
      who_(std::move(who)),
      prefix_(prefix) {}

DiskTier::~DiskTier() {
  char begin[4], end[4];
  PutBigEndian32(prefix_, begin);
  PutBigEndian32(prefix_ + 1, end);
  // The rows go with the tier; a failure leaves them until the store goes (a cache: nothing lost).
  store_->db_->db
      ->DeleteRange(store_->db_->write, store_->db_->db->DefaultColumnFamily(),
                    rocksdb::Slice(begin, 4), rocksdb::Slice(end, 4))
      .PermitUncheckedError();
}

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(std::shared_ptr<DiskStore> store,
                                                         const DiskTierOptions& options,
                                                         int64_t value_bytes, std::string who) {
  if (store == nullptr) return absl::InvalidArgumentError(absl::StrCat(who, ": no disk store"));
  if (value_bytes < 1 || options.max_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": disk tier options out of range (value ",
                                                   "bytes ", value_bytes, ", max_bytes ",
                                                   options.max_bytes, ")"));
  }
  const uint32_t prefix = store->next_prefix_.fetch_add(1);
  return std::unique_ptr<DiskTier>(
      new DiskTier(std::move(store), options, value_bytes, std::move(who), prefix));
}

void DiskTier::EncodeKey(int64_t key, char* out) const {
  EncodeRoutedKey(prefix_, Routed(key), out);
}

absl::Status DiskTier::FromRocks(absl::string_view what, const void* status) const {
  const rocksdb::Status& s = *static_cast<const rocksdb::Status*>(status);
  return FromRocksStatus(absl::StrCat(who_, ": ", what, " (disk tier in ", dir(), "): "), s);
}

absl::Status DiskTier::Read(const int64_t* keys, size_t n, char* values,
                            std::vector<uint8_t>* found) {
  found->assign(n, 0);
  if (n == 0) return absl::OkStatus();
  std::vector<char> encoded(n * kKeyBytes);
  std::vector<rocksdb::Slice> slices(n);
  for (size_t i = 0; i < n; ++i) {
    EncodeKey(keys[i], &encoded[i * kKeyBytes]);
    slices[i] = rocksdb::Slice(&encoded[i * kKeyBytes], kKeyBytes);
  }
  std::vector<rocksdb::PinnableSlice> got(n);
  std::vector<rocksdb::Status> statuses(n);
  store_->db_->db->MultiGet(store_->db_->read, store_->db_->db->DefaultColumnFamily(), n, slices.data(), got.data(),
                    statuses.data());
  int64_t hits = 0;
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].IsNotFound()) continue;
    if (!statuses[i].ok()) return FromRocks("reading rows", &statuses[i]);
    if (static_cast<int64_t>(got[i].size()) != value_bytes_) {
      return absl::DataLossError(
          absl::StrCat(who_, ": the disk tier at ", dir(), " holds a record of ",
                       got[i].size(), " bytes for key ", keys[i], ", expected ", value_bytes_));
    }
    std::memcpy(values + i * value_bytes_, got[i].data(), static_cast<size_t>(value_bytes_));
    (*found)[i] = 1;
    ++hits;
  }
  hits_.fetch_add(hits, std::memory_order_relaxed);
  misses_.fetch_add(static_cast<int64_t>(n) - hits, std::memory_order_relaxed);
  bytes_read_.fetch_add(hits * value_bytes_, std::memory_order_relaxed);
  return absl::OkStatus();
}


absl::StatusOr<bool> DiskTier::Has(int64_t key) {
  std::vector<char> value(static_cast<size_t>(value_bytes_));
  std::vector<uint8_t> found;
  if (absl::Status s = Read(&key, 1, value.data(), &found); !s.ok()) return s;
  return found[0] != 0;
}

absl::Status DiskTier::Write(const std::vector<int64_t>& put_keys, const char* put_values,
                             const std::vector<int64_t>& delete_keys, int64_t rows_delta) {
  if (put_keys.empty() && delete_keys.empty()) return absl::OkStatus();
  const int64_t rows_now = rows();
  if (options_.max_bytes > 0 && rows_delta > 0 &&
      (rows_now + rows_delta) * value_bytes_ > options_.max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(who_, ": moving ", rows_delta, " more rows (", rows_delta * value_bytes_,
                     " bytes) to disk would pass its disk budget of ", options_.max_bytes,
                     " bytes (", rows_now * value_bytes_, " in use, in ", dir(), ")"));
  }
  // In the tier's key order: each insert into the memtable's skip list then starts from where the
  // last one went (RocksDB keeps that place), not from the list's top (the memtable's inserts were
  // 9% of the click-log job's time with tables 8x the budget, bench/tier_train_bench).
  // (Each key with its index: a repeated put keeps its order, the last one winning.)
  const auto in_key_order = [](const std::vector<int64_t>& keys) {
    std::vector<std::pair<RoutedKey, uint32_t>> order(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) order[i] = {Routed(keys[i]), static_cast<uint32_t>(i)};
    std::sort(order.begin(), order.end());
    return order;
  };
  rocksdb::WriteBatch batch;
  char key[kKeyBytes];
  for (const auto& [routed, i] : in_key_order(put_keys)) {
    EncodeRoutedKey(prefix_, routed, key);
    rocksdb::Status s = batch.Put(
        rocksdb::Slice(key, kKeyBytes),
        rocksdb::Slice(put_values + size_t{i} * value_bytes_, static_cast<size_t>(value_bytes_)));
    if (!s.ok()) return FromRocks("batching rows", &s);
  }
  for (const auto& [routed, i] : in_key_order(delete_keys)) {
    EncodeRoutedKey(prefix_, routed, key);
    rocksdb::Status s = batch.Delete(rocksdb::Slice(key, kKeyBytes));
    if (!s.ok()) return FromRocks("batching deletions", &s);
  }
  rocksdb::Status s = store_->db_->db->Write(store_->db_->write, &batch);
  if (!s.ok()) return FromRocks("writing rows", &s);
  rows_.fetch_add(rows_delta, std::memory_order_relaxed);
  bytes_written_.fetch_add(static_cast<int64_t>(put_keys.size()) * value_bytes_,
                           std::memory_order_relaxed);
  return absl::OkStatus();
}


absl::Status DiskTier::Scan(const int64_t* from_key,
                            const std::function<bool(int64_t, const char*)>& fn, int64_t* next,
                            bool* more) const {
  if (more != nullptr) *more = false;
  std::unique_ptr<Reader> reader = NewReader(from_key);
  for (; reader->Valid(); reader->Next()) {
    if (!fn(reader->key(), reader->value())) {
      if (next != nullptr) *next = reader->key();
      if (more != nullptr) *more = true;
      break;
    }
  }
  return reader->status();
}

absl::Status DiskTier::BadEntry(size_t key_bytes, size_t value_bytes) const {
  return absl::DataLossError(absl::StrCat(
      who_, ": the disk tier in ", dir(), " holds an entry of ", key_bytes, " key bytes and ",
      value_bytes, " value bytes, expected ", kKeyBytes, " and ", value_bytes_));
}

struct DiskTier::Reader::Impl {
  const DiskTier* tier;
  char upper[4];  // the next tier's prefix: where this one's keys end
  rocksdb::Slice upper_slice;
  std::unique_ptr<rocksdb::Iterator> it;
  absl::Status bad;  // an entry of the wrong size
  void Check() {
    if (it->Valid() && (it->key().size() != kKeyBytes ||
                        static_cast<int64_t>(it->value().size()) != tier->value_bytes_)) {
      bad = tier->BadEntry(it->key().size(), it->value().size());
    }
    if (Valid()) tier->bytes_read_.fetch_add(tier->value_bytes_, std::memory_order_relaxed);
  }
  bool Valid() const { return bad.ok() && it->Valid(); }
};

DiskTier::Reader::Reader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DiskTier::Reader::~Reader() = default;
bool DiskTier::Reader::Valid() const { return impl_->Valid(); }
int64_t DiskTier::Reader::key() const { return DecodeKey(impl_->it->key().data()); }
const char* DiskTier::Reader::value() const { return impl_->it->value().data(); }
void DiskTier::Reader::Next() {
  impl_->it->Next();
  impl_->Check();
}
absl::Status DiskTier::Reader::status() const {
  if (!impl_->bad.ok()) return impl_->bad;
  rocksdb::Status s = impl_->it->status();
  if (!s.ok()) return impl_->tier->FromRocks("reading rows", &s);
  return absl::OkStatus();
}

std::unique_ptr<DiskTier::Reader> DiskTier::NewReader(const int64_t* from_key) const {
  auto impl = std::make_unique<Reader::Impl>();
  impl->tier = this;
  PutBigEndian32(prefix_ + 1, impl->upper);
  impl->upper_slice = rocksdb::Slice(impl->upper, 4);
  rocksdb::ReadOptions read = store_->db_->read;
  read.fill_cache = false;  // a scan's blocks would push the point reads' out
  read.iterate_upper_bound = &impl->upper_slice;
  impl->it.reset(store_->db_->db->NewIterator(read));
  char start[kKeyBytes];
  if (from_key != nullptr) {
    EncodeKey(*from_key, start);
    impl->it->Seek(rocksdb::Slice(start, kKeyBytes));
  } else {
    PutBigEndian32(prefix_, start);
    impl->it->Seek(rocksdb::Slice(start, 4));
  }
  impl->Check();
  return std::unique_ptr<Reader>(new Reader(std::move(impl)));
}

DiskTierCounters DiskTier::Counters() const {
  DiskTierCounters c;
  c.rows = rows();
  c.bytes = c.rows * value_bytes_;
  c.file_bytes = store_->FileBytes();
  c.hits = hits_.load(std::memory_order_relaxed);
  c.misses = misses_.load(std::memory_order_relaxed);
  c.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  c.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  c.memory_bytes = store_->memory_bytes();
  return c;
}

}  // namespace pstrain
