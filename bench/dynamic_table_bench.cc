// dynamic_table_bench: a dynamic table (rows keyed by int64, ps/dynamic_shard.h) beside a fixed
// table of the same shape, in the same run, one JSON object per line.
//
//   bazel run -c opt //bench:dynamic_table_bench                  # defaults, about eight minutes
//   bazel run -c opt //bench:dynamic_table_bench -- --keys=262144 --seconds=0.5 --tier_keys=200000
//                                                                 # quick
//   bazel run -c opt //bench:dynamic_table_bench -- --tier_only   # the disk tier's figures (~6 min)
//   bazel run -c opt //bench:dynamic_table_bench -- --formats_only  # stored formats (~1 min)
//
// Both tables hold 4M keys (rows) of 16 float32 with Adagrad; requests carry 16,384 uniform random
// keys (the fixed table's ids are rows 0..N-1, the dynamic table's keys MixKey of those, so both
// see the same access pattern). Figures (targets from the issue, as ratios to the fixed table's
// figure measured just before):
//   <transport>.fixed_pull / .dynamic_find (training lookups, every key present; target 0.7) /
//   .dynamic_find_eval (evaluation lookups), .fixed_push / .dynamic_apply (Adagrad; target 0.7),
//   .dynamic_insert (every key new; target 0.4 of the fixed pull), each with 1 and 4 requests in
//   flight: raw PsClient calls with prebuilt requests on one in-process ps, over the ps's data
//   plane (data_plane.*, the default) or gRPC (--transport=grpc: grpc.*).
//   export: the whole table through Export (rows/s, MB/s); checkpoint: SaveShards and a restore of
//   the dynamic table, and a save of the fixed one (MB/s); memory: bytes held per key against its
//   row and slots (16 + 16 floats = 128 bytes; the issue's bound is 1.5x).
//   own_work: the ps's work without the transport: the store (as a ps runs it, with its pool:
//   finds, Adagrad, and inserts into memory the table freed), the dynamic shard on one thread, and
//   an absl::flat_hash_map<int64, record> doing the same on one thread.
//   tier: the dynamic shard on one thread with a disk tier (ps/disk_tier.h), read with O_DIRECT
//   (a table far beyond the machine's memory: the page cache doesn't hide the disk), RAM holding
//   100%, 50%, 10% and 1% of --tier_keys keys; training lookups (finds) and Adagrad applies of
//   --tier_keys_per_request keys drawn uniformly or Zipf-distributed (s = 1.05, hot keys spread
//   over the key space), in steady state (after a warm-up of 16 requests), beside the same
//   shard all in RAM and the disk's own 4 KiB random reads at queue depth 1 and 32.
//   formats: the dynamic shard on one thread with rows stored in float32, float16, bfloat16 and int8
//   (ps/row_format.h; slots in float32 for float16 rows, bfloat16 for the others), --keys keys:
//   bytes held per key, finds and Adagrad applies of --keys_per_request uniform keys, each beside
//   float32's figure in the same run.
//   limit: random 64-byte row gather, loopback TCP (bench/machine_limits.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/bench_loops.h"
#include "bench/machine_limits.h"
#include "common/grpc_util.h"
#include "nlohmann/json.hpp"
#include "partitioners/key_routing.h"
#include "proto/ps_service.pb.h"
#include "ps/dynamic_shard.h"
#include "ps/grpc_ps_client.h"
#include "ps/optimizers.h"
#include "ps/ps_server.h"
#include "ps/row_format.h"
#include "ps/variable_store.h"

ABSL_FLAG(double, seconds, 2.0, "Timed seconds per measurement (after a warm-up of a quarter).");
ABSL_FLAG(int64_t, keys, 4194304, "Keys of each table (16 float32 each).");
ABSL_FLAG(int64_t, keys_per_request, 16384, "Uniform random keys per request.");
ABSL_FLAG(std::vector<std::string>, in_flight, std::vector<std::string>({"1", "4"}),
          "Requests kept in flight for the figures over the ps (data_plane.* or grpc.*).");
ABSL_FLAG(std::string, dir, "/tmp/dynamic_table_bench", "Scratch directory for checkpoints.");
ABSL_FLAG(std::string, transport, "data_plane",
          "How the requests travel: data_plane (the ps's TCP data plane, the default; figures "
          "named data_plane.*) or grpc (unary gRPC calls; figures named grpc.*).");
ABSL_FLAG(int64_t, tier_keys, 1 << 20,
          "Keys of the disk tier's table (16 float32 with Adagrad: 152 bytes a record).");
ABSL_FLAG(int64_t, tier_keys_per_request, 4096, "Keys per request in the disk tier's figures.");
ABSL_FLAG(bool, tier_only, false, "Only the disk tier's figures (and their limits).");
ABSL_FLAG(bool, formats_only, false, "Only the stored formats' figures (and the gather limit).");
ABSL_FLAG(bool, own_work_only, false,
          "Only the limits and the ps's own work without gRPC (for profiling).");

