#include "ps/shard_checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "partitioners/key_routing.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"

namespace pstrain {
namespace {

constexpr char kValuesTensor[] = "values";

std::string KeyPrefix(absl::string_view variable, absl::string_view tensor) {
  std::string key;
  key.reserve(variable.size() + tensor.size() + 10);
  key.append(variable.data(), variable.size());
  key.push_back('\0');
  key.append(tensor.data(), tensor.size());
  key.push_back('\0');
  return key;
}

void AppendBigEndian(int64_t v, std::string* out) {
  const uint64_t u = static_cast<uint64_t>(v);
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>(u >> shift));
}

int64_t ReadBigEndian(const char* p) {
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u = (u << 8) | static_cast<unsigned char>(p[i]);
  return static_cast<int64_t>(u);
}

// RocksDB options for checkpoint databases: no compression (float rows don't compress), XXH3 block
// checksums (Debian's RocksDB computes CRC-32C without the SSE4.2 instruction, ~1.4 GB/s, which
// made it a third of a restore's time; XXH3 runs at memory speed), no filters, the kernel's
// sequential readahead left on, and sizes checked at open so a truncated file is found.
rocksdb::Options CheckpointDbOptions() {
  rocksdb::Options options;
  options.compression = rocksdb::kNoCompression;
  options.paranoid_checks = true;
  options.max_open_files = -1;
  options.info_log_level = rocksdb::WARN_LEVEL;
  options.keep_log_file_num = 1;
  options.advise_random_on_open = false;
  rocksdb::BlockBasedTableOptions table;
  table.checksum = rocksdb::kXXH3;
  table.block_size = 64 << 10;
  table.no_block_cache = true;
  // Each chunk is one block of megabytes: read it straight into its buffer (RocksDB's own
  // prefetch buffer would add a copy); the kernel's readahead keeps the disk busy meanwhile.
  table.max_auto_readahead_size = 0;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

absl::Status IoError(absl::string_view what, const std::string& path, const rocksdb::Status& s) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", s.ToString()));
}

// One tensor of a shard (values or a slot) as raw rows.
struct TensorView {
  std::string name;
  const char* data;
  int64_t row_bytes;
};

std::vector<TensorView> TensorsOf(const VariableShard& shard) {
  std::vector<TensorView> out;
  out.push_back({kValuesTensor, shard.values_data(), shard.row_bytes()});
  if (shard.optimizer() != nullptr) {
    const std::vector<std::string> names = shard.optimizer()->slot_names();
    for (int s = 0; s < shard.num_slots(); ++s) {
      out.push_back({names[s], reinterpret_cast<const char*>(shard.slot_data(s)),
                     shard.width() * static_cast<int64_t>(sizeof(float))});
    }
  }
  return out;
}

absl::Status SyncFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  const int rc = ::fdatasync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat("fdatasync ", path, ": ", std::strerror(err)));
  return absl::OkStatus();
}

constexpr char kRecordsTensor[] = "records";
constexpr char kErasedTensor[] = "erased";
constexpr int64_t kRecordEntryHeader = 24;  // key, step, count, 4 zero bytes

// The key of a dynamic table's chunk whose first entry is `key`.
std::string DynamicChunkKey(absl::string_view variable, absl::string_view tensor, uint32_t route,
                            int64_t key) {
  std::string k = KeyPrefix(variable, tensor);
  for (int shift = 24; shift >= 0; shift -= 8) k.push_back(static_cast<char>(route >> shift));
  AppendBigEndian(key, &k);
  return k;
}

// Dynamic records sort in routing order (RoutedKey, partitioners/key_routing.h), as their chunk
// keys do.

