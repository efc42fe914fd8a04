#include "coordinator/variable_creator.h"

#include "absl/strings/str_cat.h"
#include "ps/row_format.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

// A canonical text of the spec, to recognise "the same variable again".
std::string SpecKey(const VariableSpec& spec) {
  const PartitionerOptions& p = spec.partitioner;
  return absl::StrCat(ShapeToString(spec.shape), "|", DTypeName(spec.dtype), "|",
                      PartitionerKindName(p.kind), ",", p.num_shards, ",", p.min_shard_bytes, ",",
                      p.max_shard_bytes, ",", p.max_shards.value_or(-1), ",", p.bytes_per_string,
                      "|", spec.initializer.SerializeAsString(), "|",
                      spec.optimizer ? spec.optimizer->SerializeAsString() : "none");
}

}  // namespace

DataType ToDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return DT_FLOAT32;
    case DType::kInt64: return DT_INT64;
    default: return DT_INVALID;
  }
}

absl::StatusOr<std::pair<int, int>> VariableCreator::Range(bool tables,
                                                           absl::string_view what) const {
  const int n = static_cast<int>(ps_.size());
  int begin = tables ? placement_.tables_ps_begin : placement_.variables_ps_begin;
  int end = tables ? placement_.tables_ps_end : placement_.variables_ps_end;
  if (end < 0) end = n;
  if (begin < 0 || begin >= end || end > n) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": no ps task to place it on (", tables ? "tables" : "fixed variables",
        " go on ps tasks [", begin, ", ", end, ") of ", n, ")"));
  }
  return std::make_pair(begin, end);
}

absl::StatusOr<ShardedVariable> VariableCreator::Create(const VariableSpec& spec) {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("variable \"", spec.name, "\": ", why));
  };
  if (spec.name.empty()) return absl::InvalidArgumentError("a variable needs a name");
  if (ps_.empty()) return invalid("no ps tasks to place it on");
  const DataType dtype = ToDataType(spec.dtype);
  if (dtype == DT_INVALID) {
    return invalid(absl::StrCat("dtype ", DTypeName(spec.dtype), " can't be a variable's"));
  }
  RETURN_IF_ERROR(ValidateShape(spec.shape, absl::StrCat("variable \"", spec.name, "\"")));
  const std::string key = SpecKey(spec);

  absl::MutexLock lock(&mu_);
  auto existing = created_.find(spec.name);
  if (existing != created_.end()) {
    if (existing->second.first == key) return existing->second.second;
    return absl::AlreadyExistsError(
        absl::StrCat("variable \"", spec.name, "\" already exists with a different spec"));
  }
  if (tables_.count(spec.name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("\"", spec.name, "\" already names a dynamic table"));
  }
  absl::StatusOr<std::unique_ptr<Partitioner>> partitioner = CreatePartitioner(spec.partitioner);
  if (!partitioner.ok()) return invalid(partitioner.status().message());
  absl::StatusOr<int> num_shards = (*partitioner)->NumShards(spec.shape, spec.dtype);
  if (!num_shards.ok()) return invalid(num_shards.status().message());
  ASSIGN_OR_RETURN(auto range,
                   Range(/*tables=*/false, absl::StrCat("variable \"", spec.name, "\"")));
  ASSIGN_OR_RETURN(std::vector<ShardPlacement> placements,
                   placer_.Place(spec.name, spec.shape, spec.dtype, *num_shards,
                                 range.second - range.first));
  for (ShardPlacement& p : placements) p.ps += range.first;

  std::map<int, CreateShardsRequest> requests;
  std::vector<ShardLocation> locations;
  std::vector<PlacedShard> placed;
  for (const ShardPlacement& p : placements) {
    VariableShardDef* def = requests[p.ps].add_shards();
    def->set_name(p.name);
    def->set_variable(spec.name);
    for (int64_t d : spec.shape) def->add_full_shape(d);
    def->set_dtype(dtype);
    def->set_row_offset(p.row_offset);
    def->set_num_rows(p.rows);
    def->set_shard_index(p.shard);
    def->set_num_shards(static_cast<int>(placements.size()));
    *def->mutable_initializer() = spec.initializer;
    if (spec.optimizer) {
      *def->mutable_optimizer() = *spec.optimizer;
      if (!spec.optimizer->has_staleness_scaling()) {
        def->mutable_optimizer()->set_staleness_scaling(staleness_scaling_);
      }
    }
    locations.push_back(ShardLocation{p.name, p.row_offset, p.rows, p.ps});
    placed.push_back(PlacedShard{p.ps, *def});
  }
  ASSIGN_OR_RETURN(ShardedVariable variable,
                   ShardedVariable::Create(spec.name, spec.shape, dtype, locations, ps_));

  // Create on every ps at once; report the first failure.
  std::vector<std::pair<int, const CreateShardsRequest*>> sends;
  for (const auto& [ps, request] : requests) sends.emplace_back(ps, &request);
  std::vector<CreateShardsResponse> responses(sends.size());
  RETURN_IF_ERROR(CallAll(static_cast<int>(sends.size()), [&](int i, PsClient::Done done) {
    ps_[sends[i].first]->CreateShardsAsync(sends[i].second, &responses[i], std::move(done));
  }));
  created_.emplace(spec.name, std::make_pair(key, variable));
  placed_.insert(placed_.end(), placed.begin(), placed.end());
  return variable;
}

