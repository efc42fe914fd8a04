#include "ps/variable_store.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/wire_format_lite.h"

namespace pstrain {
namespace {

// Names the first field where two definitions differ.
std::string FirstDifference(const VariableShardDef& a, const VariableShardDef& b) {
  google::protobuf::util::MessageDifferencer differ;
  std::string report;
  differ.ReportDifferencesToString(&report);
  differ.Compare(a, b);
  const size_t newline = report.find('\n');
  return newline == std::string::npos ? report : report.substr(0, newline);
}

// A definition with what differs between shards of one variable cleared: what every shard of the
// variable must agree on (shape, dtype, initializer, optimizer, number of shards, dynamic table).
VariableShardDef VariableLevel(const VariableShardDef& def) {
  VariableShardDef v = def;
  v.clear_name();
  v.clear_row_offset();
  v.clear_num_rows();
  v.clear_shard_index();
  return v;
}

// `def` with its optimizer's unset fields filled with the defaults, as a shard stores it, so that
// "unset" and "the default" compare equal.
VariableShardDef WithDefaults(const VariableShardDef& def) {
  VariableShardDef filled = def;
  if (filled.has_optimizer()) {
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(filled.optimizer());
    if (opt.ok()) *filled.mutable_optimizer() = (*opt)->def();
  }
  return filled;
}

}  // namespace

VariableStore::OwnedDir::~OwnedDir() {
  if (path.empty()) return;
  std::error_code ignored;  // what is left is wiped by the next store that uses the directory
  std::filesystem::remove_all(path, ignored);
}

absl::StatusOr<std::shared_ptr<DiskStore>> VariableStore::TierStore() {
  absl::MutexLock lock(&tier_mu_);
  if (tier_store_ != nullptr) return tier_store_;
  if (tier_root_.path.empty()) {
    std::string base = disk_dir_;
    if (base.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    }
    std::error_code error;
    std::filesystem::create_directories(base, error);
    if (error) {
      return absl::InternalError(absl::StrCat("can't make the ps's disk directory ", base, ": ",
                                              error.message()));
    }
    // Tiers left by ps processes that died (a tier is a cache: nothing in it is needed).
    for (const auto& entry : std::filesystem::directory_iterator(base, error)) {
      const std::string name = entry.path().filename().string();
      int pid = 0;
      if (!absl::StartsWith(name, "pstrain-tiers-")) continue;
      const std::string rest = name.substr(strlen("pstrain-tiers-"));
      if (!absl::SimpleAtoi(rest.substr(0, rest.find('-')), &pid) || pid <= 0) continue;
      if (::kill(pid, 0) != 0 && errno == ESRCH) {
        std::error_code ignored;
        std::filesystem::remove_all(entry.path(), ignored);
      }
    }
    // Stores in one process (an in-process cluster's ps tasks) each have their own.
    static std::atomic<int64_t> stores{0};
    const std::string root =
        absl::StrCat(base, "/pstrain-tiers-", ::getpid(), "-", stores.fetch_add(1));
    std::filesystem::remove_all(root, error);
    std::filesystem::create_directories(root, error);
    if (!error) tier_root_.path = root;
    if (error) {
      return absl::InternalError(
          absl::StrCat("can't make the ps's tier directory ", root, ": ", error.message()));
    }
  }
  DiskStoreOptions options;
  options.dir = tier_root_.path + "/store";
  ASSIGN_OR_RETURN(tier_store_,
                   DiskStore::Open(options.ForBudget(budget_.limit()), &budget_, "the ps's disk store"));
  return tier_store_;
}

VariableStore::VariableStore(int data_threads, int64_t memory_budget_bytes, std::string disk_dir)
    : budget_(memory_budget_bytes), disk_dir_(std::move(disk_dir)) {
  if (data_threads < 0) {
    data_threads = std::max(0, static_cast<int>(std::thread::hardware_concurrency()) - 1);
  }
  if (data_threads > 0) pool_ = std::make_unique<ThreadPool>(data_threads);
}

absl::StatusOr<std::vector<bool>> VariableStore::CreateShards(
    const std::vector<VariableShardDef>& defs) {
  // Names and variable-level agreement within the request and with what is held.
  absl::flat_hash_set<std::string> names;
  std::map<std::string, const VariableShardDef*> by_variable;  // one shard of each, as a reference
  for (const VariableShardDef& def : defs) {
    if (!names.insert(def.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard \"", def.name(), "\" appears twice in one request"));
    }
  }
  std::vector<VariableShardDef> held = ListShards();
  for (const VariableShardDef& def : held) by_variable.emplace(def.variable(), &def);
  for (const VariableShardDef& def : defs) {
    auto [it, inserted] = by_variable.emplace(def.variable(), &def);
    if (inserted || it->second->name() == def.name()) continue;
    const VariableShardDef a = VariableLevel(WithDefaults(*it->second));
    const VariableShardDef b = VariableLevel(WithDefaults(def));
    if (!google::protobuf::util::MessageDifferencer::Equals(a, b)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard \"", def.name(), "\" of variable \"", def.variable(),
          "\" disagrees with its shard \"", it->second->name(),
          "\" (every shard of a variable has the same shape, dtype, initializer, optimizer and "
          "number of shards): ", FirstDifference(a, b)));
    }
  }
  // Build every new shard outside the lock (initialization can take a while for large tables).
  std::vector<std::unique_ptr<VariableShard>> built(defs.size());
  std::vector<std::unique_ptr<DynamicShard>> built_dynamic(defs.size());
  for (size_t i = 0; i < defs.size(); ++i) {
    if (Find(defs[i].name()) != nullptr || FindDynamic(defs[i].name()) != nullptr) continue;
    if (defs[i].has_dynamic()) {
      std::shared_ptr<DiskStore> disk;
      if (defs[i].dynamic().disk_tier()) {
        ASSIGN_OR_RETURN(disk, TierStore());
      }
      ASSIGN_OR_RETURN(built_dynamic[i], DynamicShard::Create(defs[i], &budget_, disk));
    } else {
      ASSIGN_OR_RETURN(built[i], VariableShard::Create(defs[i], /*initialize=*/true, &budget_));
    }
  }
  ShardDirectory::Writer maps(&directory_);
  std::vector<bool> created(defs.size(), false);
  // Check everything against the current maps before inserting anything.
  for (size_t i = 0; i < defs.size(); ++i) {
    const VariableShardDef* existing = nullptr;
    if (auto it = maps.fixed().find(defs[i].name()); it != maps.fixed().end()) {
      existing = &it->second->def();
    }
    if (auto it = maps.dynamic().find(defs[i].name()); it != maps.dynamic().end()) {
      existing = &it->second->def();
    }
    if (existing == nullptr) {
      if (built[i] == nullptr && built_dynamic[i] == nullptr) {
        // It existed at the first look and is gone now: shards are never deleted, so unreachable.
        return absl::InternalError(absl::StrCat("shard \"", defs[i].name(), "\" vanished"));
      }
      continue;
    }
    const VariableShardDef wanted = WithDefaults(defs[i]);
    if (!google::protobuf::util::MessageDifferencer::Equals(wanted, *existing)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "shard \"", defs[i].name(), "\" already exists with a different definition: ",
          FirstDifference(*existing, wanted)));
    }
  }
  for (size_t i = 0; i < defs.size(); ++i) {
    const std::string& name = defs[i].name();
    if (maps.fixed().contains(name) || maps.dynamic().contains(name)) continue;
    if (built[i] != nullptr) {
      maps.fixed().emplace(name, std::shared_ptr<VariableShard>(std::move(built[i])));
    } else {
      maps.dynamic().emplace(name, std::shared_ptr<DynamicShard>(std::move(built_dynamic[i])));
    }
    created[i] = true;
  }
  return created;
}