// Writes `count` entries of `entry_bytes` each, entry i filled by fill(i, out), as chunks of about
// `chunk_bytes` under `tensor`; key_of(i) is entry i's key (for the chunk keys).
template <typename Fill, typename KeyOf>
absl::Status WriteChunks(rocksdb::SstFileWriter* writer, const std::string& sst_path,
                         absl::string_view variable, absl::string_view tensor, int64_t count,
                         int64_t entry_bytes, int64_t chunk_bytes, KeyOf key_of, Fill fill,
                         int64_t* entries) {
  const int64_t per_chunk = std::max<int64_t>(1, chunk_bytes / entry_bytes);
  std::string value;
  for (int64_t first = 0; first < count; first += per_chunk) {
    const int64_t n = std::min(per_chunk, count - first);
    value.assign(static_cast<size_t>(n * entry_bytes), '\0');
    for (int64_t i = 0; i < n; ++i) fill(first + i, value.data() + i * entry_bytes);
    const int64_t key = key_of(first);
    rocksdb::Status s = writer->Put(DynamicChunkKey(variable, tensor, RoutingHash(key), key), value);
    if (!s.ok()) return IoError("writing", sst_path, s);
    ++*entries;
  }
  return absl::OkStatus();
}

// WriteChunks for entries that come one at a time: next(&key, out) fills the next entry and its
// key, or returns false at the end.
template <typename Next>
absl::Status WriteStream(rocksdb::SstFileWriter* writer, const std::string& sst_path,
                         absl::string_view variable, absl::string_view tensor,
                         int64_t entry_bytes, int64_t chunk_bytes, Next next, int64_t* entries) {
  const int64_t per_chunk = std::max<int64_t>(1, chunk_bytes / entry_bytes);
  std::string value;
  for (bool more = true; more;) {
    value.assign(static_cast<size_t>(per_chunk * entry_bytes), '\0');
    int64_t n = 0;
    int64_t first_key = 0;
    for (; n < per_chunk; ++n) {
      int64_t key = 0;
      if (!next(&key, value.data() + n * entry_bytes)) {
        more = false;
        break;
      }
      if (n == 0) first_key = key;
    }
    if (n == 0) break;
    value.resize(static_cast<size_t>(n * entry_bytes));
    rocksdb::Status s =
        writer->Put(DynamicChunkKey(variable, tensor, RoutingHash(first_key), first_key), value);
    if (!s.ok()) return IoError("writing", sst_path, s);
    ++*entries;
  }
  return absl::OkStatus();
}

