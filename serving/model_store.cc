#include "serving/model_store.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <list>
#include <sstream>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/crc32c.h"
#include "common/json_parse.h"
#include "common/status_macros.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"

namespace pstrain {
namespace {

const char* KindName(ExportedVariable::Kind kind) {
  switch (kind) {
    case ExportedVariable::Kind::kDense: return "dense";
    case ExportedVariable::Kind::kRows: return "rows";
    case ExportedVariable::Kind::kTable: return "table";
  }
  return "?";
}

std::string BigEndian(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return out;
}

absl::Status DataLoss(const std::string& file, absl::string_view why) {
  return absl::DataLossError(absl::StrCat(file, ": ", why));
}

// A least-recently-used cache of rows, in shards with a lock each. Keys are (variable, id).
class RowCache {
 public:
  explicit RowCache(int64_t capacity_bytes) : shard_capacity_(capacity_bytes / kShards) {}

  // Copies the row into `out` if held (and marks it used).
  bool Get(int variable, int64_t id, char* out, int64_t row_bytes) {
    Shard& s = ShardOf(variable, id);
    absl::MutexLock lock(&s.mu);
    auto it = s.index.find(Key{variable, id});
    if (it == s.index.end()) {
      misses_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    s.order.splice(s.order.begin(), s.order, it->second);
    std::memcpy(out, it->second->bytes.data(), row_bytes);
    hits_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  void Put(int variable, int64_t id, absl::string_view row) {
    const int64_t cost = static_cast<int64_t>(row.size()) + kOverhead;
    if (cost > shard_capacity_) return;
    Shard& s = ShardOf(variable, id);
    absl::MutexLock lock(&s.mu);
    const Key key{variable, id};
    if (s.index.count(key)) return;
    while (s.bytes + cost > shard_capacity_ && !s.order.empty()) {
      s.bytes -= static_cast<int64_t>(s.order.back().bytes.size()) + kOverhead;
      s.index.erase(s.order.back().key);
      s.order.pop_back();
    }
    s.order.push_front(Entry{key, std::string(row)});
    s.index[key] = s.order.begin();
    s.bytes += cost;
  }

  CacheStats Stats() const {
    CacheStats out;
    out.hits = hits_.load();
    out.misses = misses_.load();
    for (const Shard& s : shards_) {
      absl::MutexLock lock(&s.mu);
      out.rows += static_cast<int64_t>(s.index.size());
      out.bytes += s.bytes;
    }
    return out;
  }

 private:
  static constexpr int kShards = 16;
  static constexpr int64_t kOverhead = 64;  // list node, index entry, string header
  struct Key {
    int variable;
    int64_t id;
    bool operator==(const Key& o) const { return variable == o.variable && id == o.id; }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.variable, k.id);
    }
  };
  struct Entry {
    Key key;
    std::string bytes;
  };
  struct Shard {
    mutable absl::Mutex mu;
    std::list<Entry> order ABSL_GUARDED_BY(mu);  // most recently used first
    absl::flat_hash_map<Key, std::list<Entry>::iterator> index ABSL_GUARDED_BY(mu);
    int64_t bytes ABSL_GUARDED_BY(mu) = 0;
  };
  Shard& ShardOf(int variable, int64_t id) {
    const uint64_t h = absl::HashOf(variable, id);
    return shards_[h % kShards];
  }

  const int64_t shard_capacity_;
  Shard shards_[kShards];
  std::atomic<int64_t> hits_{0};
  std::atomic<int64_t> misses_{0};
};

class ModelStoreImpl final : public ModelStore {
 public:
  ~ModelStoreImpl() override = default;

  absl::Status Init(const std::string& dir, const ModelStoreOptions& options) {
    dir_ = dir;
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      return absl::NotFoundError(absl::StrCat("model directory ", dir, " does not exist"));
    }
    const std::string manifest_path = absl::StrCat(dir, "/", kModelManifestFile);
    std::ifstream in(manifest_path, std::ios::binary);
    if (!in) return DataLoss(manifest_path, "missing (not an exported model directory)");
    std::stringstream text;
    text << in.rdbuf();
    ASSIGN_OR_RETURN(manifest_, ParseManifestFile(text.str(), manifest_path));

