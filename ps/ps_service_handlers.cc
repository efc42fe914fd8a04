#include "ps/ps_service_handlers.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/wire_reader.h"
#include "proto/ps_service.pb.h"

namespace pstrain {
namespace {

// A typed method: parse Request, run `serve`, write Response.
template <typename Request, typename Response, typename Serve>
std::function<absl::Status(const std::vector<absl::string_view>&, const ReplyAllocator&)> Typed(
    std::string name, Serve serve) {
  return [name = std::move(name), serve](const std::vector<absl::string_view>& bytes,
                                         const ReplyAllocator& reply) -> absl::Status {
    Request request;
    RETURN_IF_ERROR(ParseRequest(bytes, name, &request));
    Response response;
    RETURN_IF_ERROR(serve(request, &response));
    return WriteReply(response, reply);
  };
}

}  // namespace

const google::protobuf::ServiceDescriptor* PsServiceHandlers::Service() {
  static const google::protobuf::ServiceDescriptor* service = FindService("pstrain.PsService");
  return service;
}

PsServiceHandlers::PsServiceHandlers(const PsServiceLimits& limits, CheckpointRoot root)
    : max_large_(limits.max_concurrent_large_requests),
      store_(limits.data_threads, limits.memory_budget_bytes, limits.disk_dir), root_(std::move(root)) {
  store_.set_max_ids_per_request(limits.max_ids_per_request);
  for (int m = 0; m < Service()->method_count(); ++m) {
    methods_.push_back(Bind(Service()->method(m)->name()));
  }
}

PsServiceHandlers::~PsServiceHandlers() {
  if (metrics_ != nullptr) metrics_->RemoveCollector(collector_);
}

void PsServiceHandlers::ExportMetrics(MetricsRegistry* registry) {
  if (registry == nullptr) return;
  metrics_ = registry;
  rows_looked_up_ = registry->GetCounter("pstrain_ps_rows_looked_up_total",
                                         "Rows (and dynamic tables' keys) sent in Lookup replies.");
  rows_read_ = registry->GetCounter("pstrain_ps_rows_read_total", "Rows sent in Read replies.");
  save_seconds_ = registry->GetHistogram("pstrain_ps_checkpoint_save_seconds",
                                         "Time to write this ps's part of a checkpoint.",
                                         LatencyBuckets());
  restore_seconds_ = registry->GetHistogram("pstrain_ps_checkpoint_restore_seconds",
                                            "Time to stage a checkpoint restore.",
                                            LatencyBuckets());
  saved_bytes_ = registry->GetCounter("pstrain_ps_checkpoint_saved_bytes_total",
                                      "Values and slots written into checkpoints.");
  restored_bytes_ = registry->GetCounter("pstrain_ps_checkpoint_restored_bytes_total",
                                         "Values and slots read from checkpoints.");
  collector_ = registry->AddCollector([this](MetricsRegistry::Sink& out) {
    const MemoryBudget& budget = store_.budget();
    out.AddGauge("pstrain_ps_memory_budget_used_bytes", "Bytes reserved under the memory budget.",
                 {}, static_cast<double>(budget.used()));
    out.AddGauge("pstrain_ps_memory_budget_limit_bytes", "The memory budget (0: none).", {},
                 static_cast<double>(budget.limit()));
    std::map<std::string, double> bytes;  // by variable
    for (const VariableShardDef& def : store_.ListShards()) {
      if (def.has_dynamic()) continue;
      int64_t width = 1;
      for (int i = 1; i < def.full_shape_size(); ++i) width *= def.full_shape(i);
      bytes[def.variable()] +=
          static_cast<double>(def.num_rows() * width * (def.dtype() == DT_INT64 ? 8 : 4));
    }
    struct Table {
      double keys = 0, bytes = 0, admitted = 0, rejected = 0, ttl = 0, capacity = 0, erased = 0;
      bool tiered = false;  // a disk tier: the tier's figures below
      double ram_keys = 0, disk_keys = 0, disk_bytes = 0, disk_file_bytes = 0, hits = 0,
             misses = 0, read = 0, written = 0, to_disk = 0, to_ram = 0;
    };
    std::map<std::string, Table> tables;
    for (const DynamicShardStats& s : store_.DynamicStats()) {
      const std::string variable = s.shard().substr(0, s.shard().rfind("/part_"));
      Table& t = tables[variable];
      t.keys += s.keys();
      t.bytes += s.bytes();
      t.admitted += s.admitted();
      t.rejected += s.rejected();
      t.ttl += s.evicted_ttl();
      t.capacity += s.evicted_capacity();
      t.erased += s.erased();
      t.tiered = t.tiered || s.disk_tier();
      t.ram_keys += s.ram_keys();
      t.disk_keys += s.disk_keys();
      t.disk_bytes += s.disk_bytes();
      t.disk_file_bytes += s.disk_file_bytes();
      t.hits += s.disk_hits();
      t.misses += s.disk_misses();
      t.read += s.disk_bytes_read();
      t.written += s.disk_bytes_written();
      t.to_disk += s.moved_to_disk();
      t.to_ram += s.moved_to_ram();
    }
    for (const auto& [variable, t] : tables) bytes[variable] += t.bytes;
    for (const auto& [variable, b] : bytes) {
      out.AddGauge("pstrain_ps_variable_bytes",
                   "Bytes of each variable's shards on this ps (values; tables: records).",
                   {{"variable", variable}}, b);
    }
    for (const auto& [variable, t] : tables) {
      const Labels v{{"variable", variable}};
      out.AddGauge("pstrain_ps_table_keys", "Keys a dynamic table holds on this ps.", v, t.keys);
      out.AddCounter("pstrain_ps_table_admitted_total", "Keys stored by a dynamic table.", v,
                     t.admitted);
      out.AddCounter("pstrain_ps_table_rejected_total",
                     "Training lookups of keys not (yet) admitted.", v, t.rejected);
      out.AddCounter("pstrain_ps_table_evicted_total", "Keys evicted, by reason.",
                     {{"variable", variable}, {"reason", "ttl"}}, t.ttl);
      out.AddCounter("pstrain_ps_table_evicted_total", "Keys evicted, by reason.",
                     {{"variable", variable}, {"reason", "capacity"}}, t.capacity);
      out.AddCounter("pstrain_ps_table_erased_total", "Keys erased by ERASE updates.", v, t.erased);
      if (!t.tiered) continue;
      out.AddGauge("pstrain_ps_table_tier_keys", "Keys of a dynamic table in each tier.",
                   {{"variable", variable}, {"tier", "ram"}}, t.ram_keys);
      out.AddGauge("pstrain_ps_table_tier_keys", "Keys of a dynamic table in each tier.",
                   {{"variable", variable}, {"tier", "disk"}}, t.disk_keys);
      out.AddGauge("pstrain_ps_table_disk_bytes", "Bytes of a dynamic table's records on disk.", v,
                   t.disk_bytes);
      out.AddGauge("pstrain_ps_table_disk_file_bytes",
                   "Bytes of a dynamic table's disk tier files (RocksDB SST).", v,
                   t.disk_file_bytes);
      out.AddCounter("pstrain_ps_table_disk_hits_total",
                     "Keys RAM lacked that the disk tier held.", v, t.hits);
      out.AddCounter("pstrain_ps_table_disk_misses_total",
                     "Keys RAM lacked that the disk tier did not hold either.", v, t.misses);
      out.AddCounter("pstrain_ps_table_disk_read_bytes_total", "Record bytes read from disk.", v,
                     t.read);
      out.AddCounter("pstrain_ps_table_disk_written_bytes_total", "Record bytes written to disk.",
                     v, t.written);
      out.AddCounter("pstrain_ps_table_moved_total", "Keys moved between tiers.",
                     {{"variable", variable}, {"to", "disk"}}, t.to_disk);
      out.AddCounter("pstrain_ps_table_moved_total", "Keys moved between tiers.",
                     {{"variable", variable}, {"to", "ram"}}, t.to_ram);
    }
    // Gradient staleness per fixed shard (ps/staleness.h), as a Prometheus summary: quantiles,
    // mean, and how many gradients it covers.
    for (const auto& [shard, s] : store_.Staleness()) {
      if (s.count == 0) continue;
      const char* help =
          "Gradients applied to the shard between the read a gradient was computed on and its "
          "own apply.";
      for (const auto& [q, v] : {std::pair<const char*, int64_t>{"0.5", s.p50},
                                 {"0.9", s.p90}, {"0.99", s.p99}, {"1", s.max}}) {
        out.AddGauge("pstrain_ps_gradient_staleness", help, {{"shard", shard}, {"quantile", q}},
                     static_cast<double>(v));
      }
      out.AddGauge("pstrain_ps_gradient_staleness_mean", help, {{"shard", shard}}, s.mean);
      out.AddCounter("pstrain_ps_gradient_staleness_count", "Gradients whose staleness is known.",
                     {{"shard", shard}}, static_cast<double>(s.count));
    }
  });
}

absl::Status PsServiceHandlers::Serve(int method, const std::vector<absl::string_view>& request,
                                      const ReplyAllocator& reply) {
  if (method < 0 || method >= static_cast<int>(methods_.size())) {
    return absl::UnimplementedError(absl::StrCat("PsService has no method number ", method));
  }
  const size_t bytes = WireReader::SizeOf(request);
  if (max_large_ <= 0 || bytes < PsServiceLimits::kLargeRequestBytes) {
    return methods_[method](request, reply);
  }
  RETURN_IF_ERROR(EnterLarge(Service()->method(method)->name(), bytes));
  absl::Status status = methods_[method](request, reply);
  LeaveLarge();
  return status;
}

absl::Status PsServiceHandlers::EnterLarge(absl::string_view method, size_t bytes) {
  absl::MutexLock lock(&large_mu_);
  auto turn = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(large_mu_) {
    return large_in_flight_ < max_large_;
  };
  if (!large_mu_.AwaitWithTimeout(absl::Condition(&turn),
                                  PsServiceLimits::kLargeRequestWait)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        method, ": a request of ", bytes, " bytes waited ",
        absl::FormatDuration(PsServiceLimits::kLargeRequestWait), " behind ", max_large_,
        " large requests in flight (this ps's limit); retry later"));
  }
  ++large_in_flight_;
  return absl::OkStatus();
}