namespace pstrain {
namespace {

using json = nlohmann::json;

constexpr int64_t kDim = 16;
constexpr int64_t kRowBytes = kDim * 4;
constexpr int kMaxInFlight = 8;
constexpr double kFindTarget = 0.7, kApplyTarget = 0.7, kInsertTarget = 0.4;

json Base(const std::string& name, double value, const std::string& unit) {
  return json{{"name", name}, {"value", Round(value)}, {"unit", unit}, {"cpus", AvailableCpus()}};
}

std::string Bytes(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

VariableShardDef FixedDef(int64_t rows) {
  VariableShardDef def;
  def.set_name("emb");
  def.set_variable("emb");
  def.add_full_shape(rows);
  def.add_full_shape(kDim);
  def.set_dtype(DT_FLOAT32);
  def.set_num_rows(rows);
  def.set_num_shards(1);
  def.mutable_initializer()->set_kind(InitializerDef::UNIFORM);
  def.mutable_initializer()->set_minval(-0.05);
  def.mutable_initializer()->set_maxval(0.05);
  def.mutable_initializer()->set_seed(7);
  def.mutable_optimizer()->set_kind(OptimizerDef::ADAGRAD);
  return def;
}

VariableShardDef DynamicDef(const std::string& name) {
  VariableShardDef def;
  def.set_name(name);
  def.set_variable(name);
  def.add_full_shape(kDim);
  def.set_dtype(DT_FLOAT32);
  def.set_num_shards(1);
  def.mutable_initializer()->set_kind(InitializerDef::UNIFORM);
  def.mutable_initializer()->set_minval(-0.05);
  def.mutable_initializer()->set_maxval(0.05);
  def.mutable_initializer()->set_seed(7);
  def.mutable_optimizer()->set_kind(OptimizerDef::ADAGRAD);
  def.mutable_dynamic()->set_dim(kDim);
  return def;
}

// The workload, built once: id sets (enough that one pass draws about as many ids as the table has
// rows, so rows come back only after the table has been touched) and the requests that carry them:
// fixed (ids) and dynamic (keys = MixKey(id)), lookups and Adagrad pushes; and requests that
// insert fresh keys (ids N, N+1, ...: every key new).
struct Workload {
  int64_t keys = 0;
  int64_t per_request = 0;
  std::vector<std::vector<int64_t>> id_sets;
  std::vector<LookupRequest> fixed_lookups, dynamic_finds, dynamic_evals;
  std::vector<UpdateRequest> fixed_pushes, dynamic_pushes;
  int sets() const { return static_cast<int>(id_sets.size()); }

  static Workload Build(int64_t keys, int64_t per_request) {
    Workload w;
    w.keys = keys;
    w.per_request = per_request;
    std::mt19937_64 rng(20261123);
    std::uniform_int_distribution<int64_t> id(0, keys - 1);
    std::vector<float> grads(per_request * kDim);
    std::uniform_real_distribution<float> g(-0.01f, 0.01f);
    for (float& x : grads) x = g(rng);
    const std::string grad_bytes = Bytes(grads.data(), grads.size() * 4);
    const int64_t sets = std::max<int64_t>(kMaxInFlight, (keys + per_request - 1) / per_request);
    for (int64_t s = 0; s < sets; ++s) {
      std::vector<int64_t> ids(per_request), dyn(per_request);
      for (int64_t i = 0; i < per_request; ++i) {
        ids[i] = id(rng);
        dyn[i] = static_cast<int64_t>(MixKey(ids[i]));
      }
      LookupOp* l = w.fixed_lookups.emplace_back().add_ops();
      l->set_shard("emb");
      l->set_ids(Bytes(ids.data(), ids.size() * 8));
      LookupOp* f = w.dynamic_finds.emplace_back().add_ops();
      f->set_shard("dyn");
      f->set_ids(Bytes(dyn.data(), dyn.size() * 8));
      f->set_insert(true);
      w.dynamic_finds.back().set_step(1);
      LookupOp* e = w.dynamic_evals.emplace_back().add_ops();
      *e = *f;
      e->set_insert(false);
      for (auto [requests, shard, bytes] : {std::tuple{&w.fixed_pushes, "emb", &l->ids()},
                                            std::tuple{&w.dynamic_pushes, "dyn", &f->ids()}}) {
        UpdateOp* u = requests->emplace_back().add_ops();
        u->set_shard(shard);
        u->set_kind(UpdateOp::APPLY_GRADIENT);
        u->set_ids(*bytes);
        u->set_values(grad_bytes);
        u->set_dtype(DT_FLOAT32);
      }
      w.dynamic_pushes.back().set_step(1);
      w.id_sets.push_back(std::move(ids));
    }
    return w;
  }
};

// Training lookups of keys MixKey(first), ..., MixKey(first + count - 1) into `shard`, as requests
// of `per_request` keys: every key new to a fresh table.
std::vector<LookupRequest> InsertRequests(const std::string& shard, int64_t first, int64_t count,
                                          int64_t per_request) {
  std::vector<LookupRequest> out;
  for (int64_t begin = first; begin < first + count; begin += per_request) {
    const int64_t n = std::min(per_request, first + count - begin);
    std::vector<int64_t> keys(n);
    for (int64_t i = 0; i < n; ++i) keys[i] = static_cast<int64_t>(MixKey(begin + i));
    LookupOp* op = out.emplace_back().add_ops();
    op->set_shard(shard);
    op->set_ids(Bytes(keys.data(), keys.size() * 8));
    op->set_insert(true);
    out.back().set_step(1);
  }
  return out;
}

// Sends every request once with `in_flight` at a time; returns the seconds it took.
absl::StatusOr<double> RunAll(PsClient* client, const std::vector<LookupRequest>& requests,
                              int in_flight) {
  struct State {
    absl::Mutex mu;
    size_t next = 0;
    int active = 0;
    absl::Status status;
  } state;
  std::vector<LookupResponse> responses(in_flight);
  absl::Notification done;
  std::function<void(int)> issue = [&](int slot) {
    size_t i = 0;
    bool send = false, last = false;
    {
      absl::MutexLock lock(&state.mu);
      if (state.next < requests.size() && state.status.ok()) {
        i = state.next++;
        send = true;
      } else {
        last = --state.active == 0;
      }
    }
    if (!send) {
      // Notified only once `state.mu` is released: the waiter returns and destroys `state` at
      // once (notifying under the lock unlocked a destroyed mutex: an abort seen with the data
      // plane's faster replies).
      if (last) done.Notify();
      return;
    }
    client->LookupAsync(&requests[i], &responses[slot], [&, slot](absl::Status s) {
      if (!s.ok()) {
        absl::MutexLock lock(&state.mu);
        if (state.status.ok()) state.status = s;
      }
      issue(slot);
    });
  };
  const absl::Time start = absl::Now();
  state.active = in_flight;
  for (int slot = 0; slot < in_flight; ++slot) issue(slot);
  done.WaitForNotification();
  if (!state.status.ok()) return state.status;
  return absl::ToDoubleSeconds(absl::Now() - start);
}

json RowsLine(const std::string& name, const RunResult& r, int64_t rows_per_call, int in_flight,
              const std::string& op) {
  const double rows = r.per_sec() * rows_per_call;
  json j = Base(name, rows / 1e6, "M rows/s");
  j["in_flight"] = in_flight;
  j["op"] = op;
  j["us_per_request"] = Round(r.us_per_call(), 1);
  j["requests"] = r.calls;
  j["process_cpu_cores"] = Round(r.cpu_cores, 2);
  return j;
}

void Vs(json* j, double fixed, double target, const std::string& of) {
  (*j)["fixed_table"] = Round(fixed);
  (*j)["ratio_to_fixed"] = Round((*j)["value"].get<double>() / fixed);
  (*j)["target_ratio"] = target;
  (*j)["meets_target"] = (*j)["value"].get<double>() >= target * fixed;
  (*j)["ratio_of"] = of;
}

// The same record a dynamic table keeps, in an absl::flat_hash_map: the peer data structure.
struct MapRecord {
  float row[kDim];
  float acc[kDim];
  uint32_t count;
  uint32_t step;
};

void MeasureOwnWork(const Timing& timing, const Workload& w, const json& gather_limit) {
  // The store as a ps runs it (its pool), both tables filled with every key.
  VariableStore store;
  if (absl::Status s = store.CreateShards({FixedDef(w.keys), DynamicDef("dyn")}).status();
      !s.ok()) {
    Die(s, "local store");
  }
  for (const LookupRequest& r : InsertRequests("dyn", 0, w.keys, 65536)) {
    LookupResponse response;
    if (absl::Status s = store.Lookup(r, &response); !s.ok()) Die(s, "local fill");
  }
  const double rows = static_cast<double>(w.per_request);
  auto line = [&](const std::string& name, const RunResult& r, const std::string& detail) {
    json j = Base(name, r.per_sec() * rows / 1e6, "M rows/s");
    j["detail"] = detail;
    j["us_per_request"] = Round(r.us_per_call(), 1);
    j["process_cpu_cores"] = Round(r.cpu_cores, 2);
    if (!gather_limit.is_null()) j["limit"] = gather_limit;
    return j;
  };
  // A line of ours with the peer's figure beside it, measured in the same run.
  auto emit_with_peer = [&](json j, const RunResult& ours, const RunResult& peer,
                            const std::string& peer_name) {
    j["peer"] = {
        {"name", peer_name}, {"value", Round(peer.per_sec() * rows / 1e6)}, {"unit", "M rows/s"}};
    j["ratio_to_peer"] = Round(ours.per_sec() / peer.per_sec());
    Emit(j);
  };
  LookupResponse response;
  int next = 0;
  auto lookup = [&](const std::vector<LookupRequest>& requests) {
    return RunSerial(timing, [&] {
      response.Clear();
      return store.Lookup(requests[next++ % w.sets()], &response);
    });
  };
  RunResult fixed_lookup = lookup(w.fixed_lookups);
  Emit(line("own_work.store.fixed_lookup", fixed_lookup, "VariableStore::Lookup, fixed table"));
  RunResult dyn_find = lookup(w.dynamic_finds);
  json j = line("own_work.store.dynamic_find", dyn_find,
                "VariableStore::Lookup, training lookup of keys all present");
  j["ratio_to_fixed"] = Round(dyn_find.per_sec() / fixed_lookup.per_sec());
  Emit(j);
  auto update = [&](const std::vector<UpdateRequest>& requests) {
    return RunSerial(timing, [&] { return store.Update(requests[next++ % w.sets()]); });
  };
  RunResult fixed_push = update(w.fixed_pushes);
  Emit(line("own_work.store.fixed_adagrad", fixed_push, "VariableStore::Update, Adagrad"));
  RunResult dyn_push = update(w.dynamic_pushes);
  j = line("own_work.store.dynamic_adagrad", dyn_push, "VariableStore::Update, Adagrad");
  j["ratio_to_fixed"] = Round(dyn_push.per_sec() / fixed_push.per_sec());
  Emit(j);

  // Inserts of keys all new into memory a table freed (no first touch): a table of its own filled
  // with as many keys as the others (untimed), then rounds of erasing them and storing as many
  // others (only the stores timed, a request at a time) until the figure's time is spent (at least
  // three rounds); the median round.
  {
    const int64_t n = w.keys;
    if (absl::Status s = store.CreateShards({DynamicDef("rec")}).status(); !s.ok()) {
      Die(s, "local store");
    }
    auto fill = [&](int64_t first) {
      const absl::Time start = absl::Now();
      for (const LookupRequest& r : InsertRequests("rec", first, n, w.per_request)) {
        LookupResponse response;
        if (absl::Status s = store.Lookup(r, &response); !s.ok()) Die(s, "local insert");
      }
      return absl::ToDoubleSeconds(absl::Now() - start);
    };
    auto erase = [&](int64_t first) {
      UpdateRequest request;
      for (const LookupRequest& r : InsertRequests("rec", first, n, w.per_request)) {
        UpdateOp* op = request.add_ops();
        op->set_shard("rec");
        op->set_kind(UpdateOp::ERASE);
        op->set_ids(r.ops(0).ids());
      }
      if (absl::Status s = store.Update(request); !s.ok()) Die(s, "local erase");
    };
    int64_t first = w.keys * 3;
    fill(first);
    std::vector<double> rates;
    double spent = 0;
    while (spent < absl::ToDoubleSeconds(timing.duration) || rates.size() < 3) {
      erase(first);
      first += n;
      const double secs = fill(first);
      spent += secs;
      rates.push_back(n / secs);
    }
    std::sort(rates.begin(), rates.end());
    const double median = rates[rates.size() / 2];
    json j = Base("own_work.store.dynamic_insert_recycled", median / 1e6, "M rows/s");
    j["detail"] =
        "VariableStore::Lookup, training lookups of keys all new, into memory the "
        "table freed (erased keys), one request at a time; the median of the rounds";
    j["keys_per_round"] = n;
    j["rounds"] = rates.size();
    j["range"] = {Round(rates.front() / 1e6), Round(rates.back() / 1e6)};
    j["ratio_to_fixed"] = Round(median / fixed_lookup.per_sec() / rows);
    Emit(j);
  }

  // One thread, like for like: the dynamic shard without a pool, and a flat_hash_map.
  std::shared_ptr<DynamicShard> shard = store.FindDynamic("dyn");
  std::vector<float> out(w.per_request * kDim);
  DynamicOpContext ctx;
  ctx.step = 1;
  RunResult shard_find = RunSerial(timing, [&] {
    return shard->Lookup(w.dynamic_finds[next++ % w.sets()].ops(0).ids(), /*insert=*/true, ctx,
                         reinterpret_cast<char*>(out.data()), nullptr);
  });
  absl::flat_hash_map<int64_t, MapRecord> map;
  map.reserve(static_cast<size_t>(w.keys));
  for (int64_t i = 0; i < w.keys; ++i) {
    MapRecord r{};
    for (int64_t k = 0; k < kDim; ++k) r.acc[k] = 0.1f;
    map.emplace(static_cast<int64_t>(MixKey(i)), r);
  }
  RunResult map_find = RunSerial(timing, [&] {
    const std::string& ids = w.dynamic_finds[next++ % w.sets()].ops(0).ids();
    const int64_t n = static_cast<int64_t>(ids.size() / 8);
    for (int64_t i = 0; i < n; ++i) {
      int64_t key;
      std::memcpy(&key, ids.data() + 8 * i, 8);
      auto it = map.find(key);
      if (it == map.end()) return absl::InternalError("map: a key is missing");
      ++it->second.count;
      it->second.step = 1;
      std::memcpy(out.data() + i * kDim, it->second.row, kRowBytes);
    }
    return absl::OkStatus();
  });
  emit_with_peer(line("own_work.one_thread.dynamic_shard_find", shard_find,
                      "DynamicShard::Lookup (training, keys all present), no pool"),
                 shard_find, map_find,
                 "absl::flat_hash_map<int64, record>: find, count the sighting, copy the row");

  OptimizerDef adagrad_def;
  adagrad_def.set_kind(OptimizerDef::ADAGRAD);
  std::unique_ptr<Optimizer> adagrad = *Optimizer::Create(adagrad_def);
  std::vector<UpdateOpView> views;
  RunResult shard_apply = RunSerial(timing, [&] {
    views = ViewsOf(w.dynamic_pushes[next++ % w.sets()]);
    return shard->Update(views[0], ctx, nullptr);
  });
  int64_t applies = 0;
  RunResult map_apply = RunSerial(timing, [&] {
    const UpdateRequest& u = w.dynamic_pushes[next++ % w.sets()];
    const std::string& ids = u.ops(0).ids();
    const float* grads = reinterpret_cast<const float*>(u.ops(0).values().data());
    const StepScalars scalars = adagrad->Prepare(++applies, applies - 1);
    const int64_t n = static_cast<int64_t>(ids.size() / 8);
    for (int64_t i = 0; i < n; ++i) {
      int64_t key;
      std::memcpy(&key, ids.data() + 8 * i, 8);
      auto it = map.find(key);
      if (it == map.end()) continue;
      float* slots[1] = {it->second.acc};
      adagrad->ApplyRow(it->second.row, slots,
                        reinterpret_cast<const UnalignedFloat*>(grads + i * kDim), kDim, scalars);
      it->second.step = 1;
    }
    return absl::OkStatus();
  });
  emit_with_peer(
      line("own_work.one_thread.dynamic_shard_adagrad", shard_apply,
           "DynamicShard::Update (APPLY_GRADIENT, Adagrad; sums repeated keys first), no pool"),
      shard_apply, map_apply,
      "absl::flat_hash_map<int64, record>: find, Adagrad on the row (repeats not summed)");
  json mem =
      Base("own_work.flat_hash_map_bytes_per_key",
           static_cast<double>(map.capacity() * (sizeof(std::pair<int64_t, MapRecord>) + 1)) /
               static_cast<double>(map.size()),
           "bytes");
  mem["detail"] = "the peer's slots (key + record) and control bytes per key held";
  Emit(mem);
}

// ---- Stored formats.

void MeasureFormats(const Timing& timing, const Workload& w, const json& gather_limit) {
  struct Format {
    RowFormat rows, slots;
  };
  const Format formats[] = {{ROW_FLOAT32, ROW_FLOAT32},
                            {ROW_FLOAT16, ROW_FLOAT32},
                            {ROW_BFLOAT16, ROW_BFLOAT16},
                            {ROW_INT8, ROW_BFLOAT16}};
  const double rows = static_cast<double>(w.per_request);
  double base_find = 0, base_apply = 0, base_bytes = 0;
  for (const Format& f : formats) {
    VariableShardDef def = DynamicDef("dyn");
    def.mutable_dynamic()->set_row_format(f.rows);
    def.mutable_dynamic()->set_slot_format(f.slots);
    absl::StatusOr<std::unique_ptr<DynamicShard>> made = DynamicShard::Create(def, nullptr);
    if (!made.ok()) Die(made.status(), "formats: shard");
    DynamicShard& shard = **made;
    DynamicOpContext ctx;
    ctx.step = 1;
    std::vector<float> out(static_cast<size_t>(std::max<int64_t>(w.per_request, 65536) * kDim));
    for (const LookupRequest& r : InsertRequests("dyn", 0, w.keys, 65536)) {
      if (absl::Status s = shard.Lookup(r.ops(0).ids(), /*insert=*/true, ctx,
                                        reinterpret_cast<char*>(out.data()), nullptr);
          !s.ok()) {
        Die(s, "formats: fill");
      }
    }
    const double bytes = static_cast<double>(shard.BytesHeld()) / static_cast<double>(shard.Size());
    int next = 0;
    RunResult find = RunSerial(timing, [&] {
      return shard.Lookup(w.dynamic_finds[next++ % w.sets()].ops(0).ids(), /*insert=*/true, ctx,
                          reinterpret_cast<char*>(out.data()), nullptr);
    });
    std::vector<UpdateOpView> views;
    RunResult apply = RunSerial(timing, [&] {
      views = ViewsOf(w.dynamic_pushes[next++ % w.sets()]);
      return shard.Update(views[0], ctx, nullptr);
    });
    const std::string name = RowFormatName(f.rows);
    const double find_rate = find.per_sec() * rows / 1e6;
    const double apply_rate = apply.per_sec() * rows / 1e6;
    if (f.rows == ROW_FLOAT32) {
      base_find = find_rate;
      base_apply = apply_rate;
      base_bytes = bytes;
    }
    json j = Base("formats." + name + ".bytes_per_key", bytes, "bytes");
    j["detail"] = absl::StrCat("rows ", name, ", Adagrad's slot ", RowFormatName(f.slots), ", ",
                               w.keys, " keys of ", kDim, ": records, index and free memory");
    j["record_bytes"] = shard.record_bytes();
    j["ratio_to_float32"] = Round(bytes / base_bytes);
    Emit(j);
    j = Base("formats." + name + ".find", find_rate, "M rows/s");
    j["detail"] = "DynamicShard::Lookup (training, keys all present), one thread, rows as float32";
    j["ratio_to_float32"] = Round(find_rate / base_find);
    j["limit"] = gather_limit;
    Emit(j);
    j = Base("formats." + name + ".adagrad", apply_rate, "M rows/s");
    j["detail"] = "DynamicShard::Update (APPLY_GRADIENT, Adagrad in float32, stochastic rounding), "
                  "one thread";
    j["ratio_to_float32"] = Round(apply_rate / base_apply);
    Emit(j);
  }
}

// ---- The disk tier.

// Keys of `requests` requests of `per_request` keys each, from `n` keys: uniform, or Zipf with
// exponent `s` over ranks mapped to keys by a fixed permutation.
std::vector<std::vector<int64_t>> TierRequests(int64_t n, int64_t per_request, int requests,
                                               double zipf_s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> key_of_rank(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) key_of_rank[i] = i;
  std::shuffle(key_of_rank.begin(), key_of_rank.end(), rng);
  std::vector<double> cdf;
  if (zipf_s > 0) {
    cdf.resize(static_cast<size_t>(n));
    double sum = 0;
    for (int64_t r = 0; r < n; ++r)
      cdf[r] = (sum += 1.0 / std::pow(static_cast<double>(r + 1), zipf_s));
    for (double& c : cdf) c /= sum;
  }
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(requests));
  for (std::vector<int64_t>& request : out) {
    request.resize(static_cast<size_t>(per_request));
    for (int64_t& key : request) {
      const int64_t rank =
          zipf_s > 0 ? std::min<int64_t>(
                           n - 1, std::lower_bound(cdf.begin(), cdf.end(), unit(rng)) - cdf.begin())
                     : static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
      key = key_of_rank[rank] * 2654435761 + 1;
    }
  }
  return out;
}

void MeasureTier(const Timing& timing, const std::string& dir) {
  const int64_t n = absl::GetFlag(FLAGS_tier_keys);
  const int64_t per_request = absl::GetFlag(FLAGS_tier_keys_per_request);
  const int64_t record_bytes = DynamicShard::kHeaderBytes + 2 * kDim * 4;
  LimitTiming limit_timing;
  limit_timing.warmup = timing.warmup;
  limit_timing.duration = timing.duration;
  double disk_qd[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const int qd = i == 0 ? 1 : 32;
    absl::StatusOr<double> reads = MeasureDiskRandomReadsPerSec(
        limit_timing, dir, std::max<int64_t>(int64_t{1} << 30, n * record_bytes), qd);
    if (!reads.ok()) Die(reads.status(), "disk limit");
    disk_qd[i] = *reads;
    json line = Base(absl::StrCat("limit.disk_random_4k_reads_qd", qd), *reads, "reads/s");
    line["shape"] = absl::StrCat("4 KiB random preads with O_DIRECT over a file of ",
                                 std::max<int64_t>(int64_t{1} << 30, n * record_bytes) >> 20,
                                 " MiB in ", dir, ", ", qd, " threads");
    Emit(line);
  }
  const int kRequests = 64;
  struct Dist {
    std::string name;
    std::vector<std::vector<int64_t>> requests;
  };
  std::vector<Dist> dists;
  dists.push_back({"uniform", TierRequests(n, per_request, kRequests, 0, 7)});
  dists.push_back({"zipf1.05", TierRequests(n, per_request, kRequests, 1.05, 7)});
  std::vector<float> grads(static_cast<size_t>(per_request * kDim), 0.01f);
  const std::string grad_bytes(reinterpret_cast<const char*>(grads.data()), grads.size() * 4);
  std::map<std::string, double> all_in_ram;  // "find.uniform" -> keys/s
  struct Case {
    std::string name;
    double ram_fraction;  // 0: no tier
    bool direct;
  };
  const std::vector<Case> cases = {{"all_in_ram", 0, true}, {"ram100", 1.0, true},
                                   {"ram50", 0.5, true},    {"ram10", 0.1, true},
                                   {"ram1", 0.01, true},    {"ram1_page_cache", 0.01, false}};
  for (const Case& c : cases) {
    VariableShardDef def = DynamicDef("tier");
    def.set_name("tier");
    def.set_variable("tier");
    def.set_num_shards(1);
    def.set_shard_index(0);
    if (c.ram_fraction > 0) {
      def.mutable_dynamic()->set_disk_tier(true);
      def.mutable_dynamic()->set_max_rows(
          std::max<int64_t>(1, static_cast<int64_t>(n * c.ram_fraction)));
    }
    const std::string tier_dir = dir + "/tier";
    std::shared_ptr<DiskStore> store;
    if (c.ram_fraction > 0) {
      DiskStoreOptions options;  // the ps's defaults: 8 MiB of buffers
      options.dir = tier_dir;
      options.direct_reads = c.direct;
      absl::StatusOr<std::shared_ptr<DiskStore>> opened = DiskStore::Open(options, nullptr);
      if (!opened.ok()) Die(opened.status(), "disk store");
      store = *opened;
    }
    absl::StatusOr<std::unique_ptr<DynamicShard>> made = DynamicShard::Create(def, nullptr, store);
    if (!made.ok()) Die(made.status(), "tier shard");
    DynamicShard& shard = **made;
    // Every key, in batches (the coldest end up on disk).
    int64_t step = 1;
    {
      std::vector<int64_t> batch;
      std::vector<char> out;
      for (int64_t first = 0; first < n; first += 65536) {
        batch.clear();
        for (int64_t k = first; k < std::min(n, first + 65536); ++k)
          batch.push_back(k * 2654435761 + 1);
        out.resize(batch.size() * kRowBytes);
        DynamicOpContext ctx;
        ctx.step = step++;
        if (absl::Status st =
                shard.Lookup(Bytes(batch.data(), batch.size() * 8), true, ctx, out.data(), nullptr);
            !st.ok()) {
          Die(st, "tier fill");
        }
      }
    }
    for (const Dist& d : dists) {
      std::vector<std::string> request_bytes;
      for (const std::vector<int64_t>& r : d.requests)
        request_bytes.push_back(Bytes(r.data(), r.size() * 8));
      std::vector<char> out(static_cast<size_t>(per_request * kRowBytes));
      size_t next = 0;
      auto find = [&] {
        DynamicOpContext ctx;
        ctx.step = step++;
        return shard.Lookup(request_bytes[next++ % request_bytes.size()], true, ctx, out.data(),
                            nullptr);
      };
      auto apply = [&] {
        UpdateOpView op;
        op.shard_name = "tier";
        op.kind = UpdateOp::APPLY_GRADIENT;
        op.dtype = DT_FLOAT32;
        op.sparse = true;
        op.ids = request_bytes[next++ % request_bytes.size()];
        op.values.push_back(grad_bytes);
        op.values_bytes = static_cast<int64_t>(grad_bytes.size());
        DynamicOpContext ctx;
        ctx.step = step++;
        return shard.Update(op, ctx, nullptr);
      };
      // Steady state first: a quarter of the set's requests, untimed (and no warm-up inside the
      // timed runs, so that the tier's counters cover exactly the timed requests).
      for (int i = 0; i < kRequests / 4; ++i) {
        if (absl::Status st = find(); !st.ok()) Die(st, "tier warm-up");
      }
      for (const char* what : {"find", "apply"}) {
        const DynamicShardStats before = shard.Stats();
        Timing timed_only = timing;
        timed_only.warmup = absl::ZeroDuration();
        const RunResult r =
            RunSerial(timed_only, std::string(what) == "find" ? std::function<absl::Status()>(find)
                                                              : std::function<absl::Status()>(apply));
        if (!r.status.ok()) Die(r.status, absl::StrCat("tier ", what));
        const DynamicShardStats after = shard.Stats();
        const double keys_per_sec = r.per_sec() * per_request;
        const std::string key = absl::StrCat(what, ".", d.name);
        json line = Base(absl::StrCat("tier.", c.name, ".", key), keys_per_sec / 1e6, "M keys/s");
        line["us_per_request"] = Round(r.us_per_call(), 1);
        line["cpu_cores"] = Round(r.cpu_cores, 2);
        if (c.ram_fraction == 0) {
          all_in_ram[key] = keys_per_sec;
        } else {
          line["vs_all_in_ram"] = Round(keys_per_sec / all_in_ram[key], 3);
          const double looked = static_cast<double>(r.calls) * per_request;
          const double hits = static_cast<double>(after.disk_hits() - before.disk_hits());
          line["keys_from_disk"] = Round(hits / std::max(1.0, looked), 4);
          line["disk_reads_per_sec_qd1_limit"] = Round(disk_qd[0], 0);
          line["disk_reads_per_sec_qd32_limit"] = Round(disk_qd[1], 0);
          // Keys read from disk per second, against the device's own random reads.
          line["disk_keys_vs_qd1_limit"] = Round(hits / r.seconds / disk_qd[0], 3);
          line["moved_to_disk"] = after.moved_to_disk() - before.moved_to_disk();
        }
        line["detail"] = absl::StrCat(
            per_request, " keys a request of ", n, " (", d.name, "), RAM holding ",
            c.ram_fraction == 0 ? std::string("every key, no tier")
                                : absl::StrCat(c.ram_fraction * 100, "%"),
            c.ram_fraction > 0 ? (c.direct ? ", O_DIRECT reads" : ", reads through the page cache")
                               : "",
            "; one thread, no transport");
        Emit(line);
      }
    }
  }
}

int Main() {
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int64_t keys = absl::GetFlag(FLAGS_keys);
  const int64_t per_request = absl::GetFlag(FLAGS_keys_per_request);
  if (seconds <= 0 || keys <= 0 || per_request <= 0) {
    std::cerr << "dynamic_table_bench: --seconds, --keys and --keys_per_request must be > 0\n";
    return 2;
  }
  const std::string transport = absl::GetFlag(FLAGS_transport);
  if (transport != "data_plane" && transport != "grpc") {
    std::cerr << "dynamic_table_bench: --transport must be data_plane or grpc, got \"" << transport
              << "\"\n";
    return 2;
  }
  std::vector<int> in_flight;
  for (const std::string& s : absl::GetFlag(FLAGS_in_flight)) {
    int n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1 || n > kMaxInFlight) {
      std::cerr << "dynamic_table_bench: --in_flight values must be in [1, " << kMaxInFlight
                << "]\n";
      return 2;
    }
    in_flight.push_back(n);
  }
  TuneMallocForLargeMessages();
  Timing timing;
  timing.duration = absl::Seconds(seconds);
  timing.warmup = std::min(absl::Milliseconds(500), timing.duration / 4);
  const std::string dir = absl::GetFlag(FLAGS_dir);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  if (absl::GetFlag(FLAGS_tier_only)) {
    MeasureTier(timing, dir);
    std::filesystem::remove_all(dir);
    return 0;
  }
  // Gathers of 64-byte rows from a table of the benchmark's keys x 64 bytes (its fixed table's
  // size): on one thread for the own-work figures, on as many as the machine runs for the served
  // ones. Each line cites the one of its shape.
  LimitTiming lt{timing.warmup, timing.duration};
  auto gather_limit = [&](int threads) {
    GatherOptions g;
    g.table_bytes = keys * kRowBytes;
    g.threads = threads;
    const double mrows = MeasureRandomGatherRowsPerSec(lt, g) / 1e6;
    json j = Base(GatherLimitName(g), mrows, "M rows/s");
    j["detail"] = absl::StrCat("memcpy of uniformly random 64-byte rows from a table of --keys x "
                               "64 bytes, on ", threads, " thread(s) at once");
    Emit(j);
    return json{{"name", j["name"]}, {"value", j["value"]}, {"unit", "M rows/s"}};
  };
  const json gather = gather_limit(1);
  if (absl::GetFlag(FLAGS_formats_only)) {
    MeasureFormats(timing, Workload::Build(keys, per_request), gather);
    return 0;
  }

