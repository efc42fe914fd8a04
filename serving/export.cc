#include "serving/export.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/checkpoint_files.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/variable_creator.h"
#include "models/serving_head.h"
#include "ps/grpc_ps_client.h"
#include "ps/ps_server.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace pstrain {
namespace {

absl::Status Io(const std::string& path, const rocksdb::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(path, ": ", s.ToString()));
}

// The checkpoint `path` names: itself, or a checkpoint directory's best or latest.
absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(path) / kManifestFileName, ec)) return path;
  if (!std::filesystem::is_directory(path, ec)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint at ", path));
  }
  ASSIGN_OR_RETURN(std::optional<BestMarker> best, ReadBestMarker(path));
  if (best.has_value()) return best->path;
  ASSIGN_OR_RETURN(CheckpointEntry latest, LatestCheckpoint(path));
  return latest.path;
}

// Rows per Read request of a fixed variable (bounded well under the message limit).
int64_t RowsPerRead(int64_t row_bytes) {
  return std::max<int64_t>(1, (int64_t{64} << 20) / std::max<int64_t>(row_bytes, 1));
}

// Writes and checks one export. Holds the in-process ps the checkpoint is restored into.
class Exporter {
 public:
  // `options` checked by ExportModel.
  explicit Exporter(const ExportOptions& options) : options_(options) {
    if (!options_.table_format.empty()) {
      RowFormat format;
      ParseRowFormat(options_.table_format, &format).IgnoreError();  // checked by ExportModel
      table_format_ = format;
    }
  }