void PsServiceHandlers::LeaveLarge() {
  absl::MutexLock lock(&large_mu_);
  --large_in_flight_;
}

PsServiceHandlers::Method PsServiceHandlers::Bind(absl::string_view name) {
  const std::string n(name);
  if (name == "Health") {
    return Typed<HealthRequest, HealthResponse>(
        n, [this](const HealthRequest&, HealthResponse* response) {
          identity_.Get().ToHealthResponse(response);
          return absl::OkStatus();
        });
  }
  if (name == "CreateShards") {
    return Typed<CreateShardsRequest, CreateShardsResponse>(
        n, [this](const CreateShardsRequest& request, CreateShardsResponse* response) {
          std::vector<VariableShardDef> defs(request.shards().begin(), request.shards().end());
          ASSIGN_OR_RETURN(std::vector<bool> created, store_.CreateShards(defs));
          for (bool c : created) response->add_created(c);
          return absl::OkStatus();
        });
  }
  if (name == "ListShards") {
    return Typed<ListShardsRequest, ListShardsResponse>(
        n, [this](const ListShardsRequest&, ListShardsResponse* response) {
          for (VariableShardDef& def : store_.ListShards()) *response->add_shards() = std::move(def);
          for (DynamicShardStats& stats : store_.DynamicStats()) {
            *response->add_dynamic_stats() = std::move(stats);
          }
          return absl::OkStatus();
        });
  }
  if (name == "Export") {
    return Typed<ExportRequest, ExportResponse>(
        n, [this](const ExportRequest& request, ExportResponse* response) {
          return store_.Export(request, response);
        });
  }
  // The data path: Lookup's and Read's replies are written in protobuf's wire format straight into
  // the reply's memory (VariableStore::LookupSerialized, ReadSerialized), and Update's request is
  // applied from the received pieces (VariableStore::UpdateWire). They run inline on gRPC's
  // callback threads: the work is memory-bound and short, and a hand-off would only add a wake-up.
  if (name == "Lookup") {
    return [this, n](const std::vector<absl::string_view>& bytes, const ReplyAllocator& reply) {
      LookupRequest request;
      RETURN_IF_ERROR(ParseRequest(bytes, n, &request));
      RETURN_IF_ERROR(store_.LookupSerialized(request, reply, reply.ready()));
      if (rows_looked_up_ != nullptr) {
        int64_t rows = 0;
        for (const LookupOp& op : request.ops()) rows += op.ids().size() / sizeof(int64_t);
        rows_looked_up_->Increment(rows);
      }
      return absl::OkStatus();
    };
  }
  if (name == "Read") {
    return [this, n](const std::vector<absl::string_view>& bytes, const ReplyAllocator& reply) {
      ReadRequest request;
      RETURN_IF_ERROR(ParseRequest(bytes, n, &request));
      RETURN_IF_ERROR(store_.ReadSerialized(request, reply, reply.ready()));
      if (rows_read_ != nullptr) {
        int64_t rows = 0;
        for (const ReadOp& op : request.ops()) rows += op.range().row_end() - op.range().row_begin();
        rows_read_->Increment(rows);
      }
      return absl::OkStatus();
    };
  }
  if (name == "Update") {
    // Its reply is zero bytes, complete as soon as the update is certain to apply (over the data
    // plane the answer is on its way while it is applied); or, when the request asks for the
    // rows it updated (return_rows), those rows once it is applied.
    return [this](const std::vector<absl::string_view>& bytes, const ReplyAllocator& reply) {
      const std::function<char*(size_t)> rows = [&reply](size_t n) { return reply(n); };
      if (!reply.completes()) return store_.UpdateWire(bytes, nullptr, rows);
      return store_.UpdateWire(bytes, [&reply] { return reply.Complete(); }, rows);
    };
  }
  // Checkpoint calls run long (disk I/O), on gRPC's callback thread too: the ps has nothing else
  // to do meanwhile (the coordinator pauses training around them). Every database they name must
  // lie under the checkpoint root.
  if (name == "SaveShards") {
    return Typed<SaveShardsRequest, SaveShardsResponse>(
        n, [this](const SaveShardsRequest& request, SaveShardsResponse* response) {
          ASSIGN_OR_RETURN(std::string db_path, root_.Confine(request.db_path()));
          SaveShardsRequest confined = request;
          confined.set_db_path(db_path);
          ScopedTimer timer(save_seconds_);
          ASSIGN_OR_RETURN(*response, store_.SaveShards(confined));
          if (saved_bytes_ != nullptr) saved_bytes_->Increment(response->bytes());
          return absl::OkStatus();
        });
  }
  if (name == "RestoreShards") {
    return Typed<RestoreShardsRequest, RestoreShardsResponse>(
        n, [this](const RestoreShardsRequest& request, RestoreShardsResponse* response) {
          RestoreShardsRequest confined = request;
          for (RestoreShardOp& op : *confined.mutable_ops()) {
            for (CheckpointSource& source : *op.mutable_sources()) {
              ASSIGN_OR_RETURN(std::string db_path, root_.Confine(source.db_path()));
              source.set_db_path(db_path);
            }
          }
          ScopedTimer timer(restore_seconds_);
          ASSIGN_OR_RETURN(*response, store_.RestoreShards(confined));
          if (restored_bytes_ != nullptr) restored_bytes_->Increment(response->bytes());
          return absl::OkStatus();
        });
  }
  if (name == "CommitRestore") {
    return Typed<CommitRestoreRequest, CommitRestoreResponse>(
        n, [this](const CommitRestoreRequest& request, CommitRestoreResponse*) {
          return store_.CommitRestore(request.restore_id(), request.abort());
        });
  }
  return [n](const std::vector<absl::string_view>&, const ReplyAllocator&) {
    return absl::UnimplementedError(absl::StrCat("PsService.", n, " is not served by this ps"));
  };
}

}  // namespace pstrain