  // Limits.
  const json gather_served = gather_limit(AvailableCpus());
  absl::StatusOr<double> tcp = MeasureLoopbackTcpGBps(lt, int64_t{1} << 20, 2);
  if (!tcp.ok()) Die(tcp.status(), "loopback TCP");
  Emit(Base(LoopbackLimitName(2), *tcp, "GB/s"));
  const double first_touch = MeasureFirstTouchGBps();
  json j = Base("limit.first_touch_GBps", first_touch, "GB/s");
  j["detail"] =
      "a fresh 1 GiB anonymous mapping (huge pages asked for), one byte written per "
      "4 KiB page: what growing into new memory costs before anything is stored in it "
      "(in a VM the host maps and zeroes every page too)";
  Emit(j);

  const Workload w = Workload::Build(keys, per_request);
  MeasureOwnWork(timing, w, gather);
  if (absl::GetFlag(FLAGS_own_work_only)) return 0;

  // One ps (over its data plane, or gRPC with --transport=grpc) with the fixed table and the
  // dynamic table; the dynamic table filled (every key new: the first insert figure), then a
  // second table filled with `in_flight` 4.
  PsServerOptions server_options;
  server_options.listen_address = "localhost:0";
  absl::StatusOr<std::unique_ptr<PsServer>> server = PsServer::Start(server_options);
  if (!server.ok()) Die(server.status(), "starting the ps");
  GrpcPsClientOptions client_options;
  client_options.data_plane = transport == "data_plane";
  std::unique_ptr<PsClient> client = NewGrpcPsClient(0, (*server)->address(), client_options);
  const std::string net = transport + ".";  // the figures' prefix
  CreateShardsRequest create;
  *create.add_shards() = FixedDef(keys);
  *create.add_shards() = DynamicDef("dyn");
  for (int n : in_flight) *create.add_shards() = DynamicDef(absl::StrCat("ins", n));
  CreateShardsResponse created;
  if (absl::Status s = client->CreateShards(create, &created); !s.ok()) Die(s, "CreateShards");

