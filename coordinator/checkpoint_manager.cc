#include "coordinator/checkpoint_manager.h"

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/tensor.h"
#include "coordinator/checkpoint_files.h"
#include "ps/optimizers.h"

namespace pstrain {
namespace {

std::string PsDbName(int ps) { return absl::StrCat("ps-", ps); }

std::string ShapeText(const google::protobuf::RepeatedField<int64_t>& shape) {
  return ShapeToString(Shape(shape.begin(), shape.end()));
}

// Prefixes a status's message with the checkpoint it concerns, keeping the code.
absl::Status About(const std::string& path, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("checkpoint ", path, ": ", s.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointManager>> CheckpointManager::Create(
    const CheckpointOptions& options, std::vector<PsClient*> ps, VariableCreator* variables) {
  if (options.dir.empty()) return absl::InvalidArgumentError("checkpoint dir is empty");
  if (options.keep < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoints to keep must be at least 1, got ", options.keep));
  }
  if (options.chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint chunk_bytes must be at least 1, got ", options.chunk_bytes));
  }
  if (options.full_every < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoints per chain (full_every) must be at least 1, got ",
                     options.full_every));
  }
  if (variables == nullptr || ps.empty()) {
    return absl::InvalidArgumentError("checkpoints need the ps tasks and the variable creator");
  }
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec || !std::filesystem::is_directory(options.dir)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint dir ", options.dir, " can't be created or is not a directory",
        ec ? absl::StrCat(": ", ec.message()) : ""));
  }
  return std::unique_ptr<CheckpointManager>(
      new CheckpointManager(options, std::move(ps), variables));
}

absl::Status CheckpointManager::Fault(absl::string_view point) const {
  return options_.fault_hook ? options_.fault_hook(point) : absl::OkStatus();
}