    db_path_ = absl::StrCat(dir, "/", kModelDbDir);
    rocksdb::Options db_options;
    db_options.paranoid_checks = true;
    db_options.max_open_files = 256;
    rocksdb::DB* db = nullptr;
    rocksdb::Status s = rocksdb::DB::OpenForReadOnly(db_options, db_path_, &db);
    if (!s.ok()) return DataLoss(db_path_, absl::StrCat("can't be opened: ", s.ToString()));
    db_.reset(db);

    dense_.resize(manifest_.variables.size());
    preloaded_.resize(manifest_.variables.size());
    for (size_t v = 0; v < manifest_.variables.size(); ++v) {
      const ExportedVariable& var = manifest_.variables[v];
      index_[var.name] = static_cast<int>(v);
      if (var.kind == ExportedVariable::Kind::kDense) {
        std::string value;
        const std::string key = DenseKey(var.name);
        s = db_->Get(rocksdb::ReadOptions(), key, &value);
        if (!s.ok()) {
          return DataLoss(db_path_, absl::StrCat("dense variable ", var.name, ": ", s.ToString()));
        }
        if (static_cast<int64_t>(value.size()) != var.count * var.row_bytes()) {
          return DataLoss(db_path_, absl::StrCat("dense variable ", var.name, " holds ",
                                                 value.size(), " bytes, the manifest says ",
                                                 var.count * var.row_bytes()));
        }
        const uint32_t crc = crc32c::Extend(crc32c::Value(key), value.data(), value.size());
        if (crc != var.crc32c) {
          return DataLoss(db_path_, absl::StrCat("dense variable ", var.name,
                                                 " fails its checksum (the database is corrupt)"));
        }
        dense_[v] = std::move(value);
        continue;
      }
      if (options.cache_bytes < 0 || options.verify_tables) {
        RETURN_IF_ERROR(ScanTable(static_cast<int>(v), options.cache_bytes < 0));
      }
    }
    preload_all_ = options.cache_bytes < 0;
    if (!preload_all_) cache_ = std::make_unique<RowCache>(options.cache_bytes);
    return absl::OkStatus();
  }

  const ModelManifest& manifest() const override { return manifest_; }
  const std::string& dir() const override { return dir_; }

  int Find(const std::string& name) const override {
    auto it = index_.find(name);
    return it == index_.end() ? -1 : it->second;
  }

  absl::StatusOr<absl::string_view> Dense(int variable) const override {
    RETURN_IF_ERROR(Check(variable));
    if (manifest_.variables[variable].kind != ExportedVariable::Kind::kDense) {
      return absl::InvalidArgumentError(
          absl::StrCat(manifest_.variables[variable].name, " is not a dense variable"));
    }
    return absl::string_view(dense_[variable]);
  }

