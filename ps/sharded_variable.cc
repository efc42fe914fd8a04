#include "ps/sharded_variable.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/id_index.h"
#include "common/status_macros.h"
#include "ps/dense_cache.h"

namespace pstrain {
namespace {

int64_t DTypeBytes(DataType dtype) { return dtype == DT_INT64 ? 8 : 4; }

absl::Status CheckIds(const ShardedVariable& v, absl::Span<const int64_t> ids) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= v.num_rows()) {
      return absl::InvalidArgumentError(absl::StrCat("variable \"", v.name(), "\": id ", ids[i],
                                                     " (position ", i, ") is out of range [0, ",
                                                     v.num_rows(), ")"));
    }
  }
  return absl::OkStatus();
}

// Sends every ps's request at once (CallAll) and waits for all.
template <typename PerPsMap, typename Send>
absl::Status SendAll(PerPsMap& per_ps, Send send) {
  std::vector<typename PerPsMap::mapped_type*> entries;
  for (auto& [client, p] : per_ps) entries.push_back(&p);
  return CallAll(static_cast<int>(entries.size()),
                 [&](int i, PsClient::Done done) { send(*entries[i], std::move(done)); });
}

std::string IdsBytes(const std::vector<int64_t>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int64_t));
}

}  // namespace

absl::StatusOr<ShardedVariable> ShardedVariable::Create(std::string name,
                                                        std::vector<int64_t> shape,
                                                        DataType dtype,
                                                        std::vector<ShardLocation> shards,
                                                        std::vector<PsClient*> ps,
                                                        const OptimizerDef* optimizer) {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("variable \"", name, "\": ", why));
  };
  if (dtype != DT_FLOAT32 && dtype != DT_INT64) return invalid("dtype must be float32 or int64");
  ShardedVariable v;
  v.num_rows_ = shape.empty() ? 1 : shape[0];
  v.width_ = 1;
  for (size_t i = 1; i < shape.size(); ++i) v.width_ *= shape[i];
  if (shards.empty()) return invalid("no shards");
  int64_t next = 0;
  for (const ShardLocation& s : shards) {
    if (s.row_offset != next || s.num_rows < 0) {
      return invalid(absl::StrCat("shard \"", s.name, "\" starts at row ", s.row_offset,
                                  ", expected ", next, " (shards must tile the rows in order)"));
    }
    if (s.ps_task < 0 || s.ps_task >= static_cast<int>(ps.size()) || ps[s.ps_task] == nullptr) {
      return invalid(absl::StrCat("shard \"", s.name, "\" is on ps ", s.ps_task, " but only ",
                                  ps.size(), " ps task(s) are known"));
    }
    next += s.num_rows;
    v.shard_ends_.push_back(next);
  }
  if (next != v.num_rows_) {
    return invalid(absl::StrCat("shards cover ", next, " rows of ", v.num_rows_));
  }
  v.name_ = std::move(name);
  v.shape_ = std::move(shape);
  v.dtype_ = dtype;
  v.row_bytes_ = v.width_ * DTypeBytes(dtype);
  v.shards_ = std::move(shards);
  v.ps_ = std::move(ps);
  if (optimizer != nullptr) v.optimizer_ = *optimizer;
  return v;
}

int ShardedVariable::ShardOf(int64_t id) const {
  return static_cast<int>(std::upper_bound(shard_ends_.begin(), shard_ends_.end(), id) -
                          shard_ends_.begin());
}

absl::Status ShardedVariable::Lookup(absl::Span<const int64_t> ids, float* out) const {
  if (dtype_ != DT_FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat("variable \"", name_, "\" is not float32"));
  }
  LookupBatch batch;
  RETURN_IF_ERROR(batch.Add(*this, ids, reinterpret_cast<char*>(out)));
  return batch.Run();
}

absl::Status ShardedVariable::ApplyGradients(absl::Span<const int64_t> ids,
                                             const float* grads) const {
  UpdateBatch batch;
  RETURN_IF_ERROR(batch.AddSparse(*this, UpdateOp::APPLY_GRADIENT, ids,
                                  reinterpret_cast<const char*>(grads)));
  return batch.Run();
}

absl::Status ShardedVariable::AssignAdd(absl::Span<const int64_t> ids, const float* values) const {
  UpdateBatch batch;
  RETURN_IF_ERROR(batch.AddSparse(*this, UpdateOp::ASSIGN_ADD, ids,
                                  reinterpret_cast<const char*>(values)));
  return batch.Run();
}

