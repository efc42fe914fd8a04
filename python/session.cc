#include "python/session.h"

#include <google/protobuf/util/json_util.h>

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/checkpoint_files.h"
#include "models/devices.h"
#include "models/registry.h"
#include "partitioners/partitioner.h"

namespace pstrain {
namespace {

// Threads that run asynchronous calls: each blocks on its ps calls, so this bounds how many a
// Python loop can have in flight at once, not CPU use.
constexpr int kCallThreads = 16;

// `json` (empty: the message's defaults) into `message`. Errors: kInvalidArgument naming `what`
// and protobuf's reason (an unknown field, a bad enum name).
absl::Status ParseJsonInto(const std::string& json, absl::string_view what,
                           google::protobuf::Message* message) {
  if (json.empty()) return absl::OkStatus();
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(json, message, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", std::string(status.message().data(), status.message().size()),
                     " (in ", json, ")"));
  }
  return absl::OkStatus();
}

// A table's or variable's (`what`: `table "emb"`) initializer and optimizer from their JSON; an
// empty optimizer leaves it unset (no gradients). Errors: as ParseJsonInto.
absl::Status ParseInitializerAndOptimizer(const std::string& what,
                                          const std::string& initializer_json,
                                          const std::string& optimizer_json,
                                          InitializerDef* initializer,
                                          std::optional<OptimizerDef>* optimizer) {
  RETURN_IF_ERROR(ParseJsonInto(initializer_json, absl::StrCat(what, ": initializer"), initializer));
  if (optimizer_json.empty()) return absl::OkStatus();
  OptimizerDef parsed;
  RETURN_IF_ERROR(ParseJsonInto(optimizer_json, absl::StrCat(what, ": optimizer"), &parsed));
  *optimizer = parsed;
  return absl::OkStatus();
}

}  // namespace

absl::Status PendingCall::Wait(absl::Duration timeout) const {
  if (!done_.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError("the call is still running");
  }
  return status_;
}

Session::Session(ClusterSpec spec, std::unique_ptr<InProcessCluster> cluster)
    : spec_(std::move(spec)), cluster_(std::move(cluster)) {
  std::vector<std::string> addresses = spec_.tasks(kPs);
  connection_ = PsConnection::ToAddresses(addresses);
  creator_ = std::make_unique<VariableCreator>(connection_->clients());
  pool_ = std::make_unique<ThreadPool>(kCallThreads);
}

Session::~Session() {
  pool_.reset();  // runs the queued calls, then joins: nothing uses the clients after this
  Shutdown();
}