absl::StatusOr<DynamicTable> VariableCreator::CreateTable(const TableSpec& spec) {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("dynamic table \"", spec.name, "\": ", why));
  };
  if (spec.name.empty()) return absl::InvalidArgumentError("a dynamic table needs a name");
  if (ps_.empty()) return invalid("no ps tasks to place it on");
  if (spec.dim < 1) return invalid(absl::StrCat("dim ", spec.dim, " must be at least 1"));
  if (spec.num_shards < 0) return invalid(absl::StrCat("num_shards ", spec.num_shards, " < 0"));
  ASSIGN_OR_RETURN(auto range,
                   Range(/*tables=*/true, absl::StrCat("dynamic table \"", spec.name, "\"")));
  // Default: one shard per ps task that takes tables.
  const int num_shards = spec.num_shards > 0 ? spec.num_shards : range.second - range.first;
  DynamicTableDef dynamic = spec.options;
  dynamic.set_dim(spec.dim);
  if (placement_.tables_disk_tier) dynamic.set_disk_tier(true);
  if (placement_.tables_row_format) dynamic.set_row_format(*placement_.tables_row_format);
  if (placement_.tables_slot_format) dynamic.set_slot_format(*placement_.tables_slot_format);
  dynamic.set_row_format(StoredFormatFor(dynamic.row_format(), spec.dim));
  const std::string key =
      absl::StrCat(num_shards, "|", dynamic.SerializeAsString(), "|",
                   spec.initializer.SerializeAsString(), "|",
                   spec.optimizer ? spec.optimizer->SerializeAsString() : "none");

  absl::MutexLock lock(&mu_);
  if (auto existing = tables_.find(spec.name); existing != tables_.end()) {
    if (existing->second.first == key) return existing->second.second;
    return absl::AlreadyExistsError(
        absl::StrCat("dynamic table \"", spec.name, "\" already exists with a different spec"));
  }
  if (created_.count(spec.name)) {
    return absl::AlreadyExistsError(absl::StrCat("\"", spec.name, "\" already names a variable"));
  }
  ASSIGN_OR_RETURN(std::vector<int> tasks,
                   placer_.PlaceKeyed(num_shards, range.second - range.first));
  for (int& t : tasks) t += range.first;
  std::map<int, CreateShardsRequest> requests;
  std::vector<std::string> names;
  std::vector<PlacedShard> placed;
  for (int i = 0; i < num_shards; ++i) {
    VariableShardDef* def = requests[tasks[i]].add_shards();
    def->set_name(absl::StrCat(spec.name, "/part_", i));
    def->set_variable(spec.name);
    def->add_full_shape(spec.dim);
    def->set_dtype(DT_FLOAT32);
    def->set_shard_index(i);
    def->set_num_shards(num_shards);
    *def->mutable_initializer() = spec.initializer;
    if (spec.optimizer) *def->mutable_optimizer() = *spec.optimizer;
    *def->mutable_dynamic() = dynamic;
    names.push_back(def->name());
    placed.push_back(PlacedShard{tasks[i], *def});
  }
  ASSIGN_OR_RETURN(DynamicTable table,
                   DynamicTable::Create(spec.name, spec.dim, names, tasks, ps_));
  std::vector<std::pair<int, const CreateShardsRequest*>> sends;
  for (const auto& [ps, request] : requests) sends.emplace_back(ps, &request);
  std::vector<CreateShardsResponse> responses(sends.size());
  RETURN_IF_ERROR(CallAll(static_cast<int>(sends.size()), [&](int i, PsClient::Done done) {
    ps_[sends[i].first]->CreateShardsAsync(sends[i].second, &responses[i], std::move(done));
  }));
  tables_.emplace(spec.name, std::make_pair(key, table));
  placed_.insert(placed_.end(), placed.begin(), placed.end());
  return table;
}

std::map<std::string, DynamicTable> VariableCreator::tables() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, DynamicTable> out;
  for (const auto& [name, entry] : tables_) out.emplace(name, entry.second);
  return out;
}

std::vector<PlacedShard> VariableCreator::placed_shards() const {
  absl::MutexLock lock(&mu_);
  return placed_;
}

absl::StatusOr<int> VariableCreator::RecreateOnPs(int ps) {
  if (ps < 0 || ps >= static_cast<int>(ps_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no ps task ", ps));
  }
  CreateShardsRequest request;
  for (const PlacedShard& p : placed_shards()) {
    if (p.ps == ps) *request.add_shards() = p.def;
  }
  if (request.shards_size() == 0) return 0;
  CreateShardsResponse response;
  RETURN_IF_ERROR(ps_[ps]->CreateShards(request, &response));
  int created = 0;
  for (bool c : response.created()) created += c ? 1 : 0;
  return created;
}

std::map<std::string, ShardedVariable> VariableCreator::variables() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, ShardedVariable> out;
  for (const auto& [name, entry] : created_) out.emplace(name, entry.second);
  return out;
}

}  // namespace pstrain