absl::Status ShardedVariable::Assign(absl::Span<const int64_t> ids, const float* values) const {
  UpdateBatch batch;
  RETURN_IF_ERROR(
      batch.AddSparse(*this, UpdateOp::ASSIGN, ids, reinterpret_cast<const char*>(values)));
  return batch.Run();
}

absl::StatusOr<std::string> ShardedVariable::ReadAll() const {
  // One request per ps for its shards, except that a shard of more than 2 pieces' bytes is read as
  // row ranges of its client's read_piece_bytes() (over the data plane, 1 MiB), each its own
  // request: they are served side by side (a ps serves each connection on a thread of its own, a
  // client's calls alternate between connections) and each is copied into its place as it
  // arrives, on the thread that received it. One 4 MiB read at a time went from ~1.9 to 3.2-3.9
  // GB/s over the data plane (ps_bench).
  struct Request {
    PsClient* client = nullptr;
    ReadRequest request;
    ReadResponse response;
    std::vector<std::pair<int64_t, int64_t>> places;  // per op: byte offset in the result, bytes
  };
  std::vector<std::unique_ptr<Request>> requests;
  std::map<PsClient*, Request*> small;  // the per-ps request of the shards read whole
  for (const ShardLocation& s : shards_) {
    PsClient* client = ps_[s.ps_task];
    const int64_t piece_bytes = client->read_piece_bytes();
    if (piece_bytes <= 0 || s.num_rows * row_bytes_ <= 2 * piece_bytes) {
      Request*& r = small[client];
      if (r == nullptr) {
        requests.push_back(std::make_unique<Request>());
        r = requests.back().get();
        r->client = client;
      }
      r->request.add_ops()->set_shard(s.name);  // empty range: the whole shard
      r->places.emplace_back(s.row_offset * row_bytes_, s.num_rows * row_bytes_);
      continue;
    }
    const int64_t piece_rows = std::max<int64_t>(1, piece_bytes / row_bytes_);
    for (int64_t begin = s.row_offset; begin < s.row_offset + s.num_rows; begin += piece_rows) {
      const int64_t end = std::min(begin + piece_rows, s.row_offset + s.num_rows);
      auto r = std::make_unique<Request>();
      r->client = client;
      ReadOp* op = r->request.add_ops();
      op->set_shard(s.name);
      op->mutable_range()->set_row_begin(begin);
      op->mutable_range()->set_row_end(end);
      r->places.emplace_back(begin * row_bytes_, (end - begin) * row_bytes_);
      requests.push_back(std::move(r));
    }
  }
  // Checks a request's reply: as many values as ops, each of its place's size.
  auto check = [this](const Request& r) -> absl::Status {
    if (r.response.values_size() != r.request.ops_size()) {
      return absl::InternalError(absl::StrCat(r.client->name(), ": ", r.response.values_size(),
                                              " shards read, asked for ", r.request.ops_size()));
    }
    for (int i = 0; i < r.response.values_size(); ++i) {
      if (static_cast<int64_t>(r.response.values(i).size()) != r.places[i].second) {
        return absl::InternalError(absl::StrCat(
            r.client->name(), ": shard \"", r.request.ops(i).shard(), "\" returned ",
            r.response.values(i).size(), " bytes for variable \"", name_, "\", expected ",
            r.places[i].second));
      }
    }
    return absl::OkStatus();
  };
  // A single read of a single shard: its bytes are the variable's.
  if (requests.size() == 1 && requests[0]->request.ops_size() == 1) {
    Request& r = *requests[0];
    RETURN_IF_ERROR(r.client->Read(r.request, &r.response));
    RETURN_IF_ERROR(check(r));
    return std::move(*r.response.mutable_values(0));
  }
  std::string all(static_cast<size_t>(num_rows_ * row_bytes_), '\0');
  char* const out = all.data();
  RETURN_IF_ERROR(CallAll(static_cast<int>(requests.size()), [&](int i, PsClient::Done done) {
    Request* r = requests[i].get();
    r->client->ReadAsync(&r->request, &r->response,
                         [r, out, &check, done = std::move(done)](absl::Status status) {
                           if (status.ok()) status = check(*r);
                           if (status.ok()) {
                             for (int k = 0; k < r->response.values_size(); ++k) {
                               std::memcpy(out + r->places[k].first, r->response.values(k).data(),
                                           r->places[k].second);
                             }
                             r->response.Clear();
                           }
                           done(std::move(status));
                         });
  }));
  return all;
}