std::vector<VariableShardDef> VariableStore::ListShards() const {
  std::vector<VariableShardDef> defs;
  {
    ShardDirectory::Reader maps(&directory_);
    for (const auto& [name, shard] : maps.fixed()) defs.push_back(shard->def());
    for (const auto& [name, shard] : maps.dynamic()) defs.push_back(shard->def());
  }
  std::sort(defs.begin(), defs.end(), [](const VariableShardDef& a, const VariableShardDef& b) {
    return a.name() < b.name();
  });
  return defs;
}

std::vector<std::pair<std::string, StalenessTracker::Summary>> VariableStore::Staleness() const {
  std::vector<std::pair<std::string, std::shared_ptr<VariableShard>>> shards;
  {
    ShardDirectory::Reader maps(&directory_);
    for (const auto& [name, shard] : maps.fixed()) shards.emplace_back(name, shard);
  }
  std::vector<std::pair<std::string, StalenessTracker::Summary>> out;
  for (const auto& [name, shard] : shards) out.emplace_back(name, shard->staleness());
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

std::vector<DynamicShardStats> VariableStore::DynamicStats() const {
  std::vector<std::shared_ptr<DynamicShard>> shards;
  {
    // The Reader's wait matters here too: stats count what an answered update changes (erasures,
    // keys held).
    ShardDirectory::Reader maps(&directory_);
    for (const auto& [name, shard] : maps.dynamic()) shards.push_back(shard);
  }
  std::sort(shards.begin(), shards.end(),
            [](const auto& a, const auto& b) { return a->name() < b->name(); });
  std::vector<DynamicShardStats> stats;
  for (const auto& shard : shards) stats.push_back(shard->Stats());
  return stats;
}

std::shared_ptr<VariableShard> VariableStore::Find(const std::string& name) const {
  return ShardDirectory::Reader(&directory_).FindFixed(name);
}

std::shared_ptr<DynamicShard> VariableStore::FindDynamic(const std::string& name) const {
  return ShardDirectory::Reader(&directory_).FindDynamic(name);
}

template <typename Ops>
absl::StatusOr<std::vector<std::shared_ptr<VariableShard>>> VariableStore::FindAll(
    const Ops& ops) const {
  std::vector<std::shared_ptr<VariableShard>> found;
  found.reserve(ops.size());
  ShardDirectory::Reader maps(&directory_);
  for (const auto& op : ops) {
    auto it = maps.fixed().find(op.shard());
    if (it == maps.fixed().end()) {
      if (maps.dynamic().contains(op.shard())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "shard \"", op.shard(), "\" is a dynamic table's: it has no row ranges"));
      }
      return absl::NotFoundError(absl::StrCat("unknown variable shard \"", op.shard(),
                                              "\" on this ps (was it created?)"));
    }
    found.push_back(it->second);
  }
  return found;
}

