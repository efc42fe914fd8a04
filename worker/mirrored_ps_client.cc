#include "worker/mirrored_ps_client.h"

#include <atomic>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

bool IsDenseGradient(const UpdateOp& op) {
  return op.kind() == UpdateOp::APPLY_GRADIENT && op.rows_case() != UpdateOp::kIds;
}
bool IsSparseGradient(const UpdateOp& op) {
  return op.kind() == UpdateOp::APPLY_GRADIENT && op.rows_case() == UpdateOp::kIds;
}

// FNV-1a over what must match across workers for the dense all-reduce to line up.
uint64_t Mix(uint64_t h, absl::string_view bytes) {
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

absl::Status CheckFloat(const UpdateOp& op) {
  if (op.dtype() != DT_FLOAT32 || op.values().size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mirrored update: the gradient of shard '", op.shard(), "' is not float32 (dtype ",
        DataType_Name(op.dtype()), ", ", op.values().size(), " bytes)"));
  }
  return absl::OkStatus();
}

// Int64 words carrying bytes: the length, then the bytes zero-padded to a multiple of 8.
std::vector<int64_t> ToWords(const std::string& bytes) {
  std::vector<int64_t> words(1 + (bytes.size() + 7) / 8, 0);
  words[0] = static_cast<int64_t>(bytes.size());
  if (!bytes.empty()) std::memcpy(words.data() + 1, bytes.data(), bytes.size());
  return words;
}

absl::StatusOr<std::string> FromWords(const int64_t* words, int64_t count, int rank) {
  if (count < 1 || words[0] < 0 || (words[0] + 7) / 8 != count - 1) {
    return absl::InternalError(absl::StrCat("mirrored update: rank ", rank,
                                            "'s sparse gradients arrived malformed"));
  }
  return std::string(reinterpret_cast<const char*>(words + 1), static_cast<size_t>(words[0]));
}

}  // namespace

namespace {

// The check that rides in the dense all-reduce (MirrorGradients with gather_first false): a 64-bit
// value as 16 nibbles x, each sent as x and x * x. After the mean, every rank sent the same value
// exactly when each nibble's mean square equals its squared mean (their variance is 0; if two
// ranks differ in a nibble it is at least (n - 1) / n^2, far above float rounding of values <=
// 225, exact as sums up to 65,536 ranks).
constexpr int kCheckFloats = 2 * 16;

void PutCheck(uint64_t value, float* out) {
  for (int i = 0; i < 16; ++i) {
    const float x = static_cast<float>((value >> (4 * i)) & 0xf);
    out[2 * i] = x;
    out[2 * i + 1] = x * x;
  }
}

bool CheckAgrees(const float* meaned, int ranks) {
  const double least = 0.5 * (ranks - 1) / (static_cast<double>(ranks) * ranks);
  for (int i = 0; i < 16; ++i) {
    const double mean = meaned[2 * i], mean_square = meaned[2 * i + 1];
    if (mean_square - mean * mean > least) return false;
  }
  return true;
}

}  // namespace