absl::Status ShardedVariable::AssignAll(absl::string_view values) const {
  UpdateBatch batch;
  RETURN_IF_ERROR(batch.AddDense(*this, UpdateOp::ASSIGN, values));
  return batch.Run();
}

absl::Status ShardedVariable::ApplyDenseGradients(absl::string_view grads) const {
  UpdateBatch batch;
  RETURN_IF_ERROR(batch.AddDense(*this, UpdateOp::APPLY_GRADIENT, grads));
  return batch.Run();
}

template <typename ShardOf, typename NameOf, typename PsOf>
void LookupBatch::AddRouted(absl::Span<const int64_t> ids, char* out, int64_t row_bytes,
                            int num_shards, ShardOf shard_of, NameOf name_of, PsOf ps_of,
                            bool insert) {
  // Dedupe: each distinct id is fetched once, into the caller position where it first appears.
  const std::vector<RepeatFinder::Repeat>& repeats = ThreadRepeatFinder().Find(
      reinterpret_cast<const char*>(ids.data()), static_cast<int64_t>(ids.size()));
  auto repeat = repeats.begin();  // the next repeat, in position order
  Fixup fixup{out, row_bytes, {}};
  // Per shard: the distinct ids and their first positions.
  std::vector<std::vector<int64_t>> shard_ids(num_shards);
  std::vector<std::vector<int64_t>> shard_pos(num_shards);
  if (num_shards == 1) {
    shard_ids[0].reserve(ids.size());
    shard_pos[0].reserve(ids.size());
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (repeat != repeats.end() && repeat->later == static_cast<int64_t>(i)) {
      fixup.copies.emplace_back(repeat->first, repeat->later);
      ++repeat;
      continue;
    }
    const int s = num_shards == 1 ? 0 : shard_of(ids[i]);
    shard_ids[s].push_back(ids[i]);
    shard_pos[s].push_back(static_cast<int64_t>(i));
  }
  for (int s = 0; s < num_shards; ++s) {
    if (shard_ids[s].empty()) continue;
    PsClient* client = ps_of(s);
    PerPs& p = per_ps_[client];
    p.client = client;
    LookupOp* op = p.request.add_ops();
    op->set_shard(name_of(s));
    op->set_ids(IdsBytes(shard_ids[s]));
    if (insert) op->set_insert(true);
    p.targets.push_back(Target{row_bytes, std::move(shard_pos[s]), out});
  }
  if (!fixup.copies.empty()) fixups_.push_back(std::move(fixup));
}

absl::Status LookupBatch::Add(const ShardedVariable& v, absl::Span<const int64_t> ids, char* out) {
  RETURN_IF_ERROR(CheckIds(v, ids));
  AddRouted(
      ids, out, v.row_bytes(), static_cast<int>(v.shards().size()),
      [&v](int64_t id) { return v.ShardOf(id); },
      [&v](int s) -> const std::string& { return v.shards()[s].name; },
      [&v](int s) { return v.ps(v.shards()[s].ps_task); }, /*insert=*/false);
  return absl::OkStatus();
}

absl::Status LookupBatch::Add(const DynamicTable& t, absl::Span<const int64_t> keys, char* out,
                              LookupMode mode) {
  AddRouted(
      keys, out, t.row_bytes(), t.num_shards(), [&t](int64_t key) { return t.ShardOf(key); },
      [&t](int s) -> const std::string& { return t.shard_name(s); },
      [&t](int s) { return t.ps_of(s); }, mode == LookupMode::kTrain);
  return absl::OkStatus();
}