template <typename Ops>
absl::StatusOr<std::vector<VariableStore::Target>> VariableStore::FindTargets(
    const Ops& ops) const {
  std::vector<Target> found(ops.size());
  ShardDirectory::Reader maps(&directory_);
  size_t i = 0;
  for (const auto& op : ops) {
    if (auto it = maps.fixed().find(op.shard()); it != maps.fixed().end()) {
      found[i++].fixed = it->second;
    } else if (auto d = maps.dynamic().find(op.shard()); d != maps.dynamic().end()) {
      found[i++].dynamic = d->second;
    } else {
      return absl::NotFoundError(absl::StrCat("unknown variable shard \"", op.shard(),
                                              "\" on this ps (was it created?)"));
    }
  }
  return found;
}

DynamicOpContext VariableStore::ContextLocked(int64_t step) const {
  DynamicOpContext ctx;
  ctx.step = step;
  ctx.generation = generation_;
  ctx.track_erasures = track_erasures_;
  return ctx;
}

absl::Status VariableStore::CheckIdCount(int64_t ids, absl::string_view what) const {
  if (max_ids_per_request_ > 0 && ids > max_ids_per_request_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", ids, " ids in one request, over this ps's limit of ",
                     max_ids_per_request_, " (split the request)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<VariableStore::Target>> VariableStore::PlanLookup(
    const LookupRequest& request, bool* inserts) const {
  int64_t ids = 0;
  for (const LookupOp& op : request.ops()) ids += op.ids().size() / 8;
  RETURN_IF_ERROR(CheckIdCount(ids, "lookup"));
  ASSIGN_OR_RETURN(std::vector<Target> targets, FindTargets(request.ops()));
  *inserts = false;
  for (int i = 0; i < request.ops_size(); ++i) {
    const LookupOp& op = request.ops(i);
    if (targets[i].fixed != nullptr) {
      if (op.insert()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "shard \"", op.shard(), "\": a training lookup (insert) is for dynamic tables"));
      }
      RETURN_IF_ERROR(targets[i].fixed->ValidateLookup(op.ids()));
    } else {
      RETURN_IF_ERROR(targets[i].dynamic->PrepareKeys(op.ids(), "lookup", &targets[i].keys));
      *inserts = *inserts || op.insert();
    }
  }
  return targets;
}