absl::StatusOr<std::string> CheckpointManager::Save(
    int64_t step, const std::map<std::string, std::string>& state) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("checkpoint step ", step, " < 0"));
  const absl::Time start = absl::Now();
  const std::string path = CheckpointPath(options_.dir, step);
  std::error_code ec;
  if (std::filesystem::exists(path)) {
    if (ReadManifest(path).ok()) {
      LOG(INFO) << "checkpoint at step " << step << " already saved: " << path;
      return path;
    }
    // The remains of a save that did not finish (or a corrupt one): replace them.
    LOG(WARNING) << "removing incomplete checkpoint " << path;
    std::filesystem::remove_all(path, ec);
    if (ec) return absl::InternalError(absl::StrCat("removing ", path, ": ", ec.message()));
  }
  std::filesystem::create_directories(path, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", path, ": ", ec.message()));
  RETURN_IF_ERROR(Fault("start"));

  // Every ps writes its own database, all at once: in full, or (incremental, extending a chain)
  // the dynamic tables' changes since the chain's last checkpoint.
  const int n = static_cast<int>(ps_.size());
  const bool delta = options_.incremental && chain_.valid && chain_.length < options_.full_every &&
                     static_cast<int>(chain_.generations.size()) == n;
  std::vector<SaveShardsRequest> requests(n);
  std::vector<SaveShardsResponse> responses(n);
  for (int i = 0; i < n; ++i) {
    requests[i].set_db_path(absl::StrCat(path, "/", PsDbName(i)));
    requests[i].set_chunk_bytes(options_.chunk_bytes);
    if (delta) requests[i].set_delta_since_generation(chain_.generations[i]);
    requests[i].set_track_erasures(options_.incremental);
  }
  RETURN_IF_ERROR(About(path, CallAll(n, [&](int i, PsClient::Done done) {
    ps_[i]->SaveShardsAsync(&requests[i], &responses[i], std::move(done));
  })));
  RETURN_IF_ERROR(Fault("after_ps_write"));

  // Every shard placed must have been saved by its ps.
  std::set<std::pair<int, std::string>> saved_names;
  for (int i = 0; i < n; ++i) {
    for (const SavedShard& s : responses[i].shards()) saved_names.emplace(i, s.def().name());
  }
  for (const PlacedShard& p : variables_->placed_shards()) {
    if (!saved_names.count({p.ps, p.def.name()})) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", path, ": ps:", p.ps, " does not hold shard \"", p.def.name(),
          "\" (it restarted and was not recovered?)"));
    }
  }

  CheckpointManifest manifest;
  manifest.set_format_version(1);
  manifest.set_step(step);
  manifest.set_created_unix_micros(absl::ToUnixMicros(absl::Now()));
  manifest.set_num_ps(n);
  manifest.set_incremental(options_.incremental);
  if (delta) {
    manifest.set_base(chain_.last);
    manifest.set_delta_index(chain_.length);
  }
  for (int i = 0; i < n; ++i) manifest.add_ps_generation(responses[i].generation());
  for (const auto& [key, value] : state) (*manifest.mutable_state())[key] = value;
  std::map<std::string, SavedVariable> by_name;
  for (int i = 0; i < n; ++i) {
    for (const SavedShard& s : responses[i].shards()) {
      const VariableShardDef& def = s.def();
      SavedVariable& v = by_name[def.variable()];
      if (v.name().empty()) {
        v.set_name(def.variable());
        *v.mutable_full_shape() = def.full_shape();
        v.set_dtype(def.dtype());
        *v.mutable_initializer() = def.initializer();
        if (def.has_dynamic()) {
          *v.mutable_dynamic() = def.dynamic();
          v.set_num_shards(def.num_shards());
        }
        if (def.has_optimizer()) {
          *v.mutable_optimizer() = def.optimizer();
          ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, Optimizer::Create(def.optimizer()));
          for (const std::string& slot : opt->slot_names()) v.add_slot_names(slot);
        }
      }
      SavedShardInfo* info = v.add_shards();
      info->set_shard(def.name());
      info->set_ps(i);
      info->set_db(PsDbName(i));
      info->set_row_offset(def.row_offset());
      info->set_num_rows(def.num_rows());
      info->set_apply_count(s.apply_count());
      info->set_bytes(s.bytes());
      info->set_keys(s.keys());
      info->set_erased_keys(s.erased_keys());
      info->set_shard_index(def.shard_index());
      manifest.set_total_bytes(manifest.total_bytes() + s.bytes());
    }
  }
  for (auto& [name, v] : by_name) {
    std::sort(v.mutable_shards()->begin(), v.mutable_shards()->end(),
              [](const SavedShardInfo& a, const SavedShardInfo& b) {
                return a.row_offset() != b.row_offset() ? a.row_offset() < b.row_offset()
                                                        : a.shard_index() < b.shard_index();
              });
    *manifest.add_variables() = std::move(v);
  }
  RETURN_IF_ERROR(Fault("before_manifest"));
  RETURN_IF_ERROR(
      WriteManifest(path, manifest, [this] { return Fault("before_manifest_rename"); }));
  // The chain goes on from here (a failed save above leaves it at the last complete checkpoint).
  chain_.valid = true;
  chain_.last = std::filesystem::path(path).filename().string();
  chain_.generations.assign(manifest.ps_generation().begin(), manifest.ps_generation().end());
  chain_.length = delta ? chain_.length + 1 : 1;
  RETURN_IF_ERROR(Fault("after_manifest"));

  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  LOG(INFO) << "saved " << (delta ? absl::StrCat("delta ", manifest.delta_index(), " on ",
                                                  manifest.base(), " ")
                                 : std::string(options_.incremental ? "full " : ""))
            << "checkpoint at step " << step << " to " << path << " ("
            << manifest.variables_size() << " variables, " << manifest.total_bytes() / 1e6
            << " MB in " << seconds << " s, "
            << (seconds > 0 ? manifest.total_bytes() / 1e6 / seconds : 0) << " MB/s)";
  CollectGarbage();
  return path;
}