  // The fixed pull first (the reference for the finds and inserts).
  std::vector<double> fixed_pull(kMaxInFlight + 1), fixed_push(kMaxInFlight + 1);
  auto lookups = [&](const std::vector<LookupRequest>& requests, int n) {
    std::vector<LookupResponse> responses(n);
    SlotCursor cursor(n, w.sets());
    RunResult r = InFlightLoop::Run(timing, n, [&](int slot, PsClient::Done done) {
      client->LookupAsync(&requests[cursor.Next(slot)], &responses[slot], std::move(done));
    });
    if (!r.status.ok()) Die(r.status, "lookups");
    return r;
  };
  auto pushes = [&](const std::vector<UpdateRequest>& requests, int n) {
    std::vector<UpdateResponse> responses(n);
    SlotCursor cursor(n, w.sets());
    RunResult r = InFlightLoop::Run(timing, n, [&](int slot, PsClient::Done done) {
      client->UpdateAsync(&requests[cursor.Next(slot)], &responses[slot], std::move(done));
    });
    if (!r.status.ok()) Die(r.status, "pushes");
    return r;
  };
  for (int n : in_flight) {
    RunResult r = lookups(w.fixed_lookups, n);
    json line = RowsLine(absl::StrCat(net, "fixed_pull.in_flight_", n), r, per_request, n,
                         "Lookup of a fixed [N, 16] table");
    fixed_pull[n] = line["value"].get<double>();
    line["limit"] = gather_served;
    Emit(line);
  }
  // Inserts (every key new). First into fresh memory: "dyn" filled with every key (1 in flight,
  // the table the finds and pushes use), "ins<n>" for the other counts; the table grows into new
  // pages, which the first-touch limit bounds. Then into recycled memory: "ins<n>" erased and
  // filled again with other keys, as a table that evicts as it goes (TTL, capacity) runs.
  // The bytes a shard holds per key, from its own counters (records, index, blocks' tails).
  auto bytes_per_key = [&](const std::string& shard) {
    ListShardsResponse listed;
    if (absl::Status s = client->ListShards(ListShardsRequest(), &listed); !s.ok()) Die(s, "list");
    for (const DynamicShardStats& st : listed.dynamic_stats()) {
      if (st.shard() == shard && st.keys() > 0) {
        return static_cast<double>(st.bytes()) / st.keys();
      }
    }
    Die(absl::InternalError(absl::StrCat("shard ", shard, " lists no keys")), "bytes per key");
    return 0.0;
  };
  auto insert_line = [&](const std::string& name, int n, double secs, const std::string& op) {
    json line = Base(name, keys / secs / 1e6, "M rows/s");
    line["in_flight"] = n;
    line["op"] = op;
    line["keys"] = keys;
    line["seconds"] = Round(secs, 2);
    Vs(&line, fixed_pull[n], kInsertTarget, absl::StrCat(net, "fixed_pull at the same in_flight"));
    return line;
  };
  for (int n : in_flight) {
    const std::string shard = n == 1 ? "dyn" : absl::StrCat("ins", n);
    std::vector<LookupRequest> inserts =
        InsertRequests(shard, keys * (n == 1 ? 0 : n), keys, per_request);
    absl::StatusOr<double> secs = RunAll(client.get(), inserts, n);
    if (!secs.ok()) Die(secs.status(), "inserts");
    json line =
        insert_line(absl::StrCat(net, "dynamic_insert_fresh_memory.in_flight_", n), n, *secs,
                    "training lookups of keys all new, the table growing into new "
                    "memory: each key stored with its row drawn from (seed, key)");
    const double key_bytes = bytes_per_key(shard);
    line["limit"] = {{"name", "limit.first_touch_GBps / the shard's bytes per key"},
                     {"value", Round(first_touch * 1e9 / key_bytes / 1e6)},
                     {"unit", "M keys/s"},
                     {"bytes_per_key", Round(key_bytes, 1)}};
    Emit(line);
    if (n != 1) {  // only for this figure: give its memory back
      UpdateRequest erase;
      for (const LookupRequest& r : inserts) {
        UpdateOp* op = erase.add_ops();
        op->set_shard(shard);
        op->set_kind(UpdateOp::ERASE);
        op->set_ids(r.ops(0).ids());
      }
      UpdateResponse erased;
      if (absl::Status s = client->Update(erase, &erased); !s.ok()) Die(s, "erase");
    }
  }
  for (int n : in_flight) {
    // A table of its own, filled once (fresh memory, untimed), then erased and filled again.
    const std::string shard = absl::StrCat("rec", n);
    CreateShardsRequest more;
    *more.add_shards() = DynamicDef(shard);
    if (absl::Status s = client->CreateShards(more, &created); !s.ok()) Die(s, "CreateShards");
    const int64_t first = keys * (10 + 2 * n);
    if (!RunAll(client.get(), InsertRequests(shard, first, keys, per_request), n).ok()) {
      Die(absl::InternalError("fill"), "recycled inserts");
    }
    UpdateRequest erase;
    for (const LookupRequest& r : InsertRequests(shard, first, keys, per_request)) {
      UpdateOp* op = erase.add_ops();
      op->set_shard(shard);
      op->set_kind(UpdateOp::ERASE);
      op->set_ids(r.ops(0).ids());
    }
    UpdateResponse erased;
    if (absl::Status s = client->Update(erase, &erased); !s.ok()) Die(s, "erase");
    absl::StatusOr<double> secs =
        RunAll(client.get(), InsertRequests(shard, first + keys, keys, per_request), n);
    if (!secs.ok()) Die(secs.status(), "recycled inserts");
    Emit(insert_line(absl::StrCat(net, "dynamic_insert_recycled_memory.in_flight_", n), n, *secs,
                     "training lookups of keys all new, into memory the table freed (erased "
                     "keys): no first touch"));
    erase.mutable_ops()->Clear();
    for (const LookupRequest& r : InsertRequests(shard, first + keys, keys, per_request)) {
      UpdateOp* op = erase.add_ops();
      op->set_shard(shard);
      op->set_kind(UpdateOp::ERASE);
      op->set_ids(r.ops(0).ids());
    }
    if (absl::Status s = client->Update(erase, &erased); !s.ok()) Die(s, "erase");
  }
  for (int n : in_flight) {
    json line =
        RowsLine(absl::StrCat(net, "dynamic_find.in_flight_", n), lookups(w.dynamic_finds, n),
                 per_request, n, "training lookup (Lookup with insert), every key present");
    Vs(&line, fixed_pull[n], kFindTarget, absl::StrCat(net, "fixed_pull at the same in_flight"));
    Emit(line);
    line =
        RowsLine(absl::StrCat(net, "dynamic_find_eval.in_flight_", n), lookups(w.dynamic_evals, n),
                 per_request, n, "evaluation lookup (never inserts), every key present");
    Vs(&line, fixed_pull[n], kFindTarget, absl::StrCat(net, "fixed_pull at the same in_flight"));
    Emit(line);
  }
  for (int n : in_flight) {
    json line = RowsLine(absl::StrCat(net, "fixed_push.in_flight_", n), pushes(w.fixed_pushes, n),
                         per_request, n, "Update APPLY_GRADIENT (Adagrad), fixed table");
    fixed_push[n] = line["value"].get<double>();
    Emit(line);
    line = RowsLine(absl::StrCat(net, "dynamic_apply.in_flight_", n), pushes(w.dynamic_pushes, n),
                    per_request, n, "Update APPLY_GRADIENT (Adagrad), dynamic table");
    Vs(&line, fixed_push[n], kApplyTarget, absl::StrCat(net, "fixed_push at the same in_flight"));
    Emit(line);
  }

