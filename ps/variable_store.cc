#include "ps/variable_store.h"

#include <algorithm>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/wire_format_lite.h"

namespace pstrain {
namespace {

// Names the first field where two definitions differ, for the "already exists" error.
std::string FirstDifference(const VariableShardDef& a, const VariableShardDef& b) {
  google::protobuf::util::MessageDifferencer differ;
  std::string report;
  differ.ReportDifferencesToString(&report);
  differ.Compare(a, b);
  const size_t newline = report.find('\n');
  return newline == std::string::npos ? report : report.substr(0, newline);
}

}  // namespace

VariableStore::VariableStore(int data_threads) {
  if (data_threads < 0) {
    data_threads = std::max(0, static_cast<int>(std::thread::hardware_concurrency()) - 1);
  }
  if (data_threads > 0) pool_ = std::make_unique<ThreadPool>(data_threads);
}

absl::StatusOr<std::vector<bool>> VariableStore::CreateShards(
    const std::vector<VariableShardDef>& defs) {
  // Build every new shard outside the lock (initialization can take a while for large tables).
  absl::flat_hash_set<std::string> names;
  std::vector<std::unique_ptr<VariableShard>> built(defs.size());
  for (size_t i = 0; i < defs.size(); ++i) {
    if (!names.insert(defs[i].name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard \"", defs[i].name(), "\" appears twice in one request"));
    }
    std::shared_ptr<VariableShard> existing = Find(defs[i].name());
    if (existing != nullptr) continue;
    ASSIGN_OR_RETURN(built[i], VariableShard::Create(defs[i]));
  }
  absl::MutexLock lock(&mu_);
  std::vector<bool> created(defs.size(), false);
  // Check everything against the current map before inserting anything.
  for (size_t i = 0; i < defs.size(); ++i) {
    auto it = shards_.find(defs[i].name());
    if (it == shards_.end()) {
      if (built[i] == nullptr) {
        // It existed at the first look and is gone now: shards are never deleted, so unreachable.
        return absl::InternalError(absl::StrCat("shard \"", defs[i].name(), "\" vanished"));
      }
      continue;
    }
    // Compare against the stored definition, whose optimizer defaults are filled in; fill them in
    // the request too so that "unset" and "the default" compare equal.
    VariableShardDef wanted = defs[i];
    if (wanted.has_optimizer()) {
      absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(wanted.optimizer());
      if (opt.ok()) *wanted.mutable_optimizer() = (*opt)->def();
    }
    if (!google::protobuf::util::MessageDifferencer::Equals(wanted, it->second->def())) {
      return absl::AlreadyExistsError(absl::StrCat(
          "shard \"", defs[i].name(), "\" already exists with a different definition: ",
          FirstDifference(it->second->def(), wanted)));
    }
  }
  for (size_t i = 0; i < defs.size(); ++i) {
    if (built[i] == nullptr || shards_.contains(defs[i].name())) continue;
    shards_.emplace(defs[i].name(), std::shared_ptr<VariableShard>(std::move(built[i])));
    created[i] = true;
  }
  return created;
}

std::vector<VariableShardDef> VariableStore::ListShards() const {
  std::vector<VariableShardDef> defs;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [name, shard] : shards_) defs.push_back(shard->def());
  }
  std::sort(defs.begin(), defs.end(), [](const VariableShardDef& a, const VariableShardDef& b) {
    return a.name() < b.name();
  });
  return defs;
}

std::shared_ptr<VariableShard> VariableStore::Find(const std::string& name) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = shards_.find(name);
  return it == shards_.end() ? nullptr : it->second;
}

template <typename Ops>
absl::StatusOr<std::vector<std::shared_ptr<VariableShard>>> VariableStore::FindAll(
    const Ops& ops) const {
  std::vector<std::shared_ptr<VariableShard>> found;
  found.reserve(ops.size());
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& op : ops) {
    auto it = shards_.find(op.shard());
    if (it == shards_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown variable shard \"", op.shard(),
                                              "\" on this ps (was it created?)"));
    }
    found.push_back(it->second);
  }
  return found;
}

absl::Status VariableStore::Lookup(const LookupRequest& request, LookupResponse* response) const {
  ASSIGN_OR_RETURN(auto shards, FindAll(request.ops()));
  for (int i = 0; i < request.ops_size(); ++i) {
    RETURN_IF_ERROR(shards[i]->ValidateLookup(request.ops(i).ids()));
  }
  response->mutable_values()->Reserve(request.ops_size());
  for (int i = 0; i < request.ops_size(); ++i) {
    std::string* out = response->add_values();
    out->resize(request.ops(i).ids().size() / 8 * shards[i]->row_bytes());
    shards[i]->Lookup(request.ops(i).ids(), out->data(), pool_.get());
  }
  return absl::OkStatus();
}