  absl::Status Rows(int variable, absl::Span<const int64_t> ids, char* out) const override {
    RETURN_IF_ERROR(Check(variable));
    const ExportedVariable& var = manifest_.variables[variable];
    const int64_t rb = var.row_bytes();
    if (var.kind == ExportedVariable::Kind::kDense) {
      for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= var.count) return OutOfRange(var, ids[i]);
        std::memcpy(out + i * rb, dense_[variable].data() + ids[i] * rb, rb);
      }
      return absl::OkStatus();
    }
    if (var.kind == ExportedVariable::Kind::kRows) {
      for (int64_t id : ids) {
        if (id < 0 || id >= var.shape[0]) return OutOfRange(var, id);
      }
    }
    // A table's rows are kept (preloaded, cached) as stored, and served as float32.
    const RowFormat format = var.row_format();
    const int64_t srb = var.stored_row_bytes();
    auto serve = [&](const char* stored, char* row) {
      if (format == ROW_FLOAT32) {
        std::memcpy(row, stored, rb);
      } else {
        DecodeRow(format, stored, rb / 4, row);
      }
    };
    if (preload_all_) {
      const auto& rows = preloaded_[variable];
      for (size_t i = 0; i < ids.size(); ++i) {
        auto it = rows.find(ids[i]);
        if (it != rows.end()) {
          serve(it->second.data(), out + i * rb);
        } else {
          FillDefaultRow(var, out + i * rb);
        }
      }
      return absl::OkStatus();
    }
    // From the cache; the rest with one MultiGet.
    std::vector<size_t> missing;
    std::string stored(static_cast<size_t>(srb), '\0');
    for (size_t i = 0; i < ids.size(); ++i) {
      if (format == ROW_FLOAT32) {
        if (!cache_->Get(variable, ids[i], out + i * rb, rb)) missing.push_back(i);
      } else if (cache_->Get(variable, ids[i], stored.data(), srb)) {
        serve(stored.data(), out + i * rb);
      } else {
        missing.push_back(i);
      }
    }
    if (missing.empty()) return absl::OkStatus();
    std::vector<std::string> keys;
    keys.reserve(missing.size());
    for (size_t i : missing) {
      keys.push_back(var.kind == ExportedVariable::Kind::kRows ? RowKey(var.name, ids[i])
                                                                 : TableKey(var.name, ids[i]));
    }
    std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
    std::vector<std::string> values;
    std::vector<rocksdb::Status> statuses = db_->MultiGet(rocksdb::ReadOptions(), slices, &values);
    for (size_t k = 0; k < missing.size(); ++k) {
      char* row = out + missing[k] * rb;
      if (statuses[k].IsNotFound()) {
        if (var.kind == ExportedVariable::Kind::kRows) {
          return DataLoss(db_path_, absl::StrCat(var.name, " row ", ids[missing[k]], " is missing"));
        }
        FillDefaultRow(var, row);
        continue;
      }
      if (!statuses[k].ok()) {
        return DataLoss(db_path_, absl::StrCat(var.name, " row ", ids[missing[k]], ": ",
                                               statuses[k].ToString()));
      }
      if (static_cast<int64_t>(values[k].size()) != srb) {
        return DataLoss(db_path_, absl::StrCat(var.name, " row ", ids[missing[k]], " has ",
                                               values[k].size(), " bytes, not ", srb));
      }
      serve(values[k].data(), row);
      cache_->Put(variable, ids[missing[k]], values[k]);
    }
    return absl::OkStatus();
  }

  CacheStats cache_stats() const override {
    if (cache_ == nullptr) {
      CacheStats s;
      for (const auto& rows : preloaded_) s.rows += static_cast<int64_t>(rows.size());
      return s;
    }
    return cache_->Stats();
  }

 private:
  absl::Status Check(int variable) const {
    if (variable < 0 || variable >= static_cast<int>(manifest_.variables.size())) {
      return absl::InvalidArgumentError(absl::StrCat("no variable number ", variable));
    }
    return absl::OkStatus();
  }
  static absl::Status OutOfRange(const ExportedVariable& var, int64_t row) {
    return absl::InvalidArgumentError(absl::StrCat("row ", row, " of ", var.name, " is outside [0, ",
                                                   var.shape.empty() ? 1 : var.shape[0], ")"));
  }

  // Reads every row of a rows or table variable, checks the count and CRC against the manifest,
  // and keeps them in memory if `keep`.
  absl::Status ScanTable(int variable, bool keep) {
    const ExportedVariable& var = manifest_.variables[variable];
    const std::string prefix = var.kind == ExportedVariable::Kind::kRows ? RowsPrefix(var.name)
                                                                          : TablePrefix(var.name);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    uint32_t crc = 0;
    int64_t count = 0;
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      const rocksdb::Slice key = it->key(), value = it->value();
      if (key.size() != prefix.size() + 8 ||
          static_cast<int64_t>(value.size()) != var.stored_row_bytes()) {
        return DataLoss(db_path_, absl::StrCat(var.name, ": a malformed entry"));
      }
      crc = crc32c::Extend(crc, key.data(), key.size());
      crc = crc32c::Extend(crc, value.data(), value.size());
      ++count;
      if (keep) {
        uint64_t id = 0;
        for (size_t i = prefix.size(); i < key.size(); ++i) {
          id = (id << 8) | static_cast<uint8_t>(key[i]);
        }
        preloaded_[variable].emplace(static_cast<int64_t>(id), value.ToString());
      }
    }
    if (!it->status().ok()) return DataLoss(db_path_, it->status().ToString());
    if (count != var.count || crc != var.crc32c) {
      return DataLoss(db_path_, absl::StrCat(var.name, ": ", count, " rows with CRC ",
                                             absl::StrFormat("%08x", crc), ", the manifest says ",
                                             var.count, " with ",
                                             absl::StrFormat("%08x", var.crc32c)));
    }
    return absl::OkStatus();
  }

  std::string dir_;
  std::string db_path_;
  ModelManifest manifest_;
  std::unique_ptr<rocksdb::DB> db_;
  absl::flat_hash_map<std::string, int> index_;
  std::vector<std::string> dense_;  // by variable (dense ones only)
  bool preload_all_ = false;
  std::vector<absl::flat_hash_map<int64_t, std::string>> preloaded_;  // cache_bytes -1
  std::unique_ptr<RowCache> cache_;
};

}  // namespace