absl::Status VariableStore::RunLookup(const LookupRequest& request,
                                      const std::vector<Target>& targets, bool inserts,
                                      const std::function<char*(int i)>& out) const {
  // Training lookups of dynamic tables change them (keys stored, sightings counted): they wait
  // for a save like updates do.
  std::optional<absl::ReaderMutexLock> gate;
  DynamicOpContext ctx;
  if (inserts) {
    gate.emplace(&update_gate_);
    update_gate_.AssertReaderHeld();  // (tells the analysis what `gate` holds)
    ctx = ContextLocked(request.step());
  } else {
    ctx.step = request.step();
  }
  for (int i = 0; i < request.ops_size(); ++i) {
    const LookupOp& op = request.ops(i);
    if (targets[i].fixed != nullptr) {
      targets[i].fixed->NoteTrainingRead(request.step());
      targets[i].fixed->Lookup(op.ids(), out(i), pool_.get());
    } else {
      RETURN_IF_ERROR(
          targets[i].dynamic->Lookup(targets[i].keys, op.insert(), ctx, out(i), pool_.get()));
    }
  }
  return absl::OkStatus();
}

absl::Status VariableStore::Lookup(const LookupRequest& request, LookupResponse* response) const {
  bool inserts = false;
  ASSIGN_OR_RETURN(const std::vector<Target> targets, PlanLookup(request, &inserts));
  response->mutable_values()->Reserve(request.ops_size());
  for (int i = 0; i < request.ops_size(); ++i) {
    response->add_values()->resize(request.ops(i).ids().size() / 8 * targets[i].row_bytes());
  }
  return RunLookup(request, targets, inserts,
                   [&](int i) { return response->mutable_values(i)->data(); });
}

namespace {

// A reply laid out by LayOutValuesMessage: its buffer, and where each value's bytes go in it.
struct ValuesLayout {
  char* start = nullptr;
  std::vector<char*> values;

