#include "serving/model_follower.h"

#include <cstring>
#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/checkpoint_files.h"
#include "ps/shard_checkpoint.h"

namespace pstrain {

// The changes over the export, by the export's variable index.
// One checkpoint's rows of one table: its changed keys' rows and its erased keys.
struct TableLayer {
  bool full = false;  // a full checkpoint's: a key not here reads the default row
  static constexpr int64_t kErased = -1;
  absl::flat_hash_map<int64_t, int64_t> at;  // key -> its row's first float in rows, or kErased
  std::vector<float> rows;
  int64_t dim = 1;
  void Put(int64_t key, const float* row) {
    auto [it, fresh] = at.try_emplace(key, kErased);
    if (it->second == kErased) {
      it->second = static_cast<int64_t>(rows.size());
      rows.resize(rows.size() + dim);
    }
    std::memcpy(rows.data() + it->second, row, 4 * dim);
  }
  void Erase(int64_t key) { at[key] = kErased; }
};

// The changes over the export, by the export's variable index. A table's changes are layers,
// oldest first (the first may be a full checkpoint's): a version shares its layers with the one
// before and adds its own, so a sync costs its own delta, not everything since the export.
struct ModelChanges {
  std::string checkpoint;  // the last applied checkpoint's directory name
  int64_t step = 0;
  std::map<int, std::shared_ptr<const std::string>> fixed;  // whole variables' bytes
  std::map<int, std::vector<std::shared_ptr<const TableLayer>>> tables;
};

// Layers a table keeps before they are merged into one (a lookup reads at most this many).
constexpr size_t kMaxLayers = 8;

namespace {

// The export beneath a version's changes.
class FollowedStore : public ModelStore {
 public:
  FollowedStore(std::shared_ptr<const ModelStore> base, std::shared_ptr<const ModelChanges> changes)
      : base_(std::move(base)), changes_(std::move(changes)), manifest_(base_->manifest()) {
    manifest_.checkpoint = changes_->checkpoint;
    manifest_.step = changes_->step;
  }

  const ModelManifest& manifest() const override { return manifest_; }
  const std::string& dir() const override { return base_->dir(); }
  int Find(const std::string& name) const override { return base_->Find(name); }

  absl::StatusOr<absl::string_view> Dense(int variable) const override {
    auto it = changes_->fixed.find(variable);
    if (it == changes_->fixed.end() || variable >= static_cast<int>(manifest_.variables.size()) ||
        manifest_.variables[variable].kind != ExportedVariable::Kind::kDense) {
      return base_->Dense(variable);
    }
    return absl::string_view(*it->second);
  }

  absl::Status Rows(int variable, absl::Span<const int64_t> ids, char* out) const override {
    if (variable < 0 || variable >= static_cast<int>(manifest_.variables.size())) {
      return base_->Rows(variable, ids, out);
    }
    const ExportedVariable& v = manifest_.variables[variable];
    const int64_t row_bytes = v.row_bytes();
    if (auto f = changes_->fixed.find(variable); f != changes_->fixed.end()) {
      const std::string& bytes = *f->second;  // the whole variable (dense or by rows)
      for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || (ids[i] + 1) * row_bytes > static_cast<int64_t>(bytes.size())) {
          return absl::InvalidArgumentError(
              absl::StrCat("row ", ids[i], " outside variable ", v.name));
        }
        std::memcpy(out + i * row_bytes, bytes.data() + ids[i] * row_bytes, row_bytes);
      }
      return absl::OkStatus();
    }
    auto t = changes_->tables.find(variable);
    if (t == changes_->tables.end()) return base_->Rows(variable, ids, out);
    const std::vector<std::shared_ptr<const TableLayer>>& layers = t->second;
    // The keys the changes don't know go to the export in one call.
    std::vector<int64_t> rest;
    std::vector<size_t> rest_at;
    for (size_t i = 0; i < ids.size(); ++i) {
      char* row = out + i * row_bytes;
      int64_t found = TableLayer::kErased;
      bool known = false;
      for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer) {
        auto it = (*layer)->at.find(ids[i]);
        if (it != (*layer)->at.end()) {
          known = true;
          found = it->second;
          if (found != TableLayer::kErased)
            std::memcpy(row, (*layer)->rows.data() + found, row_bytes);
          break;
        }
        if ((*layer)->full) {
          known = true;
          break;
        }
      }
      if (known && found == TableLayer::kErased) {
        FillDefaultRow(v, row);
      } else if (!known) {
        rest.push_back(ids[i]);
        rest_at.push_back(i);
      }
    }
    if (rest.empty()) return absl::OkStatus();
    std::vector<char> read(rest.size() * row_bytes);
    RETURN_IF_ERROR(base_->Rows(variable, rest, read.data()));
    for (size_t j = 0; j < rest.size(); ++j) {
      std::memcpy(out + rest_at[j] * row_bytes, read.data() + j * row_bytes, row_bytes);
    }
    return absl::OkStatus();
  }

  CacheStats cache_stats() const override { return base_->cache_stats(); }

 private:
  const std::shared_ptr<const ModelStore> base_;
  const std::shared_ptr<const ModelChanges> changes_;
  ModelManifest manifest_;
};

}  // namespace

