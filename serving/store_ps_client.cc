#include "serving/store_ps_client.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

constexpr absl::string_view kTableShardSuffix = "/part_0";

class StorePsClient final : public PsClient {
 public:
  explicit StorePsClient(const ModelStore* store)
      : store_(store), name_(absl::StrCat("exported model ", store->dir())) {}

  const std::string& name() const override { return name_; }

  void ListShardsAsync(const ListShardsRequest*, ListShardsResponse* response,
                       Done done) override {
    response->Clear();
    for (const ExportedVariable& v : store_->manifest().variables) {
      VariableShardDef* def = response->add_shards();
      def->set_variable(v.name);
      def->set_dtype(v.dtype == "int64" ? DT_INT64 : DT_FLOAT32);
      def->set_shard_index(0);
      def->set_num_shards(1);
      for (int64_t d : v.shape) def->add_full_shape(d);
      if (v.kind == ExportedVariable::Kind::kTable) {
        def->set_name(absl::StrCat(v.name, kTableShardSuffix));
        def->mutable_dynamic()->set_dim(v.shape[0]);
        def->mutable_dynamic()->set_default_value(v.default_value);
        DynamicShardStats* stats = response->add_dynamic_stats();
        stats->set_shard(def->name());
        stats->set_keys(v.count);
      } else {
        def->set_name(v.name);
        def->set_row_offset(0);
        def->set_num_rows(v.shape.empty() ? 1 : v.shape[0]);
      }
    }
    done(absl::OkStatus());
  }

  void LookupAsync(const LookupRequest* request, LookupResponse* response, Done done) override {
    done(Lookup(*request, response));
  }

  void ReadAsync(const ReadRequest* request, ReadResponse* response, Done done) override {
    done(Read(*request, response));
  }

  void HealthAsync(const HealthRequest*, HealthResponse* response, Done done) override {
    response->Clear();
    done(absl::OkStatus());
  }

  void CreateShardsAsync(const CreateShardsRequest*, CreateShardsResponse*, Done done) override {
    done(ReadOnly("CreateShards"));
  }
  void UpdateAsync(const UpdateRequest*, UpdateResponse*, Done done) override {
    done(ReadOnly("Update"));
  }
  void ExportAsync(const ExportRequest*, ExportResponse*, Done done) override {
    done(ReadOnly("Export"));
  }
  void SaveShardsAsync(const SaveShardsRequest*, SaveShardsResponse*, Done done) override {
    done(ReadOnly("SaveShards"));
  }
  void RestoreShardsAsync(const RestoreShardsRequest*, RestoreShardsResponse*,
                          Done done) override {
    done(ReadOnly("RestoreShards"));
  }
  void CommitRestoreAsync(const CommitRestoreRequest*, CommitRestoreResponse*,
                          Done done) override {
    done(ReadOnly("CommitRestore"));
  }

 private:
  absl::Status ReadOnly(absl::string_view method) const {
    return absl::FailedPreconditionError(
        absl::StrCat(method, ": ", name_, " is read-only (serving)"));
  }

  // The variable a shard name stands for. Errors: kNotFound naming the shard.
  absl::StatusOr<int> VariableOf(const std::string& shard) const {
    std::string name = shard;
    if (absl::EndsWith(name, kTableShardSuffix)) {
      const int table = store_->Find(name.substr(0, name.size() - kTableShardSuffix.size()));
      if (table >= 0 &&
          store_->manifest().variables[table].kind == ExportedVariable::Kind::kTable) {
        return table;
      }
    }
    const int v = store_->Find(name);
    if (v < 0 || store_->manifest().variables[v].kind == ExportedVariable::Kind::kTable) {
      return absl::NotFoundError(absl::StrCat(name_, " has no shard ", shard));
    }
    return v;
  }

  absl::Status Lookup(const LookupRequest& request, LookupResponse* response) const {
    response->Clear();
    for (const LookupOp& op : request.ops()) {
      ASSIGN_OR_RETURN(int v, VariableOf(op.shard()));
      if (op.ids().size() % sizeof(int64_t) != 0) {
        return absl::InvalidArgumentError(absl::StrCat("Lookup of ", op.shard(), ": ",
                                                       op.ids().size(),
                                                       " bytes of ids (not whole int64s)"));
      }
      const size_t n = op.ids().size() / sizeof(int64_t);
      std::vector<int64_t> ids(n);
      if (n > 0) std::memcpy(ids.data(), op.ids().data(), op.ids().size());
      std::string* out = response->add_values();
      out->resize(n * store_->manifest().variables[v].row_bytes());
      RETURN_IF_ERROR(store_->Rows(v, ids, out->data()));
    }
    return absl::OkStatus();
  }

  absl::Status Read(const ReadRequest& request, ReadResponse* response) const {
    response->Clear();
    for (const ReadOp& op : request.ops()) {
      ASSIGN_OR_RETURN(int v, VariableOf(op.shard()));
      const ExportedVariable& var = store_->manifest().variables[v];
      const int64_t rows = var.shape.empty() ? 1 : var.shape[0];
      int64_t begin = op.range().row_begin(), end = op.range().row_end();
      if (begin == 0 && end == 0) end = rows;
      if (begin < 0 || end < begin || end > rows) {
        return absl::InvalidArgumentError(absl::StrCat("Read of ", op.shard(), ": rows [", begin,
                                                       ", ", end, ") outside [0, ", rows, ")"));
      }
      std::string* out = response->add_values();
      if (var.kind == ExportedVariable::Kind::kDense) {
        ASSIGN_OR_RETURN(absl::string_view bytes, store_->Dense(v));
        const absl::string_view rows = bytes.substr(begin * var.row_bytes(),
                                                   (end - begin) * var.row_bytes());
        out->assign(rows.data(), rows.size());
        continue;
      }
      std::vector<int64_t> ids(end - begin);
      for (int64_t i = begin; i < end; ++i) ids[i - begin] = i;
      out->resize((end - begin) * var.row_bytes());
      RETURN_IF_ERROR(store_->Rows(v, ids, out->data()));
    }
    return absl::OkStatus();
  }

  const ModelStore* const store_;
  const std::string name_;
};

}  // namespace

std::unique_ptr<PsClient> NewStorePsClient(const ModelStore* store) {
  return std::make_unique<StorePsClient>(store);
}

}  // namespace pstrain