  // `ready` (given bytes of the whole reply) as a RowsReady for value i, of rows of `row_bytes`;
  // empty when `ready` is.
  VariableShard::RowsReady ReadyInRows(int i, int64_t row_bytes,
                                       const std::function<void(size_t bytes)>& ready) const {
    if (!ready) return nullptr;
    const size_t at = static_cast<size_t>(values[i] - start);
    return [&ready, at, row_bytes](int64_t rows) {
      ready(at + static_cast<size_t>(rows * row_bytes));
    };
  }
};

// Writes a message of one length-delimited field 1 per entry of `lengths` (LookupResponse and
// ReadResponse: `repeated bytes values = 1`) into one buffer from `allocate`; returns where each
// value's bytes go. Errors: kResourceExhausted for a reply over kMaxMessageBytes (nothing is
// allocated then: gRPC would refuse to send it anyway).
absl::StatusOr<ValuesLayout> LayOutValuesMessage(
    const std::vector<uint64_t>& lengths, const std::function<char*(size_t bytes)>& allocate,
    absl::string_view what, absl::string_view tail = {}) {
  using google::protobuf::internal::WireFormatLite;
  using google::protobuf::io::CodedOutputStream;
  constexpr uint8_t kValuesTag =
      WireFormatLite::MakeTag(1, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  uint64_t total = tail.size();
  for (uint64_t length : lengths) total += 1 + CodedOutputStream::VarintSize64(length) + length;
  if (total > static_cast<uint64_t>(kMaxMessageBytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": the reply would be ", total, " bytes, over the ", kMaxMessageBytes,
                     "-byte message limit (ask for fewer rows per request)"));
  }
  ValuesLayout layout;
  layout.start = allocate(total);
  layout.values.resize(lengths.size());
  uint8_t* out = reinterpret_cast<uint8_t*>(layout.start);
  for (size_t i = 0; i < lengths.size(); ++i) {
    *out++ = kValuesTag;
    out = CodedOutputStream::WriteVarint64ToArray(lengths[i], out);
    layout.values[i] = reinterpret_cast<char*>(out);
    out += lengths[i];
  }
  if (!tail.empty()) std::memcpy(out, tail.data(), tail.size());
  return layout;
}

// UpdateResponse.versions (field 2, packed) as wire bytes.
std::string PackedVersions(const std::vector<int64_t>& versions) {
  using google::protobuf::internal::WireFormatLite;
  using google::protobuf::io::CodedOutputStream;
  std::string body;
  for (int64_t v : versions) {
    uint8_t buf[10];
    const uint8_t* end =
        CodedOutputStream::WriteVarint64ToArray(static_cast<uint64_t>(v), buf);
    body.append(reinterpret_cast<const char*>(buf), end - buf);
  }
  std::string out;
  out.push_back(static_cast<char>(
      WireFormatLite::MakeTag(2, WireFormatLite::WIRETYPE_LENGTH_DELIMITED)));
  uint8_t len[10];
  const uint8_t* len_end = CodedOutputStream::WriteVarint64ToArray(body.size(), len);
  out.append(reinterpret_cast<const char*>(len), len_end - len);
  out += body;
  return out;
}

}  // namespace

absl::Status VariableStore::LookupSerialized(
    const LookupRequest& request, const std::function<char*(size_t bytes)>& allocate,
    const std::function<void(size_t bytes)>& ready) const {
  bool inserts = false;
  ASSIGN_OR_RETURN(const std::vector<Target> targets, PlanLookup(request, &inserts));
  std::vector<uint64_t> lengths(request.ops_size());
  for (int i = 0; i < request.ops_size(); ++i) {
    lengths[i] = request.ops(i).ids().size() / 8 * targets[i].row_bytes();
  }
  ASSIGN_OR_RETURN(const ValuesLayout layout, LayOutValuesMessage(lengths, allocate, "lookup"));
  const bool fixed_only = std::all_of(targets.begin(), targets.end(),
                                      [](const Target& t) { return t.fixed != nullptr; });
  if (!ready || !fixed_only) {
    return RunLookup(request, targets, inserts, [&](int i) { return layout.values[i]; });
  }
  // Fixed shards only: nothing can fail from here, so the reply streams as it is gathered.
  for (int i = 0; i < request.ops_size(); ++i) {
    targets[i].fixed->Lookup(request.ops(i).ids(), layout.values[i], pool_.get(),
                             layout.ReadyInRows(i, targets[i].row_bytes(), ready));
  }
  return absl::OkStatus();
}

absl::StatusOr<VariableStore::ReadPlan> VariableStore::PlanRead(
    const ReadRequest& request) const {
  ReadPlan plan;
  ASSIGN_OR_RETURN(plan.shards, FindAll(request.ops()));
  plan.ranges.resize(request.ops_size());
  plan.bytes.resize(request.ops_size());
  for (int i = 0; i < request.ops_size(); ++i) {
    auto& [begin, end] = plan.ranges[i];
    RETURN_IF_ERROR(plan.shards[i]->ValidateRead(request.ops(i).range(), &begin, &end));
    plan.bytes[i] = (end - begin) * plan.shards[i]->row_bytes();
  }
  return plan;
}

absl::Status VariableStore::ReadSerialized(
    const ReadRequest& request, const std::function<char*(size_t bytes)>& allocate,
    const std::function<void(size_t bytes)>& ready) const {
  ASSIGN_OR_RETURN(const ReadPlan plan, PlanRead(request));
  ASSIGN_OR_RETURN(const ValuesLayout layout, LayOutValuesMessage(plan.bytes, allocate, "read"));
  for (int i = 0; i < request.ops_size(); ++i) {
    plan.shards[i]->Read(plan.ranges[i].first, plan.ranges[i].second, layout.values[i],
                         layout.ReadyInRows(i, plan.shards[i]->row_bytes(), ready));
  }
  return absl::OkStatus();
}