RowFormat ExportedVariable::row_format() const {
  RowFormat format = ROW_FLOAT32;
  if (kind == Kind::kTable) ParseRowFormat(dtype, &format).IgnoreError();  // checked when parsed
  return format;
}

int64_t ExportedVariable::stored_row_bytes() const {
  if (kind != Kind::kTable) return row_bytes();
  return RowBytes(row_format(), shape.empty() ? 1 : shape[0]);
}

void FillDefaultRow(const ExportedVariable& var, char* row) {
  const int64_t bytes = var.row_bytes();
  for (int64_t at = 0; at + 4 <= bytes; at += 4) std::memcpy(row + at, &var.default_value, 4);
}

int64_t ExportedVariable::row_bytes() const {
  int64_t width = 1;
  if (kind == Kind::kTable) {
    width = shape.empty() ? 1 : shape[0];
  } else {
    for (size_t i = 1; i < shape.size(); ++i) width *= shape[i];
  }
  return width * (dtype == "int64" && kind != Kind::kTable ? 8 : 4);
}

nlohmann::json ModelManifest::ToJson() const {
  nlohmann::json j;
  j["format"] = kModelFormat;
  j["model"] = model;
  j["serving_config"] = serving_config;
  j["checkpoint"] = checkpoint;
  j["step"] = step;
  nlohmann::json vars = nlohmann::json::array();
  for (const ExportedVariable& v : variables) {
    nlohmann::json e;
    e["name"] = v.name;
    e["kind"] = KindName(v.kind);
    e["shape"] = v.shape;
    e["dtype"] = v.dtype;
    e["count"] = v.count;
    e["default_value"] = v.default_value;
    e["crc32c"] = absl::StrFormat("%08x", v.crc32c);
    vars.push_back(std::move(e));
  }
  j["variables"] = std::move(vars);
  j["export"] = extra;
  return j;
}