  // Memory held per key.
  ListShardsResponse listed;
  if (absl::Status s = client->ListShards(ListShardsRequest(), &listed); !s.ok()) Die(s, "list");
  for (const DynamicShardStats& s : listed.dynamic_stats()) {
    if (s.shard() != "dyn") continue;
    json line =
        Base("memory.dynamic_bytes_per_key", static_cast<double>(s.bytes()) / s.keys(), "bytes");
    line["row_and_slots_bytes"] = 2 * kRowBytes;
    line["ratio"] = Round(static_cast<double>(s.bytes()) / s.keys() / (2 * kRowBytes));
    line["target_ratio"] = 1.5;
    line["keys"] = s.keys();
    line["detail"] =
        "the shard's records (24-byte header, row, accumulator), index and blocks' "
        "unused tail, per key held";
    Emit(line);
  }

  // Export: the whole table in chunks of 65536 keys, with slots.
  {
    const absl::Time start = absl::Now();
    ExportRequest request;
    request.set_shard("dyn");
    request.set_max_keys(65536);
    request.set_with_slots(true);
    int64_t exported = 0, bytes = 0;
    for (;;) {
      ExportResponse response;
      if (absl::Status s = client->Export(request, &response); !s.ok()) Die(s, "export");
      exported += static_cast<int64_t>(response.keys().size() / 8);
      bytes += static_cast<int64_t>(response.ByteSizeLong());
      if (response.next_cursor().empty()) break;
      request.set_cursor(response.next_cursor());
    }
    const double secs = absl::ToDoubleSeconds(absl::Now() - start);
    json line = Base("export.dynamic_rows_per_sec", exported / secs / 1e6, "M rows/s");
    line["MBps"] = Round(bytes / secs / 1e6);
    line["keys"] = exported;
    line["detail"] = "Export over gRPC, 65536 keys per call, rows and slots, one call at a time";
    Emit(line);
  }