void CheckpointManager::CollectGarbage() {
  absl::StatusOr<std::vector<CheckpointEntry>> all = ListCheckpointDirs(options_.dir);
  if (!all.ok()) {
    LOG(WARNING) << "not deleting old checkpoints: " << all.status().message();
    return;
  }
  // Each complete checkpoint's base (incremental chains), by directory name.
  std::map<std::string, std::string> base_of;
  std::vector<const CheckpointEntry*> complete;
  int64_t newest_complete = -1;
  for (const CheckpointEntry& e : *all) {
    if (!e.complete) continue;
    absl::StatusOr<CheckpointManifest> m = ReadManifest(e.path);
    if (!m.ok()) continue;  // unreadable: left alone (a restore of it says why)
    complete.push_back(&e);
    base_of[std::filesystem::path(e.path).filename().string()] = m->base();
    newest_complete = std::max(newest_complete, e.step);
  }
  // The newest `keep` complete checkpoints, the best, and every base they stand on.
  std::set<std::string> kept;
  auto keep_chain = [&](std::string name) {
    while (!name.empty() && kept.insert(name).second) {
      auto it = base_of.find(name);
      name = it == base_of.end() ? std::string() : it->second;
    }
  };
  for (size_t i = complete.size() > static_cast<size_t>(options_.keep)
                      ? complete.size() - options_.keep
                      : 0;
       i < complete.size(); ++i) {
    keep_chain(std::filesystem::path(complete[i]->path).filename().string());
  }
  absl::StatusOr<std::optional<BestMarker>> best = ReadBestMarker(options_.dir);
  if (!best.ok()) {
    LOG(WARNING) << "not deleting old checkpoints: " << best.status().message();
    return;
  }
  if (best->has_value()) keep_chain(std::filesystem::path((*best)->path).filename().string());
  for (const CheckpointEntry& e : *all) {
    const std::string name = std::filesystem::path(e.path).filename().string();
    const bool drop = e.complete ? (base_of.count(name) && !kept.count(name))
                                 : e.step < newest_complete;
    if (!drop) continue;
    std::error_code ec;
    // The manifest goes first: a half-deleted checkpoint is then an incomplete one, never a
    // complete one with missing files.
    std::filesystem::remove(std::filesystem::path(e.path) / kManifestFileName, ec);
    std::filesystem::remove_all(e.path, ec);
    if (ec) {
      LOG(WARNING) << "can't delete old checkpoint " << e.path << ": " << ec.message();
    }
  }
}

absl::Status CheckpointManager::MarkBest(const std::string& checkpoint_path,
                                        const std::string& note) {
  return WriteBestMarker(options_.dir, checkpoint_path, note);
}

absl::StatusOr<std::optional<BestMarker>> CheckpointManager::Best() const {
  return ReadBestMarker(options_.dir);
}

absl::Status CheckpointManager::ClearBest() { return RemoveBestMarker(options_.dir); }

absl::StatusOr<RestoredCheckpoint> CheckpointManager::Restore(const std::string& path,
                                                              const RestoreOptions& options) {
  return RestoreShards(path, options);
}

absl::StatusOr<std::optional<RestoredCheckpoint>> CheckpointManager::RestoreLatest(
    const RestoreOptions& options) {
  return RestoreLatestShards(options);
}