absl::Status LookupBatch::Run() {
  if (step_ != 0) {
    for (auto& [client, p] : per_ps_) p.request.set_step(step_);
  }
  RETURN_IF_ERROR(SendAll(per_ps_, [](PerPs& p, PsClient::Done done) {
    p.client->LookupWireAsync(&p.request, &p.reply, std::move(done));
  }));
  for (auto& [client, p] : per_ps_) {
    absl::StatusOr<std::vector<std::vector<absl::string_view>>> values = p.reply.Values();
    if (!values.ok()) {
      return absl::InternalError(absl::StrCat(client->name(), ": ", values.status().message()));
    }
    if (values->size() != p.targets.size()) {
      return absl::InternalError(absl::StrCat(client->name(), ": ", values->size(),
                                              " results for ", p.request.ops_size(), " lookups"));
    }
    for (size_t i = 0; i < p.targets.size(); ++i) {
      const Target& t = p.targets[i];
      const int64_t row_bytes = t.row_bytes;
      const std::vector<absl::string_view>& pieces = (*values)[i];
      int64_t size = 0;
      for (absl::string_view piece : pieces) size += static_cast<int64_t>(piece.size());
      if (size != static_cast<int64_t>(t.first_pos.size()) * row_bytes) {
        return absl::InternalError(absl::StrCat(client->name(), ": lookup of \"",
                                                p.request.ops(i).shard(), "\" returned ", size,
                                                " bytes"));
      }
      // Row j goes to its caller position; a row may straddle two pieces.
      size_t piece = 0, at = 0;
      for (size_t j = 0; j < t.first_pos.size(); ++j) {
        char* dst = t.out + t.first_pos[j] * row_bytes;
        int64_t left = row_bytes;
        while (left > 0) {
          while (at == pieces[piece].size()) {
            ++piece;
            at = 0;
          }
          const int64_t take =
              std::min<int64_t>(left, static_cast<int64_t>(pieces[piece].size() - at));
          std::memcpy(dst, pieces[piece].data() + at, take);
          dst += take;
          at += take;
          left -= take;
        }
      }
    }
  }
  for (const Fixup& f : fixups_) {
    for (const auto& [from, to] : f.copies) {
      std::memcpy(f.out + to * f.row_bytes, f.out + from * f.row_bytes, f.row_bytes);
    }
  }
  per_ps_.clear();
  fixups_.clear();
  return absl::OkStatus();
}

UpdateBatch::PerPs& UpdateBatch::For(PsClient* client) {
  PerPs& p = per_ps_[client];
  p.client = client;
  return p;
}

UpdateBatch::PerPs& UpdateBatch::ForReturning(PsClient* client) {
  PerPs& p = returning_[client];
  p.client = client;
  return p;
}

template <typename ShardOf, typename NameOf, typename PsOf>
void UpdateBatch::AddRouted(UpdateOp::Kind kind, absl::Span<const int64_t> ids,
                            const char* values, int64_t row_bytes, int64_t width,
                            bool sum_repeats, DataType dtype, int num_shards, ShardOf shard_of,
                            NameOf name_of, PsOf ps_of) {
  // Per shard: distinct ids and their rows (summed for additive kinds; last one for assign),
  // reserved up front (a first pass counts the ids per shard) so that nothing is copied twice.
  std::vector<int> shard_of_pos(ids.size(), 0);
  std::vector<int64_t> per_shard(num_shards, 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (num_shards > 1) shard_of_pos[i] = shard_of(ids[i]);
    ++per_shard[shard_of_pos[i]];
  }
  std::vector<std::vector<int64_t>> shard_ids(num_shards);
  std::vector<std::string> shard_values(num_shards);
  for (int s = 0; s < num_shards; ++s) {
    shard_ids[s].reserve(per_shard[s]);
    shard_values[s].reserve(per_shard[s] * row_bytes);
  }
  const std::vector<RepeatFinder::Repeat>& repeats = ThreadRepeatFinder().Find(
      reinterpret_cast<const char*>(ids.data()), static_cast<int64_t>(ids.size()));
  auto repeat = repeats.begin();  // the next repeat, in position order
  std::vector<int64_t> index_in_shard(ids.size());  // for first positions: where the row went
  for (size_t i = 0; i < ids.size(); ++i) {
    const char* row = kind == UpdateOp::ERASE ? nullptr : values + i * row_bytes;
    const int s = shard_of_pos[i];
    if (repeat != repeats.end() && repeat->later == static_cast<int64_t>(i)) {
      const int64_t first = repeat->first;
      ++repeat;
      if (kind == UpdateOp::ERASE) continue;  // erased once is enough
      char* dst = shard_values[shard_of_pos[first]].data() + index_in_shard[first] * row_bytes;
      if (sum_repeats) {
        float* d = reinterpret_cast<float*>(dst);
        for (int64_t k = 0; k < width; ++k) {
          float x;
          std::memcpy(&x, row + 4 * k, 4);
          d[k] += x;
        }
        continue;
      }
      if (kind == UpdateOp::ASSIGN) {
        std::memcpy(dst, row, row_bytes);
        continue;
      }
      // int64 assign-add: send the repeat as is; the ps adds each.
    } else {
      index_in_shard[i] = static_cast<int64_t>(shard_ids[s].size());
    }
    shard_ids[s].push_back(ids[i]);
    if (kind != UpdateOp::ERASE) shard_values[s].append(row, row_bytes);
  }
  for (int s = 0; s < num_shards; ++s) {
    if (shard_ids[s].empty()) continue;
    PerPs& p = For(ps_of(s));
    p.values.emplace_back();  // the op's own values
    UpdateOp* op = p.request.add_ops();
    op->set_shard(name_of(s));
    op->set_kind(kind);
    op->set_ids(IdsBytes(shard_ids[s]));
    if (kind != UpdateOp::ERASE) {
      op->set_values(std::move(shard_values[s]));
      op->set_dtype(dtype);
    }
  }
}