absl::Status MirrorGradients(CollectiveGroup* group, int64_t bucket_bytes, UpdateRequest* request,
                             bool gather_first) {
  const int n = group->size();
  // What must match across workers for the dense all-reduce to line up: the dense ops' shards,
  // ranges and sizes, whether sparse ops follow, and the step.
  uint64_t signature = 14695981039346656037ull;
  int64_t dense_floats = 0;
  for (const UpdateOp& op : request->ops()) {
    if (!IsDenseGradient(op)) continue;
    RETURN_IF_ERROR(CheckFloat(op));
    signature = Mix(signature, op.shard());
    signature = Mix(signature, op.range().SerializeAsString());
    const int64_t floats = static_cast<int64_t>(op.values().size() / sizeof(float));
    signature = Mix(signature, absl::string_view(reinterpret_cast<const char*>(&floats), 8));
    dense_floats += floats;
  }
  UpdateRequest sparse;
  for (const UpdateOp& op : request->ops()) {
    if (!IsSparseGradient(op)) continue;
    RETURN_IF_ERROR(CheckFloat(op));
    *sparse.add_ops() = op;
  }
  signature = Mix(signature, sparse.ops_size() > 0 ? "sparse" : "dense");
  auto differ = [&](const std::string& who) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mirrored update: ", who, "'s dense gradients (variables, shapes) or step differ from ",
        group->names()[0], "'s: every worker must update the same variables each step, in step "
        "order"));
  };
  // 1. With gather_first: every rank's [signature, step, sparse ops] in one all-gather, checked
  // before the all-reduce (a first step: the ranks' layouts are not known to agree yet).
  std::vector<int64_t> words, counts, offsets(n, 0);
  if (gather_first) {
    std::vector<int64_t> mine = {static_cast<int64_t>(signature), request->step()};
    const std::vector<int64_t> sparse_words = ToWords(sparse.SerializeAsString());
    mine.insert(mine.end(), sparse_words.begin(), sparse_words.end());
    RETURN_IF_ERROR(group->AllGather(absl::MakeConstSpan(mine), &words, &counts));
    for (int r = 1; r < n; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
    for (int r = 0; r < n; ++r) {
      if (counts[r] < 3) {
        return absl::InternalError(absl::StrCat("mirrored update: ", group->names()[r],
                                                "'s gradients arrived malformed"));
      }
      if (words[offsets[r]] != words[0]) return differ(group->names()[r]);
      if (words[offsets[r] + 1] != words[1]) {
        return absl::FailedPreconditionError(absl::StrCat(
            "mirrored update: ", group->names()[r], " sent step ", words[offsets[r] + 1],
            "'s gradients while ", group->names()[0], " sent step ", words[1],
            "'s: every worker must send its steps in step order"));
      }
    }
  }
  // 2. Dense: packed, all-reduced (mean) a bucket at a time, unpacked; without gather_first the
  // check of signature and step rides at the end of the last bucket.
  const int64_t check = gather_first ? 0 : 2 * kCheckFloats;
  if (dense_floats + check > 0) {
    std::vector<float> packed(dense_floats + check);
    int64_t at = 0;
    for (const UpdateOp& op : request->ops()) {
      if (!IsDenseGradient(op)) continue;
      std::memcpy(packed.data() + at, op.values().data(), op.values().size());
      at += op.values().size() / sizeof(float);
    }
    if (check > 0) {
      PutCheck(signature, packed.data() + dense_floats);
      PutCheck(static_cast<uint64_t>(request->step()), packed.data() + dense_floats + kCheckFloats);
    }
    const int64_t total = dense_floats + check;
    const int64_t bucket = std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(sizeof(float)));
    for (int64_t begin = 0; begin < total; begin += bucket) {
      const int64_t n_floats = std::min(bucket, total - begin);
      RETURN_IF_ERROR(group->AllReduce(packed.data() + begin, n_floats, ReduceOp::kMean));
    }
    if (check > 0 && (!CheckAgrees(packed.data() + dense_floats, n) ||
                      !CheckAgrees(packed.data() + dense_floats + kCheckFloats, n))) {
      return differ("a worker");
    }
    at = 0;
    for (UpdateOp& op : *request->mutable_ops()) {
      if (!IsDenseGradient(op)) continue;
      std::memcpy(op.mutable_values()->data(), packed.data() + at, op.values().size());
      at += op.values().size() / sizeof(float);
    }
  }
  if (sparse.ops_size() == 0) return absl::OkStatus();  // so on every rank (the check agreed)
  // 3. Sparse: every worker's ops (gathered now, if not first), merged per shard in rank order.
  if (!gather_first) {
    RETURN_IF_ERROR(group->AllGather(absl::MakeConstSpan(ToWords(sparse.SerializeAsString())),
                                     &words, &counts));
    for (int r = 1; r < n; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  }
  const int64_t skip = gather_first ? 2 : 0;  // [signature, step] before the sparse words
  std::vector<std::string> order;
  std::map<std::string, UpdateOp> merged;
  for (int r = 0; r < n; ++r) {
    ASSIGN_OR_RETURN(std::string bytes,
                     FromWords(words.data() + offsets[r] + skip, counts[r] - skip, r));
    UpdateRequest theirs;
    if (!theirs.ParseFromString(bytes)) {
      return absl::InternalError(
          absl::StrCat("mirrored update: ", group->names()[r], "'s sparse gradients don't parse"));
    }
    for (const UpdateOp& op : theirs.ops()) {
      RETURN_IF_ERROR(CheckFloat(op));
      auto [it, fresh] = merged.try_emplace(op.shard());
      if (fresh) {
        order.push_back(op.shard());
        it->second.set_shard(op.shard());
        it->second.set_kind(UpdateOp::APPLY_GRADIENT);
        it->second.set_dtype(DT_FLOAT32);
        it->second.mutable_ids();
      }
      it->second.mutable_ids()->append(op.ids());
      it->second.mutable_values()->append(op.values());
    }
  }
  const float scale = 1.0f / static_cast<float>(n);
  UpdateRequest out;
  out.set_step(request->step());
  out.set_return_rows(request->return_rows());
  for (const UpdateOp& op : request->ops()) {
    if (!IsSparseGradient(op)) *out.add_ops() = op;
  }
  for (const std::string& shard : order) {
    UpdateOp& op = merged[shard];
    float* v = reinterpret_cast<float*>(op.mutable_values()->data());
    const size_t count = op.values().size() / sizeof(float);
    for (size_t i = 0; i < count; ++i) v[i] *= scale;
    *out.add_ops() = std::move(op);
  }
  *request = std::move(out);
  return absl::OkStatus();
}

namespace {

// A dynamic table's training lookup inserts the keys this replica's share of the batch has: the
// replicas' key sets would drift apart.
absl::Status CheckLookup(const LookupRequest& request) {
  for (const LookupOp& op : request.ops()) {
    if (op.insert()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard '", op.shard(), "' is a dynamic table: synchronous (multi-worker mirrored) "
          "training keeps a replica of every variable on every worker and does not train dynamic "
          "tables; use the parameter-server (or hybrid) strategy"));
    }
  }
  return absl::OkStatus();
}