absl::Status VariableStore::Read(const ReadRequest& request, ReadResponse* response) const {
  ASSIGN_OR_RETURN(const ReadPlan plan, PlanRead(request));
  for (int i = 0; i < request.ops_size(); ++i) {
    std::string* out = response->add_values();
    out->resize(plan.bytes[i]);
    plan.shards[i]->Read(plan.ranges[i].first, plan.ranges[i].second, out->data());
  }
  return absl::OkStatus();
}

absl::Status VariableStore::Update(const UpdateRequest& request, UpdateResponse* response) {
  if (!request.return_rows() || response == nullptr) {
    return Update(ViewsOf(request), request.step(), nullptr, nullptr, false);
  }
  std::string reply;
  const std::function<char*(size_t)> allocate = [&reply](size_t bytes) {
    reply.resize(bytes);
    return reply.data();
  };
  RETURN_IF_ERROR(
      Update(ViewsOf(request), request.step(), nullptr, &allocate, request.return_slots()));
  if (!response->ParseFromString(reply)) {
    return absl::InternalError("update: the reply with the rows does not parse");
  }
  return absl::OkStatus();
}

absl::Status VariableStore::UpdateWire(const std::vector<absl::string_view>& message,
                                       const std::function<bool()>& answer,
                                       const std::function<char*(size_t bytes)>& reply) {
  std::vector<UpdateOpView> ops;
  int64_t step = 0;
  bool return_rows = false, return_slots = false;
  RETURN_IF_ERROR(ParseUpdateRequest(message, &ops, &step, &return_rows, &return_slots));
  if (return_rows && reply) return Update(ops, step, nullptr, &reply, return_slots);
  return Update(ops, step, answer, nullptr, false);
}