absl::Status UpdateBatch::AddSparse(const ShardedVariable& v, UpdateOp::Kind kind,
                                    absl::Span<const int64_t> ids, const char* values) {
  RETURN_IF_ERROR(CheckIds(v, ids));
  const bool sum_repeats =
      v.dtype() == DT_FLOAT32 && (kind == UpdateOp::ASSIGN_ADD || kind == UpdateOp::APPLY_GRADIENT);
  AddRouted(
      kind, ids, values, v.row_bytes(), v.width(), sum_repeats, v.dtype(),
      static_cast<int>(v.shards().size()), [&v](int64_t id) { return v.ShardOf(id); },
      [&v](int s) -> const std::string& { return v.shards()[s].name; },
      [&v](int s) { return v.ps(v.shards()[s].ps_task); });
  return absl::OkStatus();
}

absl::Status UpdateBatch::AddSparse(const DynamicTable& t, UpdateOp::Kind kind,
                                    absl::Span<const int64_t> keys, const char* values) {
  if (kind != UpdateOp::ERASE && values == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("dynamic table \"", t.name(), "\": ", UpdateOp::Kind_Name(kind),
                     " needs values"));
  }
  const bool sum_repeats = kind == UpdateOp::ASSIGN_ADD || kind == UpdateOp::APPLY_GRADIENT;
  AddRouted(
      kind, keys, values, t.row_bytes(), t.dim(), sum_repeats, DT_FLOAT32, t.num_shards(),
      [&t](int64_t key) { return t.ShardOf(key); },
      [&t](int s) -> const std::string& { return t.shard_name(s); },
      [&t](int s) { return t.ps_of(s); });
  return absl::OkStatus();
}

absl::Status UpdateBatch::AddDense(const ShardedVariable& v, UpdateOp::Kind kind,
                                   absl::string_view values, DenseCache* cache) {
  if (static_cast<int64_t>(values.size()) != v.num_rows() * v.row_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("variable \"", v.name(), "\": ", values.size(),
                                                   " bytes of values for ", v.num_rows(),
                                                   " rows of ", v.row_bytes(), " bytes"));
  }
  if (kind != UpdateOp::APPLY_GRADIENT) cache = nullptr;
  // A synchronous replica applies what the collectives make of the gradient, not the gradient:
  // its rows are waited for. Asynchronous ps tasks that take the pushes in order may be ahead of.
  bool synchronous = false, ordered = true;
  for (const ShardLocation& s : v.shards()) {
    synchronous = synchronous || v.ps(s.ps_task)->synchronous();
    ordered = ordered && v.ps(s.ps_task)->ordered();
  }
  DenseCache::Ticket ticket;
  if (cache != nullptr) {
    ticket = cache->Push(v, values, step_, /*ahead=*/ordered && !synchronous);
    returned_.push_back(Returned{cache, v, ticket.seq, ticket.applied, synchronous, {}});
  }
  for (size_t i = 0; i < v.shards().size(); ++i) {
    const ShardLocation& s = v.shards()[i];
    PsClient* client = v.ps(s.ps_task);
    // A push that brings rows back is applied whole before the ps replies. One whose rows are
    // waited for travels in a request of its own, so that the other ops (a step's table rows,
    // say) don't hold up its reply; one applied to the cache ahead isn't waited for, and goes
    // with them. A synchronous replica takes one request per step (one all-reduce).
    const bool apart = cache != nullptr && !ticket.applied && !client->synchronous();
    PerPs& p = apart ? ForReturning(client) : For(client);
    // Sent from the caller's memory, not copied into the request.
    p.values.push_back(values.substr(s.row_offset * v.row_bytes(), s.num_rows * v.row_bytes()));
    UpdateOp* op = p.request.add_ops();
    op->set_shard(s.name);
    op->set_kind(kind);
    op->mutable_range()->set_row_begin(s.row_offset);
    op->mutable_range()->set_row_end(s.row_offset + s.num_rows);
    op->set_dtype(v.dtype());
    if (cache != nullptr) {
      op->set_read_version(ticket.read_versions[i]);
      p.request.set_return_rows(true);
      if (!client->synchronous()) p.request.set_return_slots(true);
      returned_.back().ops.push_back({&p, p.request.ops_size() - 1});
    }
  }
  return absl::OkStatus();
}

