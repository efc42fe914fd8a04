// Lists the checkpoints in a directory, or shows one checkpoint's variables:
//
//   bazel run //coordinator:ckpt_inspect -- DIR                 every checkpoint: step, time, size,
//                                                               keys of dynamic tables, its place
//                                                               in an incremental chain, and the
//                                                               best validation's mark (BEST)
//   bazel run //coordinator:ckpt_inspect -- DIR --step=120      its variables, shapes, shards
//   bazel run //coordinator:ckpt_inspect -- DIR/ckpt-000000000120
//
// Add --json for one JSON object instead of the table. Exit code 2 with a one-line error for a
// bad directory or a corrupt manifest.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "common/tensor.h"
#include "coordinator/checkpoint_files.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(int64_t, step, -1, "Show this checkpoint's variables (default: only list them).");
ABSL_FLAG(bool, json, false, "Print JSON instead of a table.");

namespace pstrain {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 2;
}

std::string When(int64_t micros) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMicros(micros), absl::UTCTimeZone());
}

std::string Shape(const google::protobuf::RepeatedField<int64_t>& dims) {
  return ShapeToString(pstrain::Shape(dims.begin(), dims.end()));
}

// Keys of every dynamic table a checkpoint holds (a delta: keys changed since its base).
int64_t TableKeys(const CheckpointManifest& m) {
  int64_t keys = 0;
  for (const SavedVariable& v : m.variables()) {
    for (const SavedShardInfo& s : v.shards()) keys += s.keys();
  }
  return keys;
}

// "full", "full (chain start)" or "delta 2 on ckpt-000000000120".
std::string Kind(const CheckpointManifest& m) {
  if (!m.base().empty()) return absl::StrCat("delta ", m.delta_index(), " on ", m.base());
  return m.incremental() ? "full (starts a chain)" : "full";
}