class MirroredPsClient final : public PsClient {
 public:
  MirroredPsClient(std::unique_ptr<PsClient> replica, MirrorOptions options)
      : replica_(std::move(replica)), options_(std::move(options)) {}

  const std::string& name() const override { return replica_->name(); }
  bool synchronous() const override { return true; }

  void CreateShardsAsync(const CreateShardsRequest* request, CreateShardsResponse* response,
                         Done done) override {
    replica_->CreateShardsAsync(request, response, std::move(done));
  }
  void ListShardsAsync(const ListShardsRequest* request, ListShardsResponse* response,
                       Done done) override {
    replica_->ListShardsAsync(request, response, std::move(done));
  }
  void LookupAsync(const LookupRequest* request, LookupResponse* response, Done done) override {
    absl::Status status = CheckLookup(*request);
    if (!status.ok()) return done(status);
    replica_->LookupAsync(request, response, std::move(done));
  }
  void LookupWireAsync(const LookupRequest* request, LookupWireReply* reply, Done done) override {
    absl::Status status = CheckLookup(*request);
    if (!status.ok()) return done(status);
    replica_->LookupWireAsync(request, reply, std::move(done));
  }
  void ReadAsync(const ReadRequest* request, ReadResponse* response, Done done) override {
    replica_->ReadAsync(request, response, std::move(done));
  }
  void UpdateAsync(const UpdateRequest* request, UpdateResponse* response, Done done) override {
    UpdateWithValuesAsync(request, nullptr, response, std::move(done));
  }
  void UpdateWithValuesAsync(const UpdateRequest* request,
                             const std::vector<absl::string_view>* values,
                             UpdateResponse* response, Done done) override {
    auto owned = std::make_shared<UpdateRequest>(*request);
    if (values != nullptr) {
      for (int i = 0; i < owned->ops_size() && i < static_cast<int>(values->size()); ++i) {
        if (!(*values)[i].empty()) owned->mutable_ops(i)->set_values(std::string((*values)[i]));
      }
    }
    // The sparse ops move to the end when merged: where each op of the request stands after.
    std::vector<bool> moves(request->ops_size());
    for (int i = 0; i < request->ops_size(); ++i) moves[i] = IsSparseGradient(request->ops(i));
    // The first update checks every rank's layout in an all-gather before its all-reduce; the
    // later ones check it (and the step) inside the all-reduce: one collective a step.
    const bool first = !checked_.exchange(true);
    absl::Status status =
        MirrorGradients(options_.group.get(), options_.bucket_bytes, owned.get(), first);
    if (!status.ok()) {
      checked_.store(false);
      // Not this worker's failure, nor a ps's, for the coordinator to retry around: the step
      // itself can't go on (its caller restarts the group from a checkpoint).
      done(absl::FailedPreconditionError(absl::StrCat(
          kSyncUpdateFailed, " (", absl::StatusCodeToString(status.code()), "): ",
          status.message())));
      return;
    }
    if (!request->return_rows()) {
      replica_->UpdateAsync(owned.get(), response,
                            [owned, done = std::move(done)](absl::Status s) { done(s); });
      return;
    }
    // The rows come back per op of the merged request: put them back in the caller's op order
    // (an op merged away gets none).
    auto merged = std::make_shared<UpdateResponse>();
    replica_->UpdateAsync(
        owned.get(), merged.get(),
        [owned, merged, moves = std::move(moves), response, done = std::move(done)](
            absl::Status s) {
          response->Clear();
          int at = 0;
          for (bool moved : moves) {
            const bool has = !moved && at < merged->values_size() && at < merged->versions_size();
            response->add_values(has ? merged->values(at) : std::string());
            response->add_versions(has ? merged->versions(at) : 0);
            if (!moved) ++at;
          }
          done(s);
        });
  }
  void ExportAsync(const ExportRequest* request, ExportResponse* response, Done done) override {
    replica_->ExportAsync(request, response, std::move(done));
  }
  void HealthAsync(const HealthRequest* request, HealthResponse* response, Done done) override {
    replica_->HealthAsync(request, response, std::move(done));
  }
  void SaveShardsAsync(const SaveShardsRequest* request, SaveShardsResponse* response,
                       Done done) override {
    replica_->SaveShardsAsync(request, response, std::move(done));
  }
  void RestoreShardsAsync(const RestoreShardsRequest* request, RestoreShardsResponse* response,
                          Done done) override {
    replica_->RestoreShardsAsync(request, response, std::move(done));
  }
  void CommitRestoreAsync(const CommitRestoreRequest* request, CommitRestoreResponse* response,
                          Done done) override {
    replica_->CommitRestoreAsync(request, response, std::move(done));
  }

 private:
  const std::unique_ptr<PsClient> replica_;
  const MirrorOptions options_;
  std::atomic<bool> checked_{false};  // an update's layout was checked by all-gather
};

}  // namespace

std::unique_ptr<PsClient> NewMirroredPsClient(std::unique_ptr<PsClient> replica,
                                              MirrorOptions options) {
  return std::make_unique<MirroredPsClient>(std::move(replica), std::move(options));
}

}  // namespace pstrain
