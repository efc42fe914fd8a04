#include "ps/dense_cache.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace pstrain {

DenseCache::DenseCache() = default;
DenseCache::~DenseCache() = default;

bool DenseCache::Read(const ShardedVariable& v, char* out) const {
  absl::MutexLock lock(&mu_);
  auto it = copies_.find(v.name());
  if (it == copies_.end()) return false;
  const std::vector<float>& rows = it->second.rows;
  const size_t bytes = rows.size() * sizeof(float);
  if (static_cast<int64_t>(bytes) != v.num_rows() * v.row_bytes()) return false;
  std::memcpy(out, rows.data(), bytes);
  return true;
}

bool DenseCache::Holds(const ShardedVariable& v) const {
  absl::MutexLock lock(&mu_);
  return copies_.count(v.name()) > 0;
}

void DenseCache::Apply(Copy& c, const float* grads, int64_t step, int64_t t) {
  const StepScalars scalars = c.optimizer->Prepare(t, step > 0 ? step - 1 : t - 1);
  float* slot_rows[4];
  for (size_t k = 0; k < c.slots.size(); ++k) slot_rows[k] = c.slots[k].data();
  // The optimizers are elementwise: the whole variable is one long row.
  c.optimizer->ApplyRow(c.rows.data(), slot_rows, reinterpret_cast<const UnalignedFloat*>(grads),
                        static_cast<int64_t>(c.rows.size()), scalars);
}

DenseCache::Ticket DenseCache::Push(const ShardedVariable& v, absl::string_view grads,
                                    int64_t step, bool ahead) {
  absl::MutexLock lock(&mu_);
  Ticket ticket;
  ticket.seq = ++next_seq_;
  ticket.read_versions.assign(v.shards().size(), 0);
  auto it = copies_.find(v.name());
  if (it == copies_.end()) return ticket;
  Copy& c = it->second;
  const int64_t pending = static_cast<int64_t>(c.ahead.size());
  // The copy's rows are the replied version plus this worker's pushes on their way, which the ps
  // applies first: that is the version the gradient was computed on.
  for (size_t i = 0; i < c.versions.size() && i < ticket.read_versions.size(); ++i) {
    ticket.read_versions[i] = c.versions[i] > 0 ? c.versions[i] + pending : 0;
  }
  const bool can = ahead && c.appliable && grads.size() == c.rows.size() * sizeof(float);
  if (!can) return ticket;
  Pushed p{ticket.seq, step, std::vector<float>(c.rows.size())};
  std::memcpy(p.grads.data(), grads.data(), grads.size());
  Apply(c, p.grads.data(), step, c.versions.empty() ? 1 : c.versions[0] + pending + 1);
  c.ahead.push_back(std::move(p));
  ticket.applied = true;
  return ticket;
}

void DenseCache::Returned(const ShardedVariable& v, uint64_t seq,
                          const std::vector<ShardReply>& replies) {
  absl::MutexLock lock(&mu_);
  auto drop = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { copies_.erase(v.name()); };
  const std::vector<ShardLocation>& shards = v.shards();
  if (replies.size() != shards.size() || v.dtype() != DT_FLOAT32) return drop();
  auto [it, fresh] = copies_.try_emplace(v.name());
  Copy& c = it->second;
  if (!fresh && seq < c.replied) return;  // an older state than the copy's
  if (c.optimizer == nullptr && v.optimizer() != nullptr &&
      v.optimizer()->staleness_scaling() == OptimizerDef::STALENESS_NONE) {
    absl::StatusOr<std::unique_ptr<Optimizer>> made = Optimizer::Create(*v.optimizer());
    if (made.ok()) c.optimizer = *std::move(made);
  }
  const int num_slots = c.optimizer != nullptr ? c.optimizer->num_slots() : 0;
  const size_t floats = static_cast<size_t>(v.num_rows() * v.width());
  c.rows.resize(floats);
  std::vector<std::vector<float>> slots(num_slots, std::vector<float>(floats));
  // Whether the copy can take gradients as the ps does: its optimizer known, its slots came.
  bool with_slots = c.optimizer != nullptr;
  c.versions.assign(shards.size(), 0);
  for (size_t i = 0; i < shards.size(); ++i) {
    const ShardReply& r = replies[i];
    const size_t at = static_cast<size_t>(shards[i].row_offset * v.width());
    const size_t n = static_cast<size_t>(shards[i].num_rows * v.width());
    if (!r.ok || r.version <= 0 || r.rows.size() != n * sizeof(float)) return drop();
    std::memcpy(c.rows.data() + at, r.rows.data(), r.rows.size());
    c.versions[i] = r.version;
    if (r.slots.size() != num_slots * n * sizeof(float)) with_slots = false;
    for (int k = 0; with_slots && k < num_slots; ++k) {
      std::memcpy(slots[k].data() + at, r.slots.data() + k * n * sizeof(float),
                  n * sizeof(float));
    }
  }
  c.slots = with_slots ? std::move(slots) : std::vector<std::vector<float>>();
  c.appliable = with_slots;
  c.replied = seq;
  // This worker's pushes sent after this one are not in the reply: applied again on top.
  while (!c.ahead.empty() && c.ahead.front().seq <= seq) c.ahead.pop_front();
  if (!c.appliable) {
    if (!c.ahead.empty()) return drop();  // can't be applied again
    return;
  }
  int64_t t = c.versions.empty() ? 0 : c.versions[0];
  for (const Pushed& p : c.ahead) Apply(c, p.grads.data(), p.step, ++t);
}

void DenseCache::Drop(const ShardedVariable& v) {
  absl::MutexLock lock(&mu_);
  copies_.erase(v.name());
}

void DenseCache::Clear() {
  absl::MutexLock lock(&mu_);
  copies_.clear();
}

}  // namespace pstrain