// The records (or erasures) of one dynamic table that a ps holds, written in routing order.
absl::Status WriteDynamicTable(rocksdb::SstFileWriter* writer, const std::string& sst_path,
                               const std::vector<std::shared_ptr<DynamicShard>>& shards,
                               uint32_t delta_since, int64_t chunk_bytes, int64_t* entries,
                               SaveShardsResponse* response) {
  const std::string& variable = shards.front()->def().variable();
  const int64_t floats = shards.front()->record_floats();
  const int64_t entry_bytes = kRecordEntryHeader + 4 * floats;
  // Erasures (deltas only) sort before records ("erased" < "records").
  std::vector<std::pair<RoutedKey, int64_t>> erased;
  std::vector<int64_t> erased_per_shard(shards.size());
  if (delta_since > 0) {
    for (size_t k = 0; k < shards.size(); ++k) {
      for (int64_t key : shards[k]->ErasedSince(delta_since)) {
        erased.emplace_back(Routed(key), key);
        ++erased_per_shard[k];
      }
    }
    std::sort(erased.begin(), erased.end());
    RETURN_IF_ERROR(WriteChunks(
        writer, sst_path, variable, kErasedTensor, static_cast<int64_t>(erased.size()), 8,
        chunk_bytes, [&](int64_t i) { return erased[i].second; },
        [&](int64_t i, char* out) { std::memcpy(out, &erased[i].second, 8); }, entries));
  }
  struct Entry {
    RoutedKey order;
    DynamicRecordView view;
    bool operator<(const Entry& o) const { return order < o.order; }
  };
  // RAM's records sorted, merged with each shard's disk tier (kept in this order) as it streams.
  std::vector<Entry> records;
  std::vector<int64_t> records_per_shard(shards.size());
  for (size_t k = 0; k < shards.size(); ++k) {
    shards[k]->ForEachRamRecord(delta_since, [&](const DynamicRecordView& view) {
      records.push_back({Routed(view.key), view});
      ++records_per_shard[k];
    });
  }
  std::sort(records.begin(), records.end());
  struct DiskSource {
    std::unique_ptr<DynamicDiskRecords> records;
    size_t shard;
    bool valid = false;
    DynamicRecordView view;
  };
  std::vector<DiskSource> disk;
  for (size_t k = 0; k < shards.size(); ++k) {
    std::unique_ptr<DynamicDiskRecords> d = shards[k]->DiskRecords(delta_since);
    if (d == nullptr) continue;
    DiskSource source{std::move(d), k};
    source.valid = source.records->Next(&source.view);
    disk.push_back(std::move(source));
  }
  size_t next_ram = 0;
  RETURN_IF_ERROR(WriteStream(
      writer, sst_path, variable, kRecordsTensor, entry_bytes, chunk_bytes,
      [&](int64_t* key, char* out) {
        // The next record in routing order: RAM's next, or the least of the disk tiers' next.
        DiskSource* least = nullptr;
        for (DiskSource& d : disk) {
          if (d.valid && (least == nullptr || Routed(d.view.key) < Routed(least->view.key))) {
            least = &d;
          }
        }
        const bool ram = next_ram < records.size() &&
                         (least == nullptr || records[next_ram].order < Routed(least->view.key));
        if (!ram && least == nullptr) return false;
        const DynamicRecordView& v = ram ? records[next_ram].view : least->view;
        *key = v.key;
        std::memcpy(out, &v.key, 8);
        std::memcpy(out + 8, &v.step, 8);
        std::memcpy(out + 16, &v.count, 4);
        // As float32 (whatever the shards' stored format: a restore may choose another).
        shards.front()->DecodeRecord(v.data, reinterpret_cast<float*>(out + kRecordEntryHeader));
        if (ram) {
          ++next_ram;
        } else {  // copied out: the source moves on
          ++records_per_shard[least->shard];
          least->valid = least->records->Next(&least->view);
        }
        return true;
      },
      entries));
  for (DiskSource& d : disk) RETURN_IF_ERROR(d.records->status());
  for (size_t k = 0; k < shards.size(); ++k) {
    SavedShard* saved = response->add_shards();
    *saved->mutable_def() = shards[k]->def();
    saved->set_apply_count(shards[k]->apply_count());
    saved->set_keys(records_per_shard[k]);
    saved->set_erased_keys(erased_per_shard[k]);
    saved->set_bytes(records_per_shard[k] * entry_bytes + erased_per_shard[k] * 8);
    response->set_bytes(response->bytes() + saved->bytes());
  }
  return absl::OkStatus();
}

// A checkpoint database, read-only. Errors: kDataLoss naming it when it can't be opened.
absl::StatusOr<std::unique_ptr<rocksdb::DB>> OpenForReading(const std::string& path) {
  rocksdb::Options options = CheckpointDbOptions();
  options.create_if_missing = false;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(options, path, &raw);
  if (!s.ok()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint database ", path, " can't be opened: ", s.ToString()));
  }
  return std::unique_ptr<rocksdb::DB>(raw);
}

}  // namespace

std::string CheckpointKey(absl::string_view variable, absl::string_view tensor, int64_t first_row) {
  std::string key = KeyPrefix(variable, tensor);
  AppendBigEndian(first_row, &key);
  return key;
}