absl::Status UpdateBatch::Run(const std::function<void()>& rows_back) {
  if (step_ != 0) {
    for (auto& [client, p] : per_ps_) p.request.set_step(step_);
    for (auto& [client, p] : returning_) p.request.set_step(step_);
  }
  std::vector<PerPs*> returning, asynchronous, synchronous;
  for (auto& [client, p] : returning_) returning.push_back(&p);
  for (auto& [client, p] : per_ps_) {
    (client->synchronous() ? synchronous : asynchronous).push_back(&p);
  }
  bool released = false;
  auto release = [&] {
    if (!released && rows_back) rows_back();
    released = true;
  };
  // Starts every request of `requests` and waits for them; `sent` (if given) runs once all are
  // on their way. Returns the first error.
  auto send_all = [](const std::vector<PerPs*>& requests, const std::function<void()>& sent) {
    return CallAll(
        static_cast<int>(requests.size()),
        [&requests](int i, PsClient::Done done) {
          PerPs& p = *requests[i];
          p.client->UpdateWithValuesAsync(&p.request, &p.values, &p.response, std::move(done));
        },
        sent);
  };
  auto fill = [&](bool applied, const absl::Status& status) {
    for (const Returned& r : returned_) {
      if (r.applied == applied && !r.cache_client_synchronous) FillCache(r, status);
    }
  };
  // 1. The pushes whose rows the caller waits for, alone: their replies give the turn back,
  // unless pushes applied ahead are still to be sent (they must leave first).
  const bool ahead = std::any_of(returned_.begin(), returned_.end(),
                                 [](const Returned& r) { return r.applied; });
  absl::Status status = send_all(returning, nullptr);
  if (!returning.empty()) {
    fill(/*applied=*/false, status);
    if (!ahead) release();
  }
  // 2. The asynchronous ps tasks' requests, with the pushes already applied to their caches:
  // those reach the ps tasks in the order they are sent, so the turn goes back once they are.
  absl::Status rest = send_all(asynchronous, ahead ? std::function<void()>(release) : nullptr);
  fill(/*applied=*/true, rest);
  if (status.ok()) status = rest;
  // 3. A synchronous replica's update (a collective) once the others landed.
  if (!synchronous.empty()) {
    if (status.ok()) {
      status = send_all(synchronous, nullptr);
    } else {
      // This worker's step failed: its replica's collective must not run (the other workers'
      // collectives fail on this worker's abort, or match its error).
      status = absl::Status(status.code(), absl::StrCat(status.message(),
                                                        " (the synchronous update was not sent)"));
    }
    for (const Returned& r : returned_) {
      if (r.cache_client_synchronous) FillCache(r, status);
    }
  }
  release();
  returned_.clear();
  per_ps_.clear();
  returning_.clear();
  return status;
}

// What came back for a cache: the variable's copy, if its push landed and every shard of it
// returned its rows; else it is dropped.
void UpdateBatch::FillCache(const Returned& r, const absl::Status& status) {
  if (!status.ok()) {
    r.cache->Drop(r.variable);
    return;
  }
  std::vector<DenseCache::ShardReply> replies(r.ops.size());
  for (size_t i = 0; i < r.ops.size(); ++i) {
    const UpdateResponse& response = r.ops[i].request->response;
    const int op = r.ops[i].op;
    if (op >= response.values_size() || op >= response.versions_size()) continue;
    replies[i].ok = true;
    replies[i].rows = response.values(op);
    replies[i].version = response.versions(op);
    if (op < response.slots_size()) replies[i].slots = response.slots(op);
  }
  r.cache->Returned(r.variable, r.seq, replies);
}

}  // namespace pstrain