absl::Status VariableStore::ReplyRows(const std::vector<UpdateOpView>& ops,
                                      const std::vector<Target>& targets,
                                      const std::function<char*(size_t bytes)>& allocate,
                                      bool with_slots) const {
  using google::protobuf::internal::WireFormatLite;
  using google::protobuf::io::CodedOutputStream;
  std::vector<uint64_t> lengths(ops.size(), 0);
  std::vector<int64_t> versions(ops.size(), 0);
  std::vector<std::pair<int64_t, int64_t>> ranges(ops.size(), {0, 0});
  for (size_t i = 0; i < ops.size(); ++i) {
    const VariableShard* shard = targets[i].fixed.get();
    if (shard == nullptr || ops[i].sparse) continue;
    auto& [begin, end] = ranges[i];
    RETURN_IF_ERROR(shard->ValidateRead(ops[i].range, &begin, &end));
    lengths[i] = static_cast<uint64_t>((end - begin) * shard->row_bytes());
    // Read before the rows: they hold at least this many gradients (one landing meanwhile counts
    // as unseen, so the next gradient's staleness errs high, never low).
    versions[i] = shard->apply_count();
  }
  // After the values (field 1): the versions (field 2), then each op's slots (field 3), which
  // are copied here; the values go straight into the reply below.
  std::string tail = PackedVersions(versions);
  if (with_slots) {
    constexpr uint8_t kSlotsTag =
        WireFormatLite::MakeTag(3, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
    for (size_t i = 0; i < ops.size(); ++i) {
      const VariableShard* shard = targets[i].fixed.get();
      const uint64_t bytes = lengths[i] == 0 ? 0 : shard->num_slots() * lengths[i];
      tail.push_back(static_cast<char>(kSlotsTag));
      uint8_t len[10];
      const uint8_t* len_end = CodedOutputStream::WriteVarint64ToArray(bytes, len);
      tail.append(reinterpret_cast<const char*>(len), len_end - len);
      const size_t at = tail.size();
      tail.resize(at + bytes);
      if (bytes > 0) shard->ReadSlots(ranges[i].first, ranges[i].second, tail.data() + at);
    }
  }
  ASSIGN_OR_RETURN(const ValuesLayout layout,
                   LayOutValuesMessage(lengths, allocate, "update", tail));
  for (size_t i = 0; i < ops.size(); ++i) {
    if (lengths[i] == 0) continue;
    targets[i].fixed->Read(ranges[i].first, ranges[i].second, layout.values[i]);
  }
  return absl::OkStatus();
}

absl::Status VariableStore::Update(const std::vector<UpdateOpView>& ops, int64_t step,
                                   const std::function<bool()>& answer,
                                   const std::function<char*(size_t bytes)>* reply_rows,
                                   bool with_slots) {
  int64_t ids = 0;
  for (const UpdateOpView& op : ops) ids += op.ids.size() / 8;
  RETURN_IF_ERROR(CheckIdCount(ids, "update"));
  absl::ReaderMutexLock gate(&update_gate_);
  ASSIGN_OR_RETURN(std::vector<Target> targets, FindTargets(ops));
  for (size_t i = 0; i < ops.size(); ++i) {
    if (targets[i].fixed != nullptr) {
      RETURN_IF_ERROR(targets[i].fixed->ValidateUpdate(ops[i]));
    } else {
      RETURN_IF_ERROR(targets[i].dynamic->ValidateUpdate(ops[i], &targets[i].keys));
    }
  }
  const DynamicOpContext ctx = ContextLocked(step);
  // Whether nothing can fail from here: a valid update of a fixed shard can't, nor a dynamic
  // table's gradients and erasures (only its assignments store keys, which may run out of memory).
  bool certain = true;
  for (size_t i = 0; i < ops.size(); ++i) {
    certain = certain && (targets[i].fixed != nullptr || ops[i].kind == UpdateOp::APPLY_GRADIENT ||
                          ops[i].kind == UpdateOp::ERASE);
  }
  std::optional<ShardDirectory::Answered> answered;
  if (answer && certain) {
    // Counted before the answer goes out, so any request sent after it finds the count and waits.
    answered.emplace(&directory_);
    if (!answer()) answered.reset();
  }
  // Answered early, the apply overlaps the client's next request on the wire, which needs both
  // cores (the two sides' copies): it runs on this thread alone. Measured with one push in flight
  // (ps_bench): a 4 MiB dense push ~5% faster than applied with the pool, sparse ones the same.
  // (A failure after the answer can't happen, by `certain`; if it did, the data plane would close
  // the connection: its client sees UNAVAILABLE.)
  ThreadPool* const pool = answered.has_value() ? nullptr : pool_.get();
  absl::Status applied;
  for (size_t i = 0; i < ops.size() && applied.ok(); ++i) {
    if (targets[i].fixed != nullptr) {
      targets[i].fixed->Update(ops[i], pool, step);
    } else {
      applied = targets[i].dynamic->Update(ops[i], targets[i].keys, ctx, pool);
    }
  }
  if (applied.ok() && reply_rows != nullptr) {
    return ReplyRows(ops, targets, *reply_rows, with_slots);
  }
  return applied;  // `answered` (if any) ends here: requests waiting for the apply go on
}

absl::Status VariableStore::Export(const ExportRequest& request, ExportResponse* response) const {
  std::shared_ptr<DynamicShard> shard = FindDynamic(request.shard());
  if (shard == nullptr) {
    if (Find(request.shard()) != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "export: shard \"", request.shard(), "\" is not a dynamic table's (use Read)"));
    }
    return absl::NotFoundError(
        absl::StrCat("export: unknown dynamic table shard \"", request.shard(), "\" on this ps"));
  }
  return shard->Export(request.cursor(), request.max_keys(), request.with_slots(), response,
                       request.stored_format());
}