absl::StatusOr<SaveShardsResponse> WriteShardCheckpoint(
    const std::string& db_path, const std::vector<std::shared_ptr<VariableShard>>& shards,
    const std::vector<std::shared_ptr<DynamicShard>>& dynamic, int64_t chunk_bytes,
    uint32_t delta_since) {
  if (db_path.empty()) return absl::InvalidArgumentError("SaveShards: empty db_path");
  if (chunk_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("SaveShards: chunk_bytes ", chunk_bytes, " < 0"));
  }
  if (chunk_bytes == 0) chunk_bytes = kDefaultCheckpointChunkBytes;
  struct stat st;
  if (::stat(db_path.c_str(), &st) == 0) {
    return absl::AlreadyExistsError(absl::StrCat("checkpoint database ", db_path, " already exists"));
  }

  // Key order: variable, tensor, row. Shards of one variable on this ps hold disjoint rows.
  std::vector<std::shared_ptr<VariableShard>> sorted = shards;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    if (a->def().variable() != b->def().variable()) {
      return a->def().variable() < b->def().variable();
    }
    return a->row_offset() < b->row_offset();
  });

  const rocksdb::Options options = CheckpointDbOptions();
  rocksdb::Options create = options;
  create.create_if_missing = true;
  create.error_if_exists = true;
  rocksdb::DB* raw_db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(create, db_path, &raw_db);
  if (!s.ok()) return IoError("creating checkpoint database", db_path, s);
  std::unique_ptr<rocksdb::DB> db(raw_db);

  SaveShardsResponse response;
  const std::string sst_path = db_path + "/checkpoint.sst.tmp";
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), options);
  s = writer.Open(sst_path);
  if (!s.ok()) return IoError("creating", sst_path, s);
  int64_t entries = 0;
  // Dynamic tables by variable name (a ps may hold several shards of one).
  std::map<std::string, std::vector<std::shared_ptr<DynamicShard>>> tables;
  for (const auto& d : dynamic) tables[d->def().variable()].push_back(d);
  auto table = tables.begin();
  // Writes the dynamic tables that sort before `variable` (all of them, for the end).
  auto write_tables_before = [&](const std::string* variable) -> absl::Status {
    for (; table != tables.end() && (variable == nullptr || table->first < *variable); ++table) {
      RETURN_IF_ERROR(WriteDynamicTable(&writer, sst_path, table->second, delta_since, chunk_bytes,
                                        &entries, &response));
    }
    return absl::OkStatus();
  };
  size_t i = 0;
  while (i < sorted.size()) {
    RETURN_IF_ERROR(write_tables_before(&sorted[i]->def().variable()));
    // The shards of one variable: [i, j).
    size_t j = i;
    while (j < sorted.size() && sorted[j]->def().variable() == sorted[i]->def().variable()) ++j;
    std::vector<std::vector<TensorView>> tensors;
    for (size_t k = i; k < j; ++k) tensors.push_back(TensorsOf(*sorted[k]));
    // Tensor names in key order ("values" and the slots), the same for every shard of a variable.
    std::vector<int> order(tensors[0].size());
    for (size_t t = 0; t < order.size(); ++t) order[t] = static_cast<int>(t);
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return tensors[0][a].name < tensors[0][b].name; });
    for (int t : order) {
      for (size_t k = i; k < j; ++k) {
        const VariableShard& shard = *sorted[k];
        const TensorView& view = tensors[k - i][t];
        if (view.row_bytes == 0) continue;
        const int64_t rows_per_chunk = std::max<int64_t>(1, chunk_bytes / view.row_bytes);
        for (int64_t r = 0; r < shard.num_rows(); r += rows_per_chunk) {
          const int64_t n = std::min(rows_per_chunk, shard.num_rows() - r);
          s = writer.Put(CheckpointKey(shard.def().variable(), view.name, shard.row_offset() + r),
                         rocksdb::Slice(view.data + r * view.row_bytes,
                                        static_cast<size_t>(n * view.row_bytes)));
          if (!s.ok()) return IoError("writing", sst_path, s);
          ++entries;
        }
      }
    }
    for (size_t k = i; k < j; ++k) {
      SavedShard* saved = response.add_shards();
      *saved->mutable_def() = sorted[k]->def();
      saved->set_apply_count(sorted[k]->apply_count());
      int64_t bytes = 0;
      for (const TensorView& view : tensors[k - i]) bytes += view.row_bytes * sorted[k]->num_rows();
      saved->set_bytes(bytes);
      response.set_bytes(response.bytes() + bytes);
    }
    i = j;
  }
  RETURN_IF_ERROR(write_tables_before(nullptr));

  if (entries > 0) {
    s = writer.Finish();
    if (!s.ok()) return IoError("finishing", sst_path, s);
    RETURN_IF_ERROR(SyncFile(sst_path));
    rocksdb::IngestExternalFileOptions ingest;
    ingest.move_files = true;
    s = db->IngestExternalFile({sst_path}, ingest);
    if (!s.ok()) return IoError("ingesting into", db_path, s);
  } else {
    // Nothing to write: an empty database (the writer refuses an empty file).
    ::unlink(sst_path.c_str());
  }
  s = db->Close();
  if (!s.ok()) return IoError("closing", db_path, s);
  return response;
}