  absl::StatusOr<ExportResult> Run() {
    const absl::Time start = absl::Now();
    ExportResult result;
    ASSIGN_OR_RETURN(result.checkpoint, ResolveCheckpoint(options_.checkpoint));
    ASSIGN_OR_RETURN(CheckpointManifest checkpoint, ReadManifest(result.checkpoint));
    auto model = checkpoint.state().find(kCheckpointModelKey);
    auto serving = checkpoint.state().find(kCheckpointServingKey);
    if (model == checkpoint.state().end() || serving == checkpoint.state().end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", result.checkpoint, " has no serving config: ",
          model == checkpoint.state().end() ? "it was not written by the trainer"
                                            : absl::StrCat("model ", model->second,
                                                           " can't be served, or the checkpoint "
                                                           "predates serving")));
    }
    ModelManifest& m = result.manifest;
    m.model = model->second;
    m.serving_config = serving->second;
    m.checkpoint = std::filesystem::path(result.checkpoint).filename().string();
    m.step = checkpoint.step();

    RETURN_IF_ERROR(Restore(result.checkpoint, checkpoint));
    tmp_ = absl::StrCat(options_.out, ".tmp-", ::getpid());
    std::error_code ec;
    std::filesystem::remove_all(tmp_, ec);
    std::filesystem::create_directories(tmp_, ec);
    if (ec) return absl::InternalError(absl::StrCat("can't create ", tmp_, ": ", ec.message()));
    const std::string db_path = absl::StrCat(tmp_, "/", kModelDbDir);
    rocksdb::Options db_options;
    db_options.create_if_missing = true;
    db_options.error_if_exists = true;
    rocksdb::DB* db = nullptr;
    RETURN_IF_ERROR(Io(db_path, rocksdb::DB::Open(db_options, db_path, &db)));
    db_.reset(db);

    nlohmann::json tables = nlohmann::json::object();
    for (const SavedVariable& sv : checkpoint.variables()) {
      ExportedVariable v;
      v.name = sv.name();
      v.shape.assign(sv.full_shape().begin(), sv.full_shape().end());
      if (sv.has_dynamic()) {
        v.kind = ExportedVariable::Kind::kTable;
        v.default_value = sv.dynamic().default_value();
        const RowFormat format = table_format_.value_or(sv.dynamic().row_format());
        v.dtype = RowFormatName(StoredFormatFor(format, v.shape.empty() ? 1 : v.shape[0]));
        int64_t before = 0;
        RETURN_IF_ERROR(WriteTable(v, &before, &result.bytes));
        tables[v.name] = before;
      } else {
        v.dtype = sv.dtype() == DT_INT64 ? "int64" : "float32";
        RETURN_IF_ERROR(WriteFixed(&v, &result.bytes));
      }
      m.variables.push_back(std::move(v));
    }
    RETURN_IF_ERROR(Io(db_path, db_->Flush(rocksdb::FlushOptions())));
    RETURN_IF_ERROR(Io(db_path, db_->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr)));
    // Read back what was written, in key order: each variable's count and CRC-32C.
    for (ExportedVariable& v : m.variables) RETURN_IF_ERROR(Checksum(&v));
    RETURN_IF_ERROR(Io(db_path, db_->Close()));
    db_.reset();

    m.extra["min_count"] = options_.min_count;
    m.extra["top_k"] = options_.top_k;
    m.extra["table_keys_in_checkpoint"] = tables;
    m.extra["optimizer_slots"] = "not exported";
    {
      const std::string manifest_path = absl::StrCat(tmp_, "/", kModelManifestFile);
      std::ofstream out(manifest_path, std::ios::binary | std::ios::trunc);
      out << ManifestFileText(m);
      out.flush();
      if (!out) return absl::InternalError(absl::StrCat("can't write ", manifest_path));
    }
    if (std::filesystem::exists(options_.out, ec)) {
      if (!options_.overwrite) {
        return absl::AlreadyExistsError(
            absl::StrCat(options_.out, " exists (pass --overwrite to replace it)"));
      }
      std::filesystem::remove_all(options_.out, ec);
      if (ec) return absl::InternalError(absl::StrCat("can't remove ", options_.out, ": ", ec.message()));
    }
    std::filesystem::rename(tmp_, options_.out, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("can't rename ", tmp_, " to ", options_.out, ": ", ec.message()));
    }
    tmp_.clear();
    result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    LOG(INFO) << "exported " << m.model << " from " << result.checkpoint << " (step " << m.step
              << ") to " << options_.out << ": " << m.variables.size() << " variables, "
              << result.bytes / 1e6 << " MB in " << result.seconds << " s";
    return result;
  }

  ~Exporter() {
    db_.reset();
    if (!tmp_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(tmp_, ec);  // a failed export leaves nothing behind
    }
  }

 private:
  // Creates every saved variable on an in-process ps (one shard each) and restores the checkpoint.
  absl::Status Restore(const std::string& path, const CheckpointManifest& checkpoint) {
    PsServerOptions ps_options;
    ps_options.listen_address = "127.0.0.1:0";
    ASSIGN_OR_RETURN(server_, PsServer::Start(ps_options));
    client_ = NewGrpcPsClient(0, server_->address());
    creator_ = std::make_unique<VariableCreator>(std::vector<PsClient*>{client_.get()});
    for (const SavedVariable& sv : checkpoint.variables()) {
      if (sv.has_dynamic()) {
        TableSpec t;
        t.name = sv.name();
        t.dim = sv.full_shape_size() > 0 ? sv.full_shape(0) : 0;
        t.num_shards = 1;
        t.initializer = sv.initializer();
        if (sv.has_optimizer()) t.optimizer = sv.optimizer();
        t.options = sv.dynamic();
        // The ps stores the restored rows in the format asked for (and serves exports in it).
        if (table_format_.has_value()) t.options.set_row_format(*table_format_);
        RETURN_IF_ERROR(creator_->CreateTable(t).status());
      } else {
        VariableSpec v;
        v.name = sv.name();
        v.shape.assign(sv.full_shape().begin(), sv.full_shape().end());
        v.dtype = sv.dtype() == DT_INT64 ? DType::kInt64 : DType::kFloat32;
        v.initializer = sv.initializer();
        if (sv.has_optimizer()) v.optimizer = sv.optimizer();
        RETURN_IF_ERROR(creator_->Create(v).status());
      }
    }
    CheckpointOptions c;
    c.dir = std::filesystem::path(path).parent_path().string();
    ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> manager,
                     CheckpointManager::Create(c, {client_.get()}, creator_.get()));
    return manager->Restore(path).status();
  }

  absl::Status WriteFixed(ExportedVariable* v, int64_t* bytes) {
    const int64_t rows = v->shape.empty() ? 1 : v->shape[0];
    const int64_t row_bytes = v->row_bytes();
    const bool dense = rows * row_bytes <= options_.dense_bytes;
    v->kind = dense ? ExportedVariable::Kind::kDense : ExportedVariable::Kind::kRows;
    v->count = rows;
    std::string all;
    const int64_t step = RowsPerRead(row_bytes);
    for (int64_t begin = 0; begin < rows; begin += step) {
      const int64_t end = std::min(rows, begin + step);
      ReadRequest read;
      ReadOp* op = read.add_ops();
      op->set_shard(v->name);
      op->mutable_range()->set_row_begin(begin);
      op->mutable_range()->set_row_end(end);
      ReadResponse values;
      RETURN_IF_ERROR(client_->Read(read, &values));
      const std::string& got = values.values(0);
      if (static_cast<int64_t>(got.size()) != (end - begin) * row_bytes) {
        return absl::InternalError(absl::StrCat(v->name, ": read ", got.size(), " bytes for rows [",
                                                begin, ", ", end, ")"));
      }
      *bytes += static_cast<int64_t>(got.size());
      if (dense) {
        all += got;
        continue;
      }
      rocksdb::WriteBatch batch;
      for (int64_t r = begin; r < end; ++r) {
        batch.Put(RowKey(v->name, r), rocksdb::Slice(got.data() + (r - begin) * row_bytes, row_bytes));
      }
      RETURN_IF_ERROR(Io(v->name, db_->Write(rocksdb::WriteOptions(), &batch)));
    }
    if (dense) RETURN_IF_ERROR(Io(v->name, db_->Put(rocksdb::WriteOptions(), DenseKey(v->name), all)));
    return absl::OkStatus();
  }

  // One pass of the table's export cursor: `visit` gets each chunk's keys, rows and counts.
  template <typename Visit>
  absl::Status ScanTable(const std::string& shard, Visit visit) {
    ExportRequest request;
    request.set_shard(shard);
    request.set_max_keys(65536);
    request.set_stored_format(true);
    for (;;) {
      ExportResponse response;
      RETURN_IF_ERROR(client_->Export(request, &response));
      const size_t n = response.keys().size() / sizeof(int64_t);
      std::vector<int64_t> keys(n);
      std::vector<uint32_t> counts(n);
      if (n > 0) {
        std::memcpy(keys.data(), response.keys().data(), n * sizeof(int64_t));
        std::memcpy(counts.data(), response.counts().data(), n * sizeof(uint32_t));
      }
      RETURN_IF_ERROR(visit(keys, counts, response.values()));
      if (response.next_cursor().empty()) return absl::OkStatus();
      request.set_cursor(response.next_cursor());
    }
  }

  absl::Status WriteTable(ExportedVariable& v, int64_t* before, int64_t* bytes) {
    const std::string shard = absl::StrCat(v.name, "/part_0");
    const int64_t row_bytes = v.stored_row_bytes();
    // top_k: the keys to keep, by (count descending, key ascending).
    absl::flat_hash_set<int64_t> keep;
    if (options_.top_k > 0) {
      std::vector<std::pair<uint32_t, int64_t>> all;
      RETURN_IF_ERROR(ScanTable(shard, [&](const std::vector<int64_t>& keys,
                                           const std::vector<uint32_t>& counts,
                                           const std::string&) {
        for (size_t i = 0; i < keys.size(); ++i) {
          if (counts[i] >= options_.min_count) all.emplace_back(counts[i], keys[i]);
        }
        return absl::OkStatus();
      }));
      const size_t k = std::min<size_t>(all.size(), static_cast<size_t>(options_.top_k));
      std::partial_sort(all.begin(), all.begin() + k, all.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
      });
      for (size_t i = 0; i < k; ++i) keep.insert(all[i].second);
    }
    *before = 0;
    v.count = 0;
    return ScanTable(shard, [&](const std::vector<int64_t>& keys, const std::vector<uint32_t>& counts,
                                const std::string& values) -> absl::Status {
      if (static_cast<int64_t>(values.size()) != static_cast<int64_t>(keys.size()) * row_bytes) {
        return absl::InternalError(absl::StrCat(v.name, ": an export chunk of the wrong size"));
      }
      rocksdb::WriteBatch batch;
      for (size_t i = 0; i < keys.size(); ++i) {
        ++*before;
        if (counts[i] < options_.min_count) continue;
        if (options_.top_k > 0 && !keep.count(keys[i])) continue;
        batch.Put(TableKey(v.name, keys[i]), rocksdb::Slice(values.data() + i * row_bytes, row_bytes));
        *bytes += row_bytes;
      }
      return Io(v.name, db_->Write(rocksdb::WriteOptions(), &batch));
    });
  }

  // The variable's entries in key order: count and CRC-32C (keys and values).
  absl::Status Checksum(ExportedVariable* v) {
    if (v->kind == ExportedVariable::Kind::kDense) {
      const std::string key = DenseKey(v->name);
      std::string value;
      RETURN_IF_ERROR(Io(v->name, db_->Get(rocksdb::ReadOptions(), key, &value)));
      v->crc32c = crc32c::Extend(crc32c::Value(key), value.data(), value.size());
      return absl::OkStatus();
    }
    const std::string prefix = v->kind == ExportedVariable::Kind::kRows ? RowsPrefix(v->name)
                                                                         : TablePrefix(v->name);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    uint32_t crc = 0;
    int64_t count = 0;
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      crc = crc32c::Extend(crc, it->key().data(), it->key().size());
      crc = crc32c::Extend(crc, it->value().data(), it->value().size());
      ++count;
    }
    RETURN_IF_ERROR(Io(v->name, it->status()));
    v->crc32c = crc;
    v->count = count;
    return absl::OkStatus();
  }

  const ExportOptions options_;
  std::optional<RowFormat> table_format_;  // options_.table_format, parsed
  std::unique_ptr<PsServer> server_;
  std::unique_ptr<PsClient> client_;
  std::unique_ptr<VariableCreator> creator_;
  std::unique_ptr<rocksdb::DB> db_;
  std::string tmp_;
};

}  // namespace

absl::StatusOr<ExportResult> ExportModel(const ExportOptions& options) {
  if (options.checkpoint.empty() || options.out.empty()) {
    return absl::InvalidArgumentError("export: --checkpoint and --out are required");
  }
  if (options.min_count < 0 || options.top_k < 0) {
    return absl::InvalidArgumentError("export: min_count and top_k must be >= 0");
  }
  if (!options.table_format.empty()) {
    RowFormat format;
    if (absl::Status s = ParseRowFormat(options.table_format, &format); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("export: --table_format: ", s.message()));
    }
  }
  std::error_code ec;
  if (!options.overwrite && std::filesystem::exists(options.out, ec)) {
    return absl::AlreadyExistsError(
        absl::StrCat(options.out, " exists (pass --overwrite to replace it)"));
  }
  Exporter exporter(options);
  return exporter.Run();
}

}  // namespace pstrain