namespace {

// Writes a message of one length-delimited field 1 per entry of `lengths` (LookupResponse and
// ReadResponse: `repeated bytes values = 1`) into one buffer from `allocate`; fill(i, out) writes
// value i's lengths[i] bytes at `out`.
void WriteValuesMessage(const std::vector<uint64_t>& lengths,
                        const std::function<char*(size_t bytes)>& allocate,
                        const std::function<void(size_t i, char* out)>& fill) {
  using google::protobuf::internal::WireFormatLite;
  using google::protobuf::io::CodedOutputStream;
  constexpr uint8_t kValuesTag =
      WireFormatLite::MakeTag(1, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  size_t total = 0;
  for (uint64_t length : lengths) total += 1 + CodedOutputStream::VarintSize64(length) + length;
  uint8_t* out = reinterpret_cast<uint8_t*>(allocate(total));
  for (size_t i = 0; i < lengths.size(); ++i) {
    *out++ = kValuesTag;
    out = CodedOutputStream::WriteVarint64ToArray(lengths[i], out);
    fill(i, reinterpret_cast<char*>(out));
    out += lengths[i];
  }
}

}  // namespace

absl::Status VariableStore::LookupSerialized(
    const LookupRequest& request, const std::function<char*(size_t bytes)>& allocate) const {
  ASSIGN_OR_RETURN(auto shards, FindAll(request.ops()));
  for (int i = 0; i < request.ops_size(); ++i) {
    RETURN_IF_ERROR(shards[i]->ValidateLookup(request.ops(i).ids()));
  }
  std::vector<uint64_t> lengths(request.ops_size());
  for (int i = 0; i < request.ops_size(); ++i) {
    lengths[i] = request.ops(i).ids().size() / 8 * shards[i]->row_bytes();
  }
  WriteValuesMessage(lengths, allocate, [&](size_t i, char* out) {
    shards[i]->Lookup(request.ops(i).ids(), out, pool_.get());
  });
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
    const ReadRequest& request, const std::function<char*(size_t bytes)>& allocate) const {
  ASSIGN_OR_RETURN(const ReadPlan plan, PlanRead(request));
  WriteValuesMessage(plan.bytes, allocate, [&](size_t i, char* out) {
    plan.shards[i]->Read(plan.ranges[i].first, plan.ranges[i].second, out);
  });
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

absl::Status VariableStore::Update(const UpdateRequest& request) {
  return Update(ViewsOf(request));
}

absl::Status VariableStore::UpdateWire(const std::vector<absl::string_view>& message) {
  std::vector<UpdateOpView> ops;
  RETURN_IF_ERROR(ParseUpdateRequest(message, &ops));
  return Update(ops);
}

absl::Status VariableStore::Update(const std::vector<UpdateOpView>& ops) {
  absl::ReaderMutexLock gate(&update_gate_);
  ASSIGN_OR_RETURN(auto shards, FindAll(ops));
  for (size_t i = 0; i < ops.size(); ++i) RETURN_IF_ERROR(shards[i]->ValidateUpdate(ops[i]));
  for (size_t i = 0; i < ops.size(); ++i) shards[i]->Update(ops[i], pool_.get());
  return absl::OkStatus();
}

absl::StatusOr<SaveShardsResponse> VariableStore::SaveShards(const SaveShardsRequest& request) {
  absl::MutexLock gate(&update_gate_);
  std::vector<std::shared_ptr<VariableShard>> shards;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [name, shard] : shards_) shards.push_back(shard);
  }
  return WriteShardCheckpoint(request.db_path(), shards, request.chunk_bytes());
}

absl::StatusOr<RestoreShardsResponse> VariableStore::RestoreShards(
    const RestoreShardsRequest& request) {
  ASSIGN_OR_RETURN(auto live, FindAll(request.ops()));
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
  has_staged_ = false;
  std::vector<std::unique_ptr<VariableShard>> staged;
  ShardCheckpointReader reader;
  RestoreShardsResponse response;
  for (int i = 0; i < request.ops_size(); ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<VariableShard> fresh,
                     VariableShard::Create(live[i]->def(), /*initialize=*/false));
    ASSIGN_OR_RETURN(int64_t bytes, reader.ReadInto(request.ops(i), fresh.get()));
    response.set_bytes(response.bytes() + bytes);
    staged.push_back(std::move(fresh));
  }
  staged_ = std::move(staged);
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
  staged_.clear();
  if (abort) return absl::OkStatus();
  absl::MutexLock gate(&update_gate_);
  absl::MutexLock map_lock(&mu_);
  for (auto& shard : staged) {
    const std::string name = shard->name();
    shards_[name] = std::shared_ptr<VariableShard>(std::move(shard));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