struct ShardCheckpointReader::Db {
  std::string path;
  std::unique_ptr<rocksdb::DB> db;
};

ShardCheckpointReader::ShardCheckpointReader() = default;
ShardCheckpointReader::~ShardCheckpointReader() = default;

absl::StatusOr<ShardCheckpointReader::Db*> ShardCheckpointReader::Open(const std::string& path) {
  for (auto& db : dbs_) {
    if (db->path == path) return db.get();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<rocksdb::DB> opened, OpenForReading(path));
  auto db = std::make_unique<Db>();
  db->path = path;
  db->db = std::move(opened);
  dbs_.push_back(std::move(db));
  return dbs_.back().get();
}

absl::StatusOr<int64_t> ShardCheckpointReader::ReadInto(const RestoreShardOp& op,
                                                        VariableShard* shard) {
  const std::string& variable = shard->def().variable();
  const int64_t begin = shard->row_offset();
  const int64_t end = begin + shard->num_rows();
  // The sources must cover [begin, end) exactly once.
  std::vector<std::pair<int64_t, int64_t>> spans;
  int64_t apply_count = 0;
  for (const CheckpointSource& src : op.sources()) {
    const int64_t b = std::max(begin, src.row_offset());
    const int64_t e = std::min(end, src.row_offset() + src.num_rows());
    if (b < e) spans.emplace_back(b, e);
    apply_count = std::max(apply_count, src.apply_count());
  }
  std::sort(spans.begin(), spans.end());
  int64_t at = begin;
  for (const auto& [b, e] : spans) {
    if (b != at) break;
    at = e;
  }
  if (at != end || (spans.empty() && begin != end)) {
    return absl::InvalidArgumentError(
        absl::StrCat("restore of shard \"", shard->name(), "\": the checkpoint sources don't cover ",
                     "its rows [", begin, ", ", end, ") exactly once"));
  }

  // Values, then each slot: destination, row size, name.
  struct Target {
    std::string name;
    char* data;
    int64_t row_bytes;
  };
  std::vector<Target> targets;
  targets.push_back({kValuesTensor, shard->mutable_values_data(), shard->row_bytes()});
  if (shard->optimizer() != nullptr) {
    const std::vector<std::string> names = shard->optimizer()->slot_names();
    for (int s = 0; s < shard->num_slots(); ++s) {
      targets.push_back({names[s], reinterpret_cast<char*>(shard->mutable_slot_data(s)),
                         shard->width() * static_cast<int64_t>(sizeof(float))});
    }
  }

  int64_t bytes = 0;
  rocksdb::ReadOptions read;
  read.verify_checksums = true;
  read.fill_cache = false;
  read.readahead_size = 0;
  for (const CheckpointSource& src : op.sources()) {
    const int64_t b = std::max(begin, src.row_offset());
    const int64_t e = std::min(end, src.row_offset() + src.num_rows());
    if (b >= e) continue;
    ASSIGN_OR_RETURN(Db * db, Open(src.db_path()));
    for (const Target& target : targets) {
      if (target.row_bytes == 0) continue;
      const std::string prefix = KeyPrefix(variable, target.name);
      const auto where = [&] {
        return absl::StrCat("checkpoint database ", src.db_path(), ", variable \"", variable,
                            "\" ", target.name, " rows [", b, ", ", e, ")");
      };
      std::unique_ptr<rocksdb::Iterator> it(db->db->NewIterator(read));
      const std::string first = CheckpointKey(variable, target.name, b);
      it->SeekForPrev(first);
      if (!it->Valid() || !it->key().starts_with(prefix)) it->Seek(first);
      int64_t covered = 0;
      for (; it->Valid(); it->Next()) {
        const rocksdb::Slice key = it->key();
        if (!key.starts_with(prefix) || key.size() != prefix.size() + 8) break;
        const int64_t chunk_begin = ReadBigEndian(key.data() + prefix.size());
        if (chunk_begin >= e) break;
        const rocksdb::Slice value = it->value();
        if (value.size() % target.row_bytes != 0) {
          return absl::DataLossError(absl::StrCat(where(), ": the chunk at row ", chunk_begin, " is ",
                                                  value.size(), " bytes, not whole rows of ",
                                                  target.row_bytes));
        }
        const int64_t chunk_end = chunk_begin + static_cast<int64_t>(value.size()) / target.row_bytes;
        const int64_t copy_begin = std::max(b, chunk_begin);
        const int64_t copy_end = std::min(e, chunk_end);
        if (copy_begin < copy_end) {
          std::memcpy(target.data + (copy_begin - begin) * target.row_bytes,
                      value.data() + (copy_begin - chunk_begin) * target.row_bytes,
                      static_cast<size_t>((copy_end - copy_begin) * target.row_bytes));
          covered += copy_end - copy_begin;
        }
      }
      if (!it->status().ok()) {
        return absl::DataLossError(absl::StrCat(where(), ": ", it->status().ToString()));
      }
      if (covered != e - b) {
        return absl::DataLossError(absl::StrCat(where(), ": found ", covered, " of ", e - b,
                                                " rows (missing or overlapping chunks)"));
      }
      bytes += covered * target.row_bytes;
    }
  }
  shard->set_apply_count(apply_count);
  return bytes;
}