absl::StatusOr<ModelManifest> ModelManifest::FromJson(const nlohmann::json& j,
                                                      const std::string& file) {
  auto bad = [&](absl::string_view why) { return DataLoss(file, why); };
  if (!j.is_object() || j.value("format", "") != kModelFormat) {
    return bad(absl::StrCat("not a ", kModelFormat, " manifest"));
  }
  ModelManifest m;
  if (!j.value("model", nlohmann::json()).is_string() ||
      !j.value("serving_config", nlohmann::json()).is_string() ||
      !j.value("variables", nlohmann::json()).is_array()) {
    return bad("missing model, serving_config or variables");
  }
  m.model = j["model"].get<std::string>();
  m.serving_config = j["serving_config"].get<std::string>();
  m.checkpoint = j.value("checkpoint", "");
  m.step = j.value("step", int64_t{0});
  m.extra = j.value("export", nlohmann::json::object());
  for (const nlohmann::json& e : j["variables"]) {
    ExportedVariable v;
    if (!e.is_object() || !e.value("name", nlohmann::json()).is_string() ||
        !e.value("kind", nlohmann::json()).is_string() ||
        !e.value("shape", nlohmann::json()).is_array() ||
        !e.value("count", nlohmann::json()).is_number_integer() ||
        !e.value("crc32c", nlohmann::json()).is_string()) {
      return bad("a malformed variable");
    }
    v.name = e["name"].get<std::string>();
    const std::string kind = e["kind"].get<std::string>();
    if (kind == "dense") {
      v.kind = ExportedVariable::Kind::kDense;
    } else if (kind == "rows") {
      v.kind = ExportedVariable::Kind::kRows;
    } else if (kind == "table") {
      v.kind = ExportedVariable::Kind::kTable;
    } else {
      return bad(absl::StrCat("variable ", v.name, ": unknown kind ", kind));
    }
    for (const nlohmann::json& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return bad("a malformed shape");
      v.shape.push_back(d.get<int64_t>());
    }
    v.dtype = e.value("dtype", "float32");
    if (v.kind == ExportedVariable::Kind::kTable) {
      RowFormat format;
      if (!ParseRowFormat(v.dtype, &format).ok()) {
        return bad(absl::StrCat("table ", v.name, ": dtype ", v.dtype,
                                " is not float32, float16, bfloat16 or int8"));
      }
    } else if (v.dtype != "float32" && v.dtype != "int64") {
      return bad("a dtype other than float32/int64");
    }
    v.count = e["count"].get<int64_t>();
    v.default_value = e.value("default_value", 0.0f);
    if (!absl::SimpleHexAtoi(e["crc32c"].get<std::string>(), &v.crc32c)) {
      return bad(absl::StrCat("variable ", v.name, ": a malformed crc32c"));
    }
    if (v.kind == ExportedVariable::Kind::kTable && v.shape.size() != 1) {
      return bad(absl::StrCat("table ", v.name, ": shape must be [dim]"));
    }
    if (v.count < 0 || v.row_bytes() <= 0) return bad(absl::StrCat("variable ", v.name, ": bad sizes"));
    m.variables.push_back(std::move(v));
  }
  return m;
}

std::string ManifestFileText(const ModelManifest& manifest) {
  const nlohmann::json body = manifest.ToJson();
  const std::string text = body.dump();
  nlohmann::json file;
  file["manifest"] = body;
  file["crc32c"] = absl::StrFormat("%08x", crc32c::Value(text));
  return file.dump(1) + "\n";
}

absl::StatusOr<ModelManifest> ParseManifestFile(const std::string& text, const std::string& file) {
  absl::StatusOr<nlohmann::json> j = ParseJson(text);
  if (!j.ok()) return DataLoss(file, absl::StrCat("not JSON (truncated?): ", j.status().message()));
  if (!j->is_object() || !j->contains("manifest") ||
      !j->value("crc32c", nlohmann::json()).is_string()) {
    return DataLoss(file, "expected {\"manifest\": ..., \"crc32c\": ...}");
  }
  uint32_t want = 0;
  if (!absl::SimpleHexAtoi((*j)["crc32c"].get<std::string>(), &want) ||
      crc32c::Value((*j)["manifest"].dump()) != want) {
    return DataLoss(file, "checksum mismatch (the manifest was changed or is corrupt)");
  }
  return ModelManifest::FromJson((*j)["manifest"], file);
}

std::string DenseKey(const std::string& name) { return absl::StrCat("d", std::string(1, '\0'), name); }
std::string RowsPrefix(const std::string& name) {
  return absl::StrCat("r", std::string(1, '\0'), name, std::string(1, '\0'));
}
std::string TablePrefix(const std::string& name) {
  return absl::StrCat("k", std::string(1, '\0'), name, std::string(1, '\0'));
}
std::string RowKey(const std::string& name, int64_t row) {
  return RowsPrefix(name) + BigEndian(static_cast<uint64_t>(row));
}
std::string TableKey(const std::string& name, int64_t key) {
  return TablePrefix(name) + BigEndian(static_cast<uint64_t>(key));
}

absl::StatusOr<std::unique_ptr<ModelStore>> ModelStore::Open(const std::string& dir,
                                                             const ModelStoreOptions& options) {
  auto store = std::make_unique<ModelStoreImpl>();
  RETURN_IF_ERROR(store->Init(dir, options));
  return std::unique_ptr<ModelStore>(std::move(store));
}

}  // namespace pstrain