absl::StatusOr<std::unique_ptr<Session>> Session::InProcess(InProcessClusterOptions options) {
  if (options.registry == nullptr) {
    // The models' closures too, so a job (pstrain.fit) can train on this cluster's workers.
    ASSIGN_OR_RETURN(options.registry, TrainingRegistry(std::make_shared<ReplicaGroups>()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<InProcessCluster> cluster, InProcessCluster::Start(options));
  ClusterSpec spec = cluster->spec();
  return std::unique_ptr<Session>(new Session(std::move(spec), std::move(cluster)));
}

absl::StatusOr<std::unique_ptr<Session>> Session::Connect(const std::string& spec_text) {
  ASSIGN_OR_RETURN(ClusterSpec spec, ClusterSpec::FromFlagValue(spec_text));
  if (spec.num_ps() == 0) {
    return absl::InvalidArgumentError("the cluster spec has no ps task to connect to");
  }
  return std::unique_ptr<Session>(new Session(std::move(spec), nullptr));
}

absl::StatusOr<DynamicTable> Session::CreateTable(const SessionTableOptions& options) {
  TableSpec spec;
  spec.name = options.name;
  spec.dim = options.dim;
  spec.num_shards = options.num_shards;
  RETURN_IF_ERROR(ParseInitializerAndOptimizer(absl::StrCat("table \"", options.name, "\""),
                                               options.initializer_json, options.optimizer_json,
                                               &spec.initializer, &spec.optimizer));
  RETURN_IF_ERROR(ParseJsonInto(options.options_json,
                                absl::StrCat("table \"", options.name, "\": options"),
                                &spec.options));
  return creator_->CreateTable(spec);
}

absl::StatusOr<ShardedVariable> Session::CreateVariable(const SessionVariableOptions& options) {
  VariableSpec spec;
  spec.name = options.name;
  spec.shape = options.shape;
  ASSIGN_OR_RETURN(spec.dtype, ParseDType(options.dtype));
  ASSIGN_OR_RETURN(spec.partitioner.kind, ParsePartitionerKind(options.partitioner));
  spec.partitioner.num_shards = options.num_shards;
  if (options.min_shard_bytes > 0) spec.partitioner.min_shard_bytes = options.min_shard_bytes;
  spec.partitioner.max_shard_bytes = options.max_shard_bytes;
  if (options.max_shards >= 0) spec.partitioner.max_shards = options.max_shards;
  RETURN_IF_ERROR(ParseInitializerAndOptimizer(absl::StrCat("variable \"", options.name, "\""),
                                               options.initializer_json, options.optimizer_json,
                                               &spec.initializer, &spec.optimizer));
  return creator_->Create(spec);
}

absl::StatusOr<DynamicTable> Session::FindTable(const std::string& name) {
  const std::map<std::string, DynamicTable> created = creator_->tables();
  if (auto it = created.find(name); it != created.end()) return it->second;
  return connection_->Table(name);
}

absl::StatusOr<ShardedVariable> Session::FindVariable(const std::string& name) {
  const std::map<std::string, ShardedVariable> created = creator_->variables();
  if (auto it = created.find(name); it != created.end()) return it->second;
  return connection_->Variable(name);
}

absl::StatusOr<CheckpointManager*> Session::ManagerFor(const std::string& dir, bool incremental,
                                                       int keep) {
  const std::string key = absl::StrCat(dir, "\n", incremental, "\n", keep);
  auto it = managers_.find(key);
  if (it == managers_.end()) {
    CheckpointOptions options;
    options.dir = dir;
    options.incremental = incremental;
    options.keep = keep;
    ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> manager,
                     CheckpointManager::Create(options, connection_->clients(), creator_.get()));
    it = managers_.emplace(key, std::move(manager)).first;
  }
  return it->second.get();
}

absl::StatusOr<std::string> Session::Save(const std::string& dir, int64_t step, bool incremental,
                                          int keep) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("step ", step, " is negative"));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(CheckpointManager * manager, ManagerFor(dir, incremental, keep));
  return manager->Save(step, {});
}

absl::StatusOr<RestoredCheckpoint> Session::Restore(const std::string& path) {
  std::string checkpoint = path;
  std::string dir;
  // A checkpoint (even a corrupt one: its restore says what is wrong), else a directory of them.
  const absl::StatusOr<CheckpointManifest> manifest = ReadManifest(path);
  if (manifest.ok() || manifest.status().code() == absl::StatusCode::kDataLoss) {
    const size_t slash = path.find_last_of('/');
    dir = slash == std::string::npos ? "." : path.substr(0, slash);
  } else {
    ASSIGN_OR_RETURN(CheckpointEntry latest, LatestCheckpoint(path));
    checkpoint = latest.path;
    dir = path;
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(CheckpointManager * manager, ManagerFor(dir, /*incremental=*/false, /*keep=*/3));
  return manager->Restore(checkpoint);
}

std::shared_ptr<PendingCall> Session::Run(std::function<absl::Status()> fn) {
  auto call = std::make_shared<PendingCall>();
  pool_->Schedule([call, fn = std::move(fn)] { call->Finish(fn()); });
  return call;
}

void Session::Shutdown() {
  if (cluster_ != nullptr) cluster_->Shutdown();
}

}  // namespace pstrain