absl::StatusOr<int64_t> ShardCheckpointReader::ReadDynamicInto(const RestoreShardOp& op,
                                                               DynamicShard* shard) {
  const std::string& variable = shard->def().variable();
  const auto [lo, hi] = RoutingHashRange(shard->def().shard_index(), shard->def().num_shards());
  const int64_t floats = shard->record_floats();
  const int64_t entry_bytes = kRecordEntryHeader + 4 * floats;
  rocksdb::ReadOptions read;
  read.verify_checksums = true;
  read.fill_cache = false;
  read.readahead_size = 0;
  int64_t bytes = 0;
  int64_t apply_count = 0;
  DynamicRecord record;
  record.data.resize(static_cast<size_t>(floats));
  for (const CheckpointSource& src : op.sources()) {
    apply_count = std::max(apply_count, src.apply_count());
    ASSIGN_OR_RETURN(Db * db, Open(src.db_path()));
    // Erasures first, then records: a delta never holds a key in both.
    for (const char* tensor : {kErasedTensor, kRecordsTensor}) {
      const bool records = tensor == kRecordsTensor;
      const int64_t size = records ? entry_bytes : 8;
      const std::string prefix = KeyPrefix(variable, tensor);
      const auto where = [&] {
        return absl::StrCat("checkpoint database ", src.db_path(), ", dynamic table \"", variable,
                            "\" ", tensor);
      };
      std::unique_ptr<rocksdb::Iterator> it(db->db->NewIterator(read));
      // The chunk holding the first key of the range starts at or before it.
      const std::string first = DynamicChunkKey(variable, tensor, static_cast<uint32_t>(lo), 0);
      it->SeekForPrev(first);
      if (!it->Valid() || !it->key().starts_with(prefix)) it->Seek(first);
      for (; it->Valid(); it->Next()) {
        const rocksdb::Slice key = it->key();
        if (!key.starts_with(prefix) || key.size() != prefix.size() + 12) break;
        uint32_t chunk_route = 0;
        for (int b = 0; b < 4; ++b) {
          chunk_route = (chunk_route << 8) | static_cast<unsigned char>(key.data()[prefix.size() + b]);
        }
        if (chunk_route >= hi) break;
        const rocksdb::Slice value = it->value();
        if (value.size() % size != 0) {
          return absl::DataLossError(absl::StrCat(
              where(), ": a chunk of ", value.size(), " bytes is not whole entries of ", size,
              " bytes", records ? " (saved with another width or optimizer?)" : ""));
        }
        for (size_t at = 0; at < value.size(); at += size) {
          const char* e = value.data() + at;
          int64_t k;
          std::memcpy(&k, e, 8);
          const uint32_t route = RoutingHash(k);
          if (route < lo || route >= hi) continue;
          if (!records) {
            RETURN_IF_ERROR(shard->EraseKey(k));
            continue;
          }
          record.key = k;
          std::memcpy(&record.step, e + 8, 8);
          std::memcpy(&record.count, e + 16, 4);
          std::memcpy(record.data.data(), e + kRecordEntryHeader, static_cast<size_t>(4 * floats));
          RETURN_IF_ERROR(shard->PutRecord(record));
          bytes += size;
        }
      }
      if (!it->status().ok()) {
        return absl::DataLossError(absl::StrCat(where(), ": ", it->status().ToString()));
      }
    }
  }
  shard->set_apply_count(apply_count);
  return bytes;
}