ModelFollower::ModelFollower(std::shared_ptr<const ModelStore> base, std::string checkpoint_dir)
    : base_(std::move(base)), dir_(std::move(checkpoint_dir)) {
  auto changes = std::make_shared<ModelChanges>();
  changes->checkpoint = base_->manifest().checkpoint;
  changes->step = base_->manifest().step;
  changes_ = std::move(changes);
  stats_.step = changes_->step;
  stats_.checkpoint = changes_->checkpoint;
}

ModelFollower::~ModelFollower() = default;

absl::StatusOr<std::optional<std::shared_ptr<const ModelStore>>> ModelFollower::Poll() {
  ASSIGN_OR_RETURN(std::vector<CheckpointEntry> entries, ListCheckpointDirs(dir_));
  bool changed = false;
  for (const CheckpointEntry& e : entries) {
    if (!e.complete || e.step <= changes_->step || skipped_.count(e.step) > 0) continue;
    const std::string name = std::filesystem::path(e.path).filename().string();
    auto skip = [&](const std::string& why) {
      skipped_.insert(e.step);  // once: not read (nor logged) again each poll
      ++stats_.checkpoints_skipped;
      stats_.last_error = why;
      chain_broken_ = true;
      LOG(WARNING) << "following " << dir_ << ": skipped " << name << ": " << why;
    };
    absl::StatusOr<CheckpointManifest> manifest = ReadManifest(e.path);
    if (!manifest.ok()) {
      if (manifest.status().code() == absl::StatusCode::kNotFound) continue;  // being collected
      skip(manifest.status().ToString());
      continue;
    }
    const bool full = manifest->base().empty();
    if (!full && (chain_broken_ || manifest->base() != changes_->checkpoint)) {
      // A delta of a chain this version isn't at the end of: wait for a full checkpoint.
      if (chain_broken_) {
        skipped_.insert(e.step);
        ++stats_.checkpoints_skipped;
      } else {
        skip(absl::StrCat("a delta of ", manifest->base(), ", not of ", changes_->checkpoint,
                          " (a checkpoint was missed)"));
      }
      continue;
    }
    std::shared_ptr<ModelChanges> next;
    absl::Status applied = Apply(e.path, *manifest, &next);
    if (!applied.ok()) {
      skip(applied.ToString());
      continue;
    }
    next->checkpoint = name;
    next->step = manifest->step();
    changes_ = std::move(next);
    chain_broken_ = false;
    changed = true;
    skipped_.erase(skipped_.begin(), skipped_.upper_bound(changes_->step));  // behind us now
  }
  if (!changed) return std::nullopt;
  ++stats_.versions;
  stats_.step = changes_->step;
  stats_.checkpoint = changes_->checkpoint;
  int64_t keys = 0;
  for (const auto& [index, layers] : changes_->tables) {
    for (const auto& layer : layers) keys += static_cast<int64_t>(layer->at.size());
  }
  stats_.keys_changed = keys;
  return std::shared_ptr<const ModelStore>(std::make_shared<FollowedStore>(base_, changes_));
}