absl::StatusOr<SaveShardsResponse> VariableStore::SaveShards(const SaveShardsRequest& request) {
  absl::MutexLock gate(&update_gate_);
  std::vector<std::shared_ptr<VariableShard>> shards;
  std::vector<std::shared_ptr<DynamicShard>> dynamic;
  {
    // No update is applying (the gate is held): the Reader doesn't wait.
    ShardDirectory::Reader maps(&directory_);
    for (const auto& [name, shard] : maps.fixed()) shards.push_back(shard);
    for (const auto& [name, shard] : maps.dynamic()) dynamic.push_back(shard);
  }
  const uint32_t covered = generation_;
  // Every change from here on belongs to the next generation, whether or not this save completes.
  ++generation_;
  if (request.track_erasures()) track_erasures_ = true;
  ASSIGN_OR_RETURN(SaveShardsResponse response,
                   WriteShardCheckpoint(request.db_path(), shards, dynamic, request.chunk_bytes(),
                                        request.delta_since_generation()));
  response.set_generation(covered);
  if (request.delta_since_generation() > 0) {
    // No later delta goes back beyond this one's base: older erasures are no longer needed.
    for (const auto& shard : dynamic) {
      shard->ForgetErasuresThrough(request.delta_since_generation());
    }
  }
  return response;
}

absl::StatusOr<RestoreShardsResponse> VariableStore::RestoreShards(
    const RestoreShardsRequest& request) {
  ASSIGN_OR_RETURN(const std::vector<Target> live, FindTargets(request.ops()));
  absl::flat_hash_set<std::string> names;
  for (const RestoreShardOp& op : request.ops()) {
    if (!names.insert(op.shard()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("restore: shard \"", op.shard(), "\" appears twice in one request"));
    }
  }
  absl::MutexLock lock(&restore_mu_);
  // Drop an older staged restore first: its memory may be needed for this one.
  staged_.clear();
  staged_dynamic_.clear();
  has_staged_ = false;
  std::vector<std::unique_ptr<VariableShard>> staged;
  std::vector<std::unique_ptr<DynamicShard>> staged_dynamic;
  ShardCheckpointReader reader;
  RestoreShardsResponse response;
  for (int i = 0; i < request.ops_size(); ++i) {
    int64_t bytes = 0;
    if (live[i].fixed != nullptr) {
      ASSIGN_OR_RETURN(std::unique_ptr<VariableShard> fresh,
                       VariableShard::Create(live[i].fixed->def(), /*initialize=*/false, &budget_));
      ASSIGN_OR_RETURN(bytes, reader.ReadInto(request.ops(i), fresh.get()));
      staged.push_back(std::move(fresh));
    } else {
      std::shared_ptr<DiskStore> disk;
      if (live[i].dynamic->def().dynamic().disk_tier()) {
        ASSIGN_OR_RETURN(disk, TierStore());
      }
      ASSIGN_OR_RETURN(std::unique_ptr<DynamicShard> fresh,
                       DynamicShard::Create(live[i].dynamic->def(), &budget_, disk));
      ASSIGN_OR_RETURN(bytes, reader.ReadDynamicInto(request.ops(i), fresh.get()));
      staged_dynamic.push_back(std::move(fresh));
    }
    response.set_bytes(response.bytes() + bytes);
  }
  staged_ = std::move(staged);
  staged_dynamic_ = std::move(staged_dynamic);
  staged_id_ = request.restore_id();
  has_staged_ = true;
  return response;
}

absl::Status VariableStore::CommitRestore(uint64_t restore_id, bool abort) {
  absl::MutexLock lock(&restore_mu_);
  if (!has_staged_ || staged_id_ != restore_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("no restore staged under id ", restore_id, " on this ps"));
  }
  has_staged_ = false;
  std::vector<std::unique_ptr<VariableShard>> staged = std::move(staged_);
  std::vector<std::unique_ptr<DynamicShard>> staged_dynamic = std::move(staged_dynamic_);
  staged_.clear();
  staged_dynamic_.clear();
  if (abort) return absl::OkStatus();
  absl::MutexLock gate(&update_gate_);
  ShardDirectory::Writer maps(&directory_);
  for (auto& shard : staged) {
    const std::string name = shard->name();
    maps.fixed()[name] = std::shared_ptr<VariableShard>(std::move(shard));
  }
  for (auto& shard : staged_dynamic) {
    const std::string name = shard->name();
    maps.dynamic()[name] = std::shared_ptr<DynamicShard>(std::move(shard));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