absl::Status ReadCheckpointEntries(const std::string& db_path, absl::string_view variable,
                                   int64_t record_floats, const CheckpointEntries& entries) {
  ASSIGN_OR_RETURN(std::unique_ptr<rocksdb::DB> db, OpenForReading(db_path));
  rocksdb::ReadOptions read;
  read.verify_checksums = true;
  read.fill_cache = false;
  std::vector<const char*> tensors;
  if (record_floats > 0) {
    tensors = {kErasedTensor, kRecordsTensor};
  } else {
    tensors = {kValuesTensor};
  }
  std::vector<float> floats(static_cast<size_t>(std::max<int64_t>(0, record_floats)));
  for (const char* tensor : tensors) {
    const std::string prefix = KeyPrefix(variable, tensor);
    const bool values = tensor == kValuesTensor, records = tensor == kRecordsTensor;
    const int64_t size = values ? 0 : records ? kRecordEntryHeader + 4 * record_floats : 8;
    auto where = [&] {
      return absl::StrCat("checkpoint database ", db_path, ", variable \"", variable, "\" ",
                          tensor);
    };
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(read));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      const rocksdb::Slice key = it->key(), value = it->value();
      if (values) {
        if (key.size() != prefix.size() + 8) return absl::DataLossError(where() + ": a bad key");
        if (entries.on_rows) {
          RETURN_IF_ERROR(entries.on_rows(ReadBigEndian(key.data() + prefix.size()),
                                          absl::string_view(value.data(), value.size())));
        }
        continue;
      }
      if (value.size() % size != 0) {
        return absl::DataLossError(absl::StrCat(where(), ": a chunk of ", value.size(),
                                                " bytes is not whole entries of ", size, " bytes"));
      }
      for (size_t at = 0; at < value.size(); at += size) {
        const char* e = value.data() + at;
        int64_t k;
        std::memcpy(&k, e, 8);
        if (!records) {
          if (entries.on_erased) RETURN_IF_ERROR(entries.on_erased(k));
          continue;
        }
        std::memcpy(floats.data(), e + kRecordEntryHeader, static_cast<size_t>(4 * record_floats));
        if (entries.on_record) RETURN_IF_ERROR(entries.on_record(k, floats.data()));
      }
    }
    if (!it->status().ok()) {
      return absl::DataLossError(absl::StrCat(where(), ": ", it->status().ToString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace pstrain