absl::StatusOr<std::optional<RestoredCheckpoint>> CheckpointManager::RestorePs(int ps) {
  if (ps < 0 || ps >= static_cast<int>(ps_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no ps task ", ps));
  }
  RestoreOptions options;
  options.only_ps = {ps};
  return RestoreLatestShards(options);
}

absl::StatusOr<std::optional<RestoredCheckpoint>> CheckpointManager::RestoreLatestShards(
    const RestoreOptions& options) {
  absl::StatusOr<CheckpointEntry> latest = LatestCheckpoint(options_.dir);
  if (latest.status().code() == absl::StatusCode::kNotFound) return std::nullopt;
  RETURN_IF_ERROR(latest.status());
  ASSIGN_OR_RETURN(RestoredCheckpoint r, RestoreShards(latest->path, options));
  return r;
}

absl::StatusOr<RestoredCheckpoint> CheckpointManager::RestoreShards(
    const std::string& path, const RestoreOptions& options) {
  const std::set<int> only_ps(options.only_ps.begin(), options.only_ps.end());
  ASSIGN_OR_RETURN(CheckpointManifest manifest, ReadManifest(path));
  // Whatever happens below, the next save starts a new chain: the ps tasks' state is no longer
  // the chain's (restored, or a ps restarted).
  chain_.valid = false;
  // The chain this checkpoint ends: its full checkpoint first.
  std::vector<std::pair<std::string, CheckpointManifest>> chain;
  {
    std::string at = path;
    CheckpointManifest m = manifest;
    for (;;) {
      const std::string base = m.base();
      const int64_t step = m.step();
      chain.emplace_back(at, std::move(m));
      if (base.empty()) break;
      const std::string base_path = (std::filesystem::path(at).parent_path() / base).string();
      absl::StatusOr<CheckpointManifest> b = ReadManifest(base_path);
      if (!b.ok()) {
        return absl::DataLossError(absl::StrCat("checkpoint ", at, " is a delta on ", base_path,
                                                ", which can't be read: ", b.status().message()));
      }
      if (b->step() >= step) {
        return absl::DataLossError(absl::StrCat("checkpoint ", at, ": its base ", base_path,
                                                " is not older (step ", b->step(), ")"));
      }
      at = base_path;
      m = *std::move(b);
    }
    std::reverse(chain.begin(), chain.end());
  }
  std::map<std::string, const SavedVariable*> saved;
  for (const SavedVariable& v : manifest.variables()) saved[v.name()] = &v;

  // The current shards, by variable.
  std::map<std::string, std::vector<PlacedShard>> current;
  for (PlacedShard& p : variables_->placed_shards()) current[p.def.variable()].push_back(p);

  RestoredCheckpoint result;
  result.path = path;
  result.step = manifest.step();
  for (const auto& [key, value] : manifest.state()) result.state[key] = value;

  std::vector<std::string> missing;
  std::vector<RestoreShardsRequest> requests(ps_.size());
  for (const auto& [name, shards] : current) {
    auto it = saved.find(name);
    if (it == saved.end()) {
      missing.push_back(name);
      continue;
    }
    const SavedVariable& v = *it->second;
    const VariableShardDef& def = shards.front().def;
    if (!std::equal(v.full_shape().begin(), v.full_shape().end(), def.full_shape().begin(),
                    def.full_shape().end()) ||
        v.dtype() != def.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", path, ": variable \"", name, "\" was saved as ", ShapeText(v.full_shape()),
          " ", DataType_Name(v.dtype()), " but is now ", ShapeText(def.full_shape()), " ",
          DataType_Name(def.dtype())));
    }
    if (v.has_dynamic() != def.has_dynamic()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", path, ": \"", name, "\" was saved as a ",
          v.has_dynamic() ? "dynamic table" : "fixed variable", " but is now a ",
          def.has_dynamic() ? "dynamic table" : "fixed variable"));
    }
    if (v.has_optimizer() != def.has_optimizer() ||
        (v.has_optimizer() && v.optimizer().kind() != def.optimizer().kind())) {
      auto opt_name = [](bool has, const OptimizerDef& o) {
        return has ? OptimizerDef::Kind_Name(o.kind()) : std::string("no optimizer");
      };
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", path, ": variable \"", name, "\" was saved with ",
          opt_name(v.has_optimizer(), v.optimizer()), " but now has ",
          opt_name(def.has_optimizer(), def.optimizer()),
          " (its optimizer slots can't be restored)"));
    }
    for (const PlacedShard& p : shards) {
      if (!only_ps.empty() && only_ps.count(p.ps) == 0) continue;
      RestoreShardOp* op = requests[p.ps].add_ops();
      op->set_shard(p.def.name());
      if (def.has_dynamic()) {
        // Every database of the table, the chain's full checkpoint first: each ps reads the keys
        // that route to its shard, whatever the partitioning they were saved under.
        for (const auto& [at, m] : chain) {
          std::set<std::string> dbs;
          for (const SavedVariable& sv : m.variables()) {
            if (sv.name() != name) continue;
            for (const SavedShardInfo& s : sv.shards()) {
              if (!dbs.insert(s.db()).second) continue;
              CheckpointSource* src = op->add_sources();
              src->set_db_path(absl::StrCat(at, "/", s.db()));
              src->set_apply_count(s.apply_count());
            }
          }
        }
        continue;
      }
      const int64_t begin = p.def.row_offset();
      const int64_t end = begin + p.def.num_rows();
      for (const SavedShardInfo& s : v.shards()) {
        if (s.row_offset() >= end || s.row_offset() + s.num_rows() <= begin) continue;
        CheckpointSource* src = op->add_sources();
        src->set_db_path(absl::StrCat(path, "/", s.db()));
        src->set_row_offset(s.row_offset());
        src->set_num_rows(s.num_rows());
        src->set_apply_count(s.apply_count());
      }
    }
  }
  if (!missing.empty()) {
    if (!options.skip_missing) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", path, " has no variable ",
                                              absl::StrJoin(missing, ", "),
                                              " (restore with skip_missing to keep their values)"));
    }
    result.skipped = missing;
    LOG(WARNING) << "checkpoint " << path << " has no variable " << absl::StrJoin(missing, ", ")
                 << "; they keep their current values";
  }
  std::vector<std::string> unused;
  for (const auto& [name, v] : saved) {
    if (!current.count(name)) unused.push_back(name);
  }
  if (!unused.empty() && only_ps.empty()) {
    LOG(WARNING) << "checkpoint " << path << " also holds " << absl::StrJoin(unused, ", ")
                 << ", which no current variable takes";
  }

  // Phase 1: every ps stages its shards. Phase 2: all commit, or all drop what they staged.
  std::vector<int> targets;
  for (int i = 0; i < static_cast<int>(requests.size()); ++i) {
    if (requests[i].ops_size() > 0) targets.push_back(i);
  }
  const uint64_t restore_id = std::mt19937_64(std::random_device()())();
  for (int i : targets) requests[i].set_restore_id(restore_id);
  std::vector<RestoreShardsResponse> staged(targets.size());
  const absl::Time start = absl::Now();
  absl::Status s = CallAll(static_cast<int>(targets.size()), [&](int k, PsClient::Done done) {
    ps_[targets[k]]->RestoreShardsAsync(&requests[targets[k]], &staged[k], std::move(done));
  });
  std::vector<CommitRestoreRequest> commits(targets.size());
  std::vector<CommitRestoreResponse> committed(targets.size());
  for (auto& c : commits) {
    c.set_restore_id(restore_id);
    c.set_abort(!s.ok());
  }
  absl::Status c = CallAll(static_cast<int>(targets.size()), [&](int k, PsClient::Done done) {
    ps_[targets[k]]->CommitRestoreAsync(&commits[k], &committed[k], std::move(done));
  });
  if (!s.ok()) {
    if (!c.ok()) LOG(WARNING) << "dropping a staged restore failed: " << c.message();
    return About(path, s);
  }
  RETURN_IF_ERROR(About(path, c));
  for (const RestoreShardsResponse& r : staged) result.bytes += r.bytes();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  LOG(INFO) << "restored checkpoint " << path << " (step " << result.step << ", "
            << result.bytes / 1e6 << " MB in " << seconds << " s"
            << (only_ps.empty() ? "" : absl::StrCat(", shards of ps:", absl::StrJoin(only_ps, ",")))
            << ")";
  return result;
}

}  // namespace pstrain