int List(const std::string& dir, bool json) {
  absl::StatusOr<std::vector<CheckpointEntry>> all = ListCheckpointDirs(dir);
  if (!all.ok()) return Fail(std::string(all.status().message()));
  // The best validation's checkpoint, if one is marked (a malformed mark is reported, not followed).
  absl::StatusOr<std::optional<BestMarker>> best = ReadBestMarker(dir);
  std::string best_name;
  if (best.ok() && best->has_value()) best_name = std::filesystem::path((*best)->path).filename();
  nlohmann::json out = nlohmann::json::array();
  if (!json) {
    std::printf("%-12s %-20s %10s %9s %12s  %-28s %s\n", "step", "saved (UTC)", "MB", "variables",
                "table keys", "kind", "path");
  }
  for (const CheckpointEntry& e : *all) {
    absl::StatusOr<CheckpointManifest> m = ReadManifest(e.path);
    nlohmann::json j = {{"step", e.step}, {"path", e.path}, {"complete", m.ok()}};
    if (m.ok()) {
      j["saved_utc"] = When(m->created_unix_micros());
      j["bytes"] = m->total_bytes();
      j["variables"] = m->variables_size();
      j["num_ps"] = m->num_ps();
      j["table_keys"] = TableKeys(*m);
      j["kind"] = Kind(*m);
      if (!m->base().empty()) j["base"] = m->base();
      if (std::filesystem::path(e.path).filename() == best_name) {
        j["best"] = (*best)->note;
      }
    } else {
      j["problem"] = std::string(m.status().message());
    }
    out.push_back(j);
    if (json) continue;
    if (m.ok()) {
      const bool is_best = std::filesystem::path(e.path).filename() == best_name;
      std::printf("%-12lld %-20s %10.1f %9d %12lld  %-28s %s%s\n", static_cast<long long>(e.step),
                  When(m->created_unix_micros()).c_str(), m->total_bytes() / 1e6,
                  m->variables_size(), static_cast<long long>(TableKeys(*m)), Kind(*m).c_str(),
                  e.path.c_str(),
                  is_best ? absl::StrCat("  BEST: ", (*best)->note).c_str() : "");
    } else {
      std::printf("%-12lld %-20s %10s %9s %12s  %-28s %s  (%s)\n", static_cast<long long>(e.step),
                  "-", "-", "-", "-", "-", e.path.c_str(),
                  e.complete ? "CORRUPT" : "incomplete: no manifest (a save that did not finish)");
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  if (!json && all->empty()) std::printf("(no checkpoints in %s)\n", dir.c_str());
  if (!best.ok()) std::fprintf(stderr, "warning: %s\n", std::string(best.status().message()).c_str());
  return 0;
}

int Show(const std::string& path, bool json) {
  absl::StatusOr<CheckpointManifest> m = ReadManifest(path);
  if (!m.ok()) return Fail(std::string(m.status().message()));
  nlohmann::json out = {{"path", path},
                        {"step", m->step()},
                        {"saved_utc", When(m->created_unix_micros())},
                        {"bytes", m->total_bytes()},
                        {"num_ps", m->num_ps()},
                        {"kind", Kind(*m)}};
  // The chain back to its full checkpoint.
  nlohmann::json chain = nlohmann::json::array();
  for (std::string at = path;;) {
    absl::StatusOr<CheckpointManifest> c = ReadManifest(at);
    if (!c.ok()) {
      chain.push_back({{"path", at}, {"problem", std::string(c.status().message())}});
      break;
    }
    chain.push_back({{"path", at}, {"step", c->step()}, {"kind", Kind(*c)},
                     {"table_keys", TableKeys(*c)}, {"bytes", c->total_bytes()}});
    if (c->base().empty()) break;
    at = at.substr(0, at.find_last_of('/') + 1) + c->base();
  }
  out["chain"] = chain;
  nlohmann::json state = nlohmann::json::object();
  for (const auto& [k, v] : m->state()) state[k] = v;
  out["state"] = state;
  nlohmann::json vars = nlohmann::json::array();
  for (const SavedVariable& v : m->variables()) {
    nlohmann::json shards = nlohmann::json::array();
    int64_t bytes = 0, keys = 0;
    for (const SavedShardInfo& s : v.shards()) {
      nlohmann::json shard = {{"shard", s.shard()},
                               {"ps", s.ps()},
                               {"bytes", s.bytes()},
                               {"apply_count", s.apply_count()}};
      if (v.has_dynamic()) {
        shard["keys"] = s.keys();
        shard["erased_keys"] = s.erased_keys();
      } else {
        shard["rows"] = {s.row_offset(), s.row_offset() + s.num_rows()};
      }
      shards.push_back(shard);
      bytes += s.bytes();
      keys += s.keys();
    }
    vars.push_back({{"name", v.name()},
                    {"shape", Shape(v.full_shape())},
                    {"dtype", DataType_Name(v.dtype())},
                    {"optimizer", v.has_optimizer() ? OptimizerDef::Kind_Name(v.optimizer().kind())
                                                    : "none"},
                    {"slots", std::vector<std::string>(v.slot_names().begin(),
                                                       v.slot_names().end())},
                    {"bytes", bytes},
                    {"dynamic", v.has_dynamic()},
                    {"keys", keys},
                    {"shards", shards}});
  }
  out["variables"] = vars;
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("checkpoint %s\n  step %lld, saved %s UTC, %.1f MB, %d ps\n", path.c_str(),
              static_cast<long long>(m->step()), When(m->created_unix_micros()).c_str(),
              m->total_bytes() / 1e6, m->num_ps());
  for (const auto& [k, v] : m->state()) {
    std::printf("  state %s = %s\n", k.c_str(), v.size() <= 64 ? v.c_str() : "(binary)");
  }
  std::printf("  %s\n", Kind(*m).c_str());
  if (chain.size() > 1) {
    std::printf("  chain (a restore applies these in order):\n");
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      if (it->contains("problem")) {
        std::printf("    %s  PROBLEM: %s\n", (*it)["path"].get<std::string>().c_str(),
                    (*it)["problem"].get<std::string>().c_str());
        continue;
      }
      std::printf("    %-50s %-30s %10lld keys %10.2f MB\n", (*it)["path"].get<std::string>().c_str(),
                  (*it)["kind"].get<std::string>().c_str(),
                  static_cast<long long>((*it)["table_keys"].get<int64_t>()),
                  (*it)["bytes"].get<int64_t>() / 1e6);
    }
  }
  for (const auto& v : vars) {
    std::printf("  %-28s %-14s %-8s %-9s %10.2f MB  slots [%s]\n",
                v["name"].get<std::string>().c_str(), v["shape"].get<std::string>().c_str(),
                v["dtype"].get<std::string>().c_str(), v["optimizer"].get<std::string>().c_str(),
                v["bytes"].get<int64_t>() / 1e6,
                absl::StrJoin(v["slots"].get<std::vector<std::string>>(), ",").c_str());
    for (const auto& s : v["shards"]) {
      if (v["dynamic"].get<bool>()) {
        std::printf("      %-30s ps:%-3d %lld keys, %lld erased  %.2f MB\n",
                    s["shard"].get<std::string>().c_str(), s["ps"].get<int>(),
                    static_cast<long long>(s["keys"].get<int64_t>()),
                    static_cast<long long>(s["erased_keys"].get<int64_t>()),
                    s["bytes"].get<int64_t>() / 1e6);
        continue;
      }
      std::printf("      %-30s ps:%-3d rows [%lld, %lld)  %.2f MB\n",
                  s["shard"].get<std::string>().c_str(), s["ps"].get<int>(),
                  static_cast<long long>(s["rows"][0].get<int64_t>()),
                  static_cast<long long>(s["rows"][1].get<int64_t>()),
                  s["bytes"].get<int64_t>() / 1e6);
    }
  }
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Lists checkpoints or shows one.\n"
      "Usage: ckpt_inspect DIR [--step=N] [--json]  |  ckpt_inspect DIR/ckpt-NNNNNNNNNNNN [--json]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    return pstrain::Fail("give one checkpoint directory (or one checkpoint) as the argument");
  }
  std::string path = args[1];
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const bool json = absl::GetFlag(FLAGS_json);
  const std::string base = path.substr(path.find_last_of('/') + 1);
  if (pstrain::CheckpointStep(base) >= 0) return pstrain::Show(path, json);
  if (absl::GetFlag(FLAGS_step) >= 0) {
    return pstrain::Show(pstrain::CheckpointPath(path, absl::GetFlag(FLAGS_step)), json);
  }
  return pstrain::List(path, json);
}