absl::Status ModelFollower::Apply(const std::string& path, const CheckpointManifest& manifest,
                                  std::shared_ptr<ModelChanges>* out) {
  auto next = std::make_shared<ModelChanges>(*changes_);  // shares the untouched parts
  const bool full = manifest.base().empty();
  const ModelManifest& exported = base_->manifest();
  int64_t bytes_read = 0;
  for (const SavedVariable& sv : manifest.variables()) {
    const int index = base_->Find(sv.name());
    if (index < 0) continue;  // not served (the export has every variable; a newer job may not)
    const ExportedVariable& v = exported.variables[index];
    std::set<std::string> dbs;
    for (const SavedShardInfo& shard : sv.shards()) dbs.insert(shard.db());
    const std::string where = absl::StrCat(path, ", variable ", sv.name());
    if (v.kind == ExportedVariable::Kind::kTable) {
      if (!sv.has_dynamic()) return absl::DataLossError(where + ": not a dynamic table");
      const int64_t dim = v.shape.empty() ? 1 : v.shape[0];
      if (sv.full_shape_size() < 1 || sv.full_shape(0) != dim) {
        return absl::DataLossError(absl::StrCat(where, ": rows of ",
                                                sv.full_shape_size() ? sv.full_shape(0) : 0,
                                                " floats, the export's ", dim));
      }
      const int64_t record_floats = dim * (1 + sv.slot_names_size());
      auto layer = std::make_shared<TableLayer>();
      layer->full = full;
      layer->dim = dim;
      CheckpointEntries entries;
      entries.on_erased = [&](int64_t key) {
        layer->Erase(key);
        bytes_read += 8;
        return absl::OkStatus();
      };
      entries.on_record = [&](int64_t key, const float* floats) {
        layer->Put(key, floats);
        bytes_read += 24 + 4 * record_floats;
        return absl::OkStatus();
      };
      for (const std::string& db : dbs) {
        RETURN_IF_ERROR(
            ReadCheckpointEntries(absl::StrCat(path, "/", db), sv.name(), record_floats, entries));
      }
      std::vector<std::shared_ptr<const TableLayer>>& layers = next->tables[index];
      if (full) layers.clear();
      layers.push_back(std::move(layer));
      if (layers.size() > kMaxLayers) {
        // Merged, oldest first, into one (full if the oldest was).
        auto merged = std::make_shared<TableLayer>();
        merged->full = layers.front()->full;
        merged->dim = dim;
        for (const auto& l : layers) {
          for (const auto& [key, at] : l->at) {
            if (at == TableLayer::kErased) {
              merged->Erase(key);
            } else {
              merged->Put(key, l->rows.data() + at);
            }
          }
        }
        layers.assign(1, std::move(merged));
      }
      continue;
    }
    // A fixed variable, whole in every checkpoint.
    const int64_t row_bytes = v.row_bytes();
    const int64_t rows = v.shape.empty() ? 1 : v.shape[0];
    std::string whole(static_cast<size_t>(rows * row_bytes), '\0');
    int64_t covered = 0;
    CheckpointEntries entries;
    if (row_bytes <= 0) return absl::DataLossError(where + ": rows of no bytes in the export");
    entries.on_rows = [&](int64_t first_row, absl::string_view chunk) -> absl::Status {
      const int64_t n = static_cast<int64_t>(chunk.size()) / row_bytes;
      if (static_cast<int64_t>(chunk.size()) % row_bytes != 0 || first_row < 0 ||
          first_row > rows || n > rows - first_row) {
        return absl::DataLossError(absl::StrCat(where, ": a chunk at row ", first_row, " of ",
                                                chunk.size(), " bytes doesn't fit its ", rows,
                                                " rows of ", row_bytes, " bytes"));
      }
      std::memcpy(whole.data() + first_row * row_bytes, chunk.data(), chunk.size());
      covered += static_cast<int64_t>(chunk.size());
      return absl::OkStatus();
    };
    for (const std::string& db : dbs) {
      RETURN_IF_ERROR(ReadCheckpointEntries(absl::StrCat(path, "/", db), sv.name(), 0, entries));
    }
    if (covered != static_cast<int64_t>(whole.size())) {
      return absl::DataLossError(
          absl::StrCat(where, ": ", covered, " bytes of its ", whole.size(), " saved"));
    }
    bytes_read += covered;
    next->fixed[index] = std::make_shared<const std::string>(std::move(whole));
  }
  stats_.bytes_read += bytes_read;
  *out = std::move(next);
  return absl::OkStatus();
}

}  // namespace pstrain