  // Checkpoints: save the ps (both tables), then restore the dynamic table from it.
  {
    SaveShardsRequest save;
    save.set_db_path(dir + "/ps-0");
    const absl::Time start = absl::Now();
    SaveShardsResponse saved;
    if (absl::Status s = client->SaveShards(save, &saved); !s.ok()) Die(s, "save");
    const double secs = absl::ToDoubleSeconds(absl::Now() - start);
    int64_t dyn_bytes = 0, fixed_bytes = 0;
    for (const SavedShard& s : saved.shards()) {
      (s.def().has_dynamic() ? dyn_bytes : fixed_bytes) += s.bytes();
    }
    json line = Base("checkpoint.save_MBps", saved.bytes() / secs / 1e6, "MB/s");
    line["dynamic_MB"] = Round(dyn_bytes / 1e6);
    line["fixed_MB"] = Round(fixed_bytes / 1e6);
    line["seconds"] = Round(secs, 2);
    line["detail"] =
        "SaveShards of the ps: the fixed table and the dynamic one (its records sorted "
        "by routing hash), one SST file, synced";
    Emit(line);
    RestoreShardsRequest restore;
    restore.set_restore_id(1);
    RestoreShardOp* op = restore.add_ops();
    op->set_shard("dyn");
    op->add_sources()->set_db_path(dir + "/ps-0");
    const absl::Time rstart = absl::Now();
    RestoreShardsResponse restored;
    if (absl::Status s = client->RestoreShards(restore, &restored); !s.ok()) Die(s, "restore");
    const double rsecs = absl::ToDoubleSeconds(absl::Now() - rstart);
    CommitRestoreRequest commit;
    commit.set_restore_id(1);
    commit.set_abort(true);
    CommitRestoreResponse committed;
    if (absl::Status s = client->CommitRestore(commit, &committed); !s.ok()) Die(s, "commit");
    line = Base("checkpoint.dynamic_restore_MBps", restored.bytes() / rsecs / 1e6, "MB/s");
    line["keys_per_sec"] = Round(keys / rsecs / 1e6, 3);
    line["seconds"] = Round(rsecs, 2);
    line["detail"] =
        "RestoreShards of the dynamic table into a fresh shard (every record read, "
        "checked, and inserted)";
    Emit(line);
  }
  client.reset();
  (*server)->Shutdown();
  MeasureTier(timing, dir);
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
