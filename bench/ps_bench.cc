// ps_bench: throughput of one ps (its server in this process) over its data plane on localhost
// (--transport=grpc: unary gRPC), next to what the machine itself can do, one JSON object per line
// per figure. Every figure is measured in the run; ps-lite, the peer, runs outside it
// (docs/benchmarks.md says how and what it reached).
//
//   bazel run -c opt //bench:ps_bench                      # defaults, about a minute
//   bazel run -c opt //bench:ps_bench -- --seconds=0.5 --rows=262144   # quick
//   bazel run -c opt //bench:ps_bench -- --only=sparse_pull --in_flight=4  # one group (profiling)
//
// Figures (every line has name, value, unit; targets and limits beside them where they apply):
//   limit.*      memcpy; random 64-byte row gathers from a table of the benchmark's size, on one
//                thread (cited by the breakdown) and on as many as the machine runs (cited by the
//                served sparse figures); loopback TCP over 1 and 2 connections (the dense figures
//                cite the client's: 2 over the data plane, 1 over gRPC) (bench/machine_limits.h).
//   breakdown.*  the ps's own work without gRPC (VariableStore called directly in this thread) and
//                the protobuf copy of one reply, to split a gRPC figure into server work and
//                transport.
//   sparse_pull.*, sparse_push.*  16,384 uniform random ids per request on a [rows, 16] float32
//                table with Adagrad; "raw" = prebuilt requests re-issued through PsClient's async
//                calls with N in flight; "sharded_variable" = ShardedVariable::Lookup /
//                ApplyGradients, one at a time (the real client path: dedupe, route, copy back).
//   sparse_push_sgd.*  the raw push again on a second table of the same shape with SGD: one row
//                read and written per id (as ps-lite's summing push, which docs/benchmarks.md
//                compares it with), where Adagrad reads and writes two (the row and its
//                accumulator). A comparison, not a target.
//   dense_pull.*, dense_push_assign.*, dense_push_sgd.*  a whole 1M-float variable per request:
//                pull = Read of the whole shard (ShardedVariable::ReadAll); push = Update over the
//                whole range, either ASSIGN (AssignAll) or APPLY_GRADIENT with SGD
//                (ApplyDenseGradients). The headline shape is [1048576], a flat vector as a 1-D
//                variable is stored: rows of width 1, so the ps does per-row work (row lock, 4-byte
//                copy) for every float. "dense_wide" is the same 4 MiB as [1024, 1024], which shows
//                how much of the flat figure is that per-row work rather than transport.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_loops.h"
#include "bench/machine_limits.h"
#include "common/grpc_util.h"
#include "nlohmann/json.hpp"
#include "proto/ps_service.pb.h"
#include "ps/grpc_ps_client.h"
#include "ps/ps_client.h"
#include "ps/ps_server.h"
#include "ps/sharded_variable.h"
#include "ps/variable_store.h"

ABSL_FLAG(double, seconds, 2.0,
          "Timed seconds per measurement; each is preceded by a warm-up of a quarter of it (at "
          "most 0.5 s).");
ABSL_FLAG(std::string, transport, "data_plane",
          "How Lookup, Update and Read travel: data_plane (the ps's TCP data plane, the default) "
          "or grpc (unary gRPC calls, as before it).");
ABSL_FLAG(int64_t, rows, 4194304, "Rows of the sparse table (16 float32 = 64 bytes each).");
ABSL_FLAG(int64_t, ids_per_request, 16384, "Uniform random ids per sparse request.");
ABSL_FLAG(bool, sorted_ids, false,
          "Each sparse request's ids distinct and sorted (ps-lite's workload, bench/peers: its "
          "keys must be), instead of raw uniform draws with their repeats, in drawn order.");
ABSL_FLAG(std::vector<std::string>, in_flight, std::vector<std::string>({"1", "4", "8"}),
          "Requests kept in flight for the raw sparse figures (each at most 16).");
ABSL_FLAG(int64_t, dense_floats, 1048576,
          "Floats in the dense variable (shape [dense_floats]; also measured as [n/1024, 1024] "
          "when divisible).");
ABSL_FLAG(std::vector<std::string>, only, {},
          "Run only these groups (default: all): limits (memcpy, gather, loopback TCP), breakdown "
          "(the ps's work without gRPC, protobuf copies), sparse_pull, sparse_push, dense. Lines "
          "carry a \"limit\" only when limits run.");

namespace pstrain {
namespace {

using json = nlohmann::json;

constexpr int64_t kWidth = 16;                      // floats per sparse row
constexpr int64_t kRowBytes = kWidth * sizeof(float);  // 64
constexpr int kMaxInFlight = 16;
// What carries the traffic, set from --transport: every line says it.
std::string server_label;
// Connections the client's traffic travels on: the data plane opens 2 (one for rows, one for the
// pushes that end a dense turn, and a large read's pieces are served on both); gRPC one.
int client_connections = 1;

// Targets from the issue.
constexpr double kSparseTargetMrows = 15, kSparseAimMrows = 22;
constexpr double kDensePushTargetGBps = 1.6, kDensePullTargetGBps = 1.1;

std::string Bytes(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

// The sparse table: "emb" with Adagrad (the figures with targets); "emb_sgd" with SGD.
VariableShardDef TableDef(int64_t rows, const std::string& name = "emb",
                          OptimizerDef::Kind optimizer = OptimizerDef::ADAGRAD) {
  VariableShardDef def;
  def.set_name(name);
  def.set_variable(name);
  def.add_full_shape(rows);
  def.add_full_shape(kWidth);
  def.set_dtype(DT_FLOAT32);
  def.set_row_offset(0);
  def.set_num_rows(rows);
  def.set_shard_index(0);
  def.set_num_shards(1);
  def.mutable_initializer()->set_kind(InitializerDef::UNIFORM);
  def.mutable_initializer()->set_minval(-0.05);
  def.mutable_initializer()->set_maxval(0.05);
  def.mutable_initializer()->set_seed(7);
  def.mutable_optimizer()->set_kind(optimizer);
  return def;
}

VariableShardDef DenseDef(const std::string& name, int64_t rows, int64_t width) {
  VariableShardDef def;
  def.set_name(name);
  def.set_variable(name);
  def.add_full_shape(rows);
  if (width != 1) def.add_full_shape(width);
  def.set_dtype(DT_FLOAT32);
  def.set_row_offset(0);
  def.set_num_rows(rows);
  def.set_shard_index(0);
  def.set_num_shards(1);
  def.mutable_initializer()->set_kind(InitializerDef::CONSTANT);
  def.mutable_initializer()->set_value(0.5);
  def.mutable_optimizer()->set_kind(OptimizerDef::SGD);
  return def;
}

// The sparse workload, built once: id sets and the requests that carry them. There are enough sets
// for one pass over them to draw about as many ids as the table has rows (at least 16): a row comes
// back only after the rest of the table has been touched, as with a uniform random stream, so the
// figures are not flattered by rows still in the L3 cache (105 MiB here; 16 sets touched only
// 32 MiB of rows and slots).
struct SparseWorkload {
  int64_t rows = 0;
  int64_t ids_per_request = 0;
  std::vector<std::vector<int64_t>> id_sets;
  std::vector<float> grads;  // ids_per_request rows, shared by every push
  std::vector<LookupRequest> lookups;
  std::vector<UpdateRequest> updates;
  double mean_distinct = 0;  // distinct ids per request, averaged over the sets
  bool sorted = false;       // each request's ids distinct and sorted
  int num_sets() const { return static_cast<int>(id_sets.size()); }

  static SparseWorkload Build(int64_t rows, int64_t ids_per_request, bool sorted) {
    SparseWorkload w;
    w.sorted = sorted;
    w.rows = rows;
    if (sorted) ids_per_request = std::min(ids_per_request, rows);  // distinct: at most the rows
    w.ids_per_request = ids_per_request;
    std::mt19937_64 rng(20261121);
    std::uniform_int_distribution<int64_t> id(0, rows - 1);
    std::uniform_real_distribution<float> g(-0.01f, 0.01f);
    w.grads.resize(ids_per_request * kWidth);
    for (float& x : w.grads) x = g(rng);
    int64_t distinct = 0;
    const int64_t sets =
        std::max<int64_t>(kMaxInFlight, (rows + ids_per_request - 1) / ids_per_request);
    for (int s = 0; s < sets; ++s) {
      std::vector<int64_t> ids(ids_per_request);
      for (int64_t& x : ids) x = id(rng);
      if (sorted) {
        // Distinct: draws until there are ids_per_request of them.
        absl::flat_hash_set<int64_t> distinct_ids(ids.begin(), ids.end());
        while (static_cast<int64_t>(distinct_ids.size()) < ids_per_request) {
          distinct_ids.insert(id(rng));
        }
        ids.assign(distinct_ids.begin(), distinct_ids.end());
        std::sort(ids.begin(), ids.end());
        distinct += ids_per_request;
      } else {
        std::vector<int64_t> sorted_ids = ids;
        std::sort(sorted_ids.begin(), sorted_ids.end());
        distinct += std::unique(sorted_ids.begin(), sorted_ids.end()) - sorted_ids.begin();
      }

      LookupOp* l = w.lookups.emplace_back().add_ops();
      l->set_shard("emb");
      l->set_ids(Bytes(ids.data(), ids.size() * sizeof(int64_t)));
      UpdateOp* u = w.updates.emplace_back().add_ops();
      u->set_shard("emb");
      u->set_kind(UpdateOp::APPLY_GRADIENT);
      u->set_ids(l->ids());
      u->set_values(Bytes(w.grads.data(), w.grads.size() * sizeof(float)));
      u->set_dtype(DT_FLOAT32);
      w.id_sets.push_back(std::move(ids));
    }
    w.mean_distinct = static_cast<double>(distinct) / sets;
    return w;
  }
};

// Figures that every line of one kind shares.
json Base(const std::string& name, double value, const std::string& unit) {
  return json{{"name", name}, {"value", Round(value)}, {"unit", unit}, {"cpus", AvailableCpus()}};
}

json LimitRef(const std::string& name, double value, const std::string& unit) {
  return json{{"name", name}, {"value", Round(value)}, {"unit", unit}};
}

// The limits, each measured on the shape it bounds: gathers from a table of the benchmark's own
// size, on one thread (the ps's own work on one thread: the breakdown) and on as many threads as
// the ps serves with here (the served figures); loopback TCP over as many connections as the
// client's traffic uses.
struct Limits {
  double memcpy_GBps = 0;
  json gather_one_thread;     // {"name", "value", "unit"} of each, for the lines that cite them
  json gather_server_threads;
  json tcp_client_connections;
  bool measured = false;
};

Limits MeasureLimits(const Timing& timing, int64_t table_bytes) {
  Limits l;
  LimitTiming t{timing.warmup, timing.duration};
  l.memcpy_GBps = MeasureMemcpyGBps(t);
  json j = Base("limit.memcpy_64MiB_1thread", l.memcpy_GBps, "GB/s");
  j["detail"] = "single-thread memcpy between two 64 MiB buffers; bytes copied per second";
  Emit(j);

  // Gathers from a table of the benchmark's size. 4 KiB pages, as the ps's new[] tables get.
  auto gather = [&](GatherOptions g, const std::string& detail) {
    const double mrows = MeasureRandomGatherRowsPerSec(t, g) / 1e6;
    json line = Base(GatherLimitName(g), mrows, "M rows/s");
    line["detail"] = detail;
    line["table_bytes"] = g.table_bytes;
    line["threads"] = g.threads;
    line["GBps"] = Round(mrows * 1e6 * g.row_bytes / 1e9);
    line["thp_mode"] = TransparentHugePageMode();
    Emit(line);
    return LimitRef(line["name"].get<std::string>(), mrows, "M rows/s");
  };
  GatherOptions g;
  g.table_bytes = table_bytes;
  l.gather_one_thread = gather(g, "memcpy of uniformly random 64-byte rows from a table the size "
                                  "of the benchmark's into a 16384-row buffer, one thread");
  g.threads = AvailableCpus();
  l.gather_server_threads =
      gather(g, "the same on as many threads as this machine runs at once, each with its own ids "
                "and buffer: what a ps serving requests side by side can gather");
  g.threads = 1;
  g.lock_per_row = true;
  gather(g, "as the one-thread gather, with an uncontended striped spin lock (atomic exchange + "
            "release store) around each row, as the ps's RowLocks do; the locked instruction is "
            "a full barrier, so cache misses no longer overlap");
  g.lock_per_row = false;
  g.huge_pages = true;
  gather(g, "as the one-thread gather, with madvise(MADV_HUGEPAGE) on the table");

  for (int streams : {1, 2}) {
    absl::StatusOr<double> tcp = MeasureLoopbackTcpGBps(t, int64_t{1} << 20, streams);
    if (!tcp.ok()) Die(tcp.status(), "loopback TCP");
    j = Base(LoopbackLimitName(streams), *tcp, "GB/s");
    j["detail"] = absl::StrCat("plain TCP over 127.0.0.1, ", streams,
                               " connection(s) at once, each with one sender thread (1 MiB "
                               "writes) and one receiver thread; bytes received over all");
    Emit(j);
    if (streams == client_connections) {
      l.tcp_client_connections = LimitRef(j["name"].get<std::string>(), *tcp, "GB/s");
    }
  }
  l.measured = true;
  return l;
}

// The ps's own sparse work, without gRPC: VariableStore::Lookup/Update called on this thread with
// the same requests the raw gRPC figures send; and the protobuf copies of one lookup reply.
void MeasureBreakdown(const Timing& timing, const SparseWorkload& w, const Limits& limits) {
  VariableStore store;  // with its default pool, as a ps has
  absl::StatusOr<std::vector<bool>> created = store.CreateShards({TableDef(w.rows)});
  if (!created.ok()) Die(created.status(), "creating the local table");
  const double rows_per_call = static_cast<double>(w.ids_per_request);
  auto limit = [&] { return limits.measured ? limits.gather_one_thread : json(); };

  LookupResponse response;
  int next = 0;
  RunResult r = RunSerial(timing, [&] {
    response.Clear();
    return store.Lookup(w.lookups[next++ % w.num_sets()], &response);
  });
  if (!r.status.ok()) Die(r.status, "local lookup");
  json j = Base("breakdown.server_lookup_no_grpc", r.per_sec() * rows_per_call / 1e6, "M rows/s");
  j["detail"] = "VariableStore::Lookup called directly, one request at a time, its rows split "
                "over the store's pool as on a ps (validate ids, allocate the reply, row lock + "
                "64-byte copy per id): the ps's work per lookup request";
  j["us_per_request"] = Round(r.us_per_call(), 1);
  j["limit"] = limit();
  j["table"] = {w.rows, kWidth};
  j["ids_per_request"] = w.ids_per_request;
  Emit(j);

  r = RunSerial(timing, [&] { return store.Update(w.updates[next++ % w.num_sets()]); });
  if (!r.status.ok()) Die(r.status, "local update");
  j = Base("breakdown.server_adagrad_no_grpc", r.per_sec() * rows_per_call / 1e6, "M rows/s");
  j["detail"] = "VariableStore::Update (APPLY_GRADIENT, Adagrad) called directly, one request "
                "at a time (pool as on a ps); requests hold the raw ids, so the ~" +
                std::to_string(static_cast<int>(w.ids_per_request - w.mean_distinct)) +
                " repeated ids per request take the ps's summing path";
  j["us_per_request"] = Round(r.us_per_call(), 1);
  j["limit"] = limit();
  Emit(j);

  // One reply as gRPC's protobuf codec handles it: serialize (copy 1) and parse (copy 2); the
  // kernel's two socket copies come on top of these over TCP.
  response.Clear();
  if (absl::Status s = store.Lookup(w.lookups[0], &response); !s.ok()) Die(s, "local lookup");
  std::string wire;
  LookupResponse parsed;
  r = RunSerial(timing, [&] {
    wire.clear();
    if (!response.SerializeToString(&wire) || !parsed.ParseFromString(wire)) {
      return absl::InternalError("protobuf round trip failed");
    }
    return absl::OkStatus();
  });
  if (!r.status.ok()) Die(r.status, "protobuf round trip");
  j = Base("breakdown.protobuf_serialize_parse_lookup_reply", r.per_sec() * rows_per_call / 1e6,
           "M rows/s");
  j["detail"] = "LookupResponse of one request's rows: SerializeToString + ParseFromString on one "
                "thread (two user-space copies of the 1 MiB bytes field)";
  j["GBps"] = Round(r.per_sec() * response.ByteSizeLong() / 1e9);
  j["us_per_request"] = Round(r.us_per_call(), 1);
  if (limits.measured) {
    j["limit"] = LimitRef("limit.memcpy_64MiB_1thread", limits.memcpy_GBps, "GB/s");
  }
  Emit(j);
}

json SparseLine(const std::string& name, const std::string& client, int in_flight,
                const RunResult& r, const SparseWorkload& w, const Limits& limits,
                const std::string& op_detail) {
  const double rows_per_sec = r.per_sec() * w.ids_per_request;
  json j = Base(name, rows_per_sec / 1e6, "M rows/s");
  j["server"] = server_label;
  j["client"] = client;
  j["in_flight"] = in_flight;
  j["op"] = op_detail;
  j["payload_GBps"] = Round(rows_per_sec * kRowBytes / 1e9);
  j["payload"] = "64-byte rows (the 8-byte ids on top are not counted)";
  j["us_per_request"] = Round(r.us_per_call(), 1);
  j["requests"] = r.calls;
  j["seconds"] = Round(r.seconds, 2);
  j["process_cpu_cores"] = Round(r.cpu_cores, 2);
  j["target"] = kSparseTargetMrows;
  j["aim"] = kSparseAimMrows;
  j["meets_target"] = rows_per_sec / 1e6 >= kSparseTargetMrows;
  if (limits.measured) j["limit"] = limits.gather_server_threads;
  j["table"] = {w.rows, kWidth};
  j["ids_per_request"] = w.ids_per_request;
  j["distinct_ids_per_request"] = Round(w.mean_distinct, 1);
  j["ids"] = w.sorted ? "distinct, sorted" : "uniform draws with their repeats, in drawn order";
  return j;
}

void MeasureSparse(const Timing& timing, PsClient* client, const SparseWorkload& w,
                   const std::vector<int>& in_flight, const Limits& limits, bool pull, bool push) {
  absl::StatusOr<ShardedVariable> emb = ShardedVariable::Create(
      "emb", {w.rows, kWidth}, DT_FLOAT32, {ShardLocation{"emb", 0, w.rows, 0}}, {client});
  if (!emb.ok()) Die(emb.status(), "ShardedVariable::Create");

  // Pull.
  for (int n : pull ? in_flight : std::vector<int>()) {
    std::vector<LookupResponse> responses(n);
    SlotCursor cursor(n, w.num_sets());
    RunResult r = InFlightLoop::Run(timing, n, [&](int slot, PsClient::Done done) {
      client->LookupAsync(&w.lookups[cursor.Next(slot)], &responses[slot], std::move(done));
    });
    if (!r.status.ok()) Die(r.status, "raw lookup");
    Emit(SparseLine(absl::StrCat("sparse_pull.raw.in_flight_", n), "raw PsClient::LookupAsync, "
                    "prebuilt requests", n, r, w, limits, "Lookup"));
  }
  if (pull) {
    std::vector<float> out(w.ids_per_request * kWidth);
    int next = 0;
    RunResult r = RunSerial(timing, [&] {
      return emb->Lookup(w.id_sets[next++ % w.num_sets()], out.data());
    });
    if (!r.status.ok()) Die(r.status, "ShardedVariable::Lookup");
    Emit(SparseLine("sparse_pull.sharded_variable.in_flight_1", "ShardedVariable::Lookup", 1, r,
                    w, limits,
                    "Lookup (client dedupes ids, builds the request, copies rows back)"));
  }

  // Push: raw prebuilt requests with n in flight, one line per n (`name` + n).
  const std::string push_payload =
      "64-byte gradient rows sent (the 8-byte ids on top are not counted)";
  auto raw_push = [&](const std::vector<UpdateRequest>& updates, int n, const std::string& name,
                      const std::string& op) {
    std::vector<UpdateResponse> responses(n);
    SlotCursor cursor(n, w.num_sets());
    RunResult r = InFlightLoop::Run(timing, n, [&](int slot, PsClient::Done done) {
      client->UpdateAsync(&updates[cursor.Next(slot)], &responses[slot], std::move(done));
    });
    if (!r.status.ok()) Die(r.status, absl::StrCat("raw update, ", name, n));
    json j = SparseLine(absl::StrCat(name, n), "raw PsClient::UpdateAsync, prebuilt requests", n,
                        r, w, limits, op);
    j["payload"] = push_payload;
    return j;
  };
  const std::string push_op = "Update APPLY_GRADIENT with the ps's Adagrad";
  for (int n : push ? in_flight : std::vector<int>()) {
    Emit(raw_push(w.updates, n, "sparse_push.raw.in_flight_", push_op));
  }
  if (push) {
    int next = 0;
    RunResult r = RunSerial(timing, [&] {
      return emb->ApplyGradients(w.id_sets[next++ % w.num_sets()], w.grads.data());
    });
    if (!r.status.ok()) Die(r.status, "ShardedVariable::ApplyGradients");
    json j = SparseLine("sparse_push.sharded_variable.in_flight_1",
                        "ShardedVariable::ApplyGradients", 1, r, w, limits,
                        push_op + " (client sums repeated ids, builds the request)");
    j["payload"] = push_payload;
    Emit(j);
  }

  // Push with SGD: the same requests, aimed at the SGD table.
  std::vector<UpdateRequest> sgd_updates = push ? w.updates : std::vector<UpdateRequest>();
  for (UpdateRequest& u : sgd_updates) u.mutable_ops(0)->set_shard("emb_sgd");
  for (int n : push ? in_flight : std::vector<int>()) {
    json j = raw_push(sgd_updates, n, "sparse_push_sgd.raw.in_flight_",
                      "Update APPLY_GRADIENT with the ps's SGD (one row read and written per id, "
                      "as ps-lite's summing push; Adagrad touches two)");
    // A comparison with ps-lite's summing push, whose figures are measured outside this program
    // (docs/benchmarks.md, "The data plane against ps-lite"): the targets are for Adagrad.
    j.erase("target");
    j.erase("aim");
    j.erase("meets_target");
    j["peer"] = "ps-lite's push: run outside this program; its figures and build are in "
                "docs/benchmarks.md (The data plane against ps-lite)";
    Emit(j);
  }
}

// One dense variable: pull (Read of the whole variable), push by ASSIGN, push by APPLY_GRADIENT
// with SGD; through ShardedVariable one at a time and, if raw_in_flight > 0, raw prebuilt requests.
void MeasureDense(const Timing& timing, PsClient* client, const std::string& name,
                  std::vector<int64_t> shape, int raw_in_flight, const Limits& limits) {
  const int64_t rows = shape[0];
  const int64_t width = shape.size() > 1 ? shape[1] : 1;
  const int64_t bytes = rows * width * static_cast<int64_t>(sizeof(float));
  absl::StatusOr<ShardedVariable> v = ShardedVariable::Create(
      name, shape, DT_FLOAT32, {ShardLocation{name, 0, rows, 0}}, {client});
  if (!v.ok()) Die(v.status(), "ShardedVariable::Create (dense)");
  std::vector<float> values(rows * width);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> g(-0.001f, 0.001f);
  for (float& x : values) x = g(rng);
  const absl::string_view values_bytes(reinterpret_cast<const char*>(values.data()), bytes);

  auto line = [&](const std::string& figure, const std::string& client_kind, int in_flight,
                  const RunResult& r, const std::string& op, double target) {
    const double gbps = r.per_sec() * bytes / 1e9;
    json j = Base(absl::StrCat(figure, ".", name, ".", client_kind, ".in_flight_", in_flight),
                  gbps, "GB/s");
    j["server"] = server_label;
    j["client"] = client_kind == "raw" ? "raw PsClient async calls, prebuilt requests"
                                       : "ShardedVariable";
    j["in_flight"] = in_flight;
    j["op"] = op;
    j["shape"] = shape;
    j["payload"] = absl::StrCat("the whole variable, ", bytes, " bytes of float32 per request");
    j["us_per_request"] = Round(r.us_per_call(), 1);
    j["requests"] = r.calls;
    j["seconds"] = Round(r.seconds, 2);
    j["process_cpu_cores"] = Round(r.cpu_cores, 2);
    j["target"] = target;
    j["meets_target"] = gbps >= target;
    if (limits.measured) j["limit"] = limits.tcp_client_connections;
    Emit(j);
  };

  // Pull.
  RunResult r = RunSerial(timing, [&] { return v->ReadAll().status(); });
  if (!r.status.ok()) Die(r.status, "ReadAll");
  line("dense_pull", "sharded_variable", 1, r, "ShardedVariable::ReadAll (Read of the whole shard)",
       kDensePullTargetGBps);
  ReadRequest read;
  read.add_ops()->set_shard(name);
  if (raw_in_flight > 0) {
    std::vector<ReadResponse> responses(raw_in_flight);
    r = InFlightLoop::Run(timing, raw_in_flight, [&](int slot, PsClient::Done done) {
      client->ReadAsync(&read, &responses[slot], std::move(done));
    });
    if (!r.status.ok()) Die(r.status, "raw read");
    line("dense_pull", "raw", raw_in_flight, r, "Read of the whole shard", kDensePullTargetGBps);
  }

  // Push: ASSIGN (AssignAll) and APPLY_GRADIENT with SGD (ApplyDenseGradients).
  for (UpdateOp::Kind kind : {UpdateOp::ASSIGN, UpdateOp::APPLY_GRADIENT}) {
    const bool assign = kind == UpdateOp::ASSIGN;
    const std::string figure = assign ? "dense_push_assign" : "dense_push_sgd";
    r = RunSerial(timing, [&] {
      return assign ? v->AssignAll(values_bytes) : v->ApplyDenseGradients(values_bytes);
    });
    if (!r.status.ok()) Die(r.status, figure);
    line(figure, "sharded_variable", 1, r,
         assign ? "ShardedVariable::AssignAll (Update ASSIGN over the whole range)"
                : "ShardedVariable::ApplyDenseGradients (Update APPLY_GRADIENT, SGD)",
         kDensePushTargetGBps);
    if (raw_in_flight > 0) {
      UpdateRequest update;
      UpdateOp* op = update.add_ops();
      op->set_shard(name);
      op->set_kind(kind);
      op->mutable_range();  // row_begin = row_end = 0: the whole shard
      op->set_values(std::string(values_bytes));
      op->set_dtype(DT_FLOAT32);
      std::vector<UpdateResponse> responses(raw_in_flight);
      r = InFlightLoop::Run(timing, raw_in_flight, [&](int slot, PsClient::Done done) {
        client->UpdateAsync(&update, &responses[slot], std::move(done));
      });
      if (!r.status.ok()) Die(r.status, "raw dense update");
      line(figure, "raw", raw_in_flight, r,
           assign ? "Update ASSIGN over the whole range"
                  : "Update APPLY_GRADIENT (SGD), whole range",
           kDensePushTargetGBps);
    }
  }
}

int Main() {
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const int64_t ids_per_request = absl::GetFlag(FLAGS_ids_per_request);
  const int64_t dense_floats = absl::GetFlag(FLAGS_dense_floats);
  if (seconds <= 0 || rows <= 0 || ids_per_request <= 0 || dense_floats <= 0) {
    std::cerr << "ps_bench: --seconds, --rows, --ids_per_request and --dense_floats must be > 0\n";
    return 2;
  }
  const std::string transport = absl::GetFlag(FLAGS_transport);
  if (transport != "data_plane" && transport != "grpc") {
    std::cerr << "ps_bench: --transport must be data_plane or grpc, got \"" << transport << "\"\n";
    return 2;
  }
  std::vector<int> in_flight;
  for (const std::string& s : absl::GetFlag(FLAGS_in_flight)) {
    int n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1 || n > kMaxInFlight) {
      std::cerr << "ps_bench: --in_flight values must be in [1, " << kMaxInFlight << "], got \""
                << s << "\"\n";
      return 2;
    }
    in_flight.push_back(n);
  }
  // As in every ps and client process (the server and channels set it too, but the breakdown runs
  // before either exists): megabyte buffers from the heap, not fresh mmaps.
  TuneMallocForLargeMessages();
  Timing timing;
  timing.duration = absl::Seconds(seconds);
  timing.warmup = std::min(absl::Milliseconds(500), timing.duration / 4);

  const std::vector<std::string> only = absl::GetFlag(FLAGS_only);
  for (const std::string& group : only) {
    if (group != "limits" && group != "breakdown" && group != "sparse_pull" &&
        group != "sparse_push" && group != "dense") {
      std::cerr << "ps_bench: unknown --only group \"" << group << "\"\n";
      return 2;
    }
  }
  auto runs = [&](absl::string_view group) {
    return only.empty() || std::find(only.begin(), only.end(), group) != only.end();
  };

  client_connections = transport == "data_plane" ? 2 : 1;
  server_label = transport == "data_plane"
                     ? "1 ps in this process; Lookup, Update and Read over its data plane (2 TCP "
                       "connections on localhost), the rest over gRPC"
                     : "1 ps in this process; every call over unary gRPC (1 HTTP/2 connection on "
                       "localhost)";
  Limits limits;
  if (runs("limits")) limits = MeasureLimits(timing, rows * kRowBytes);

  const SparseWorkload workload =
      SparseWorkload::Build(rows, ids_per_request, absl::GetFlag(FLAGS_sorted_ids));
  if (runs("breakdown")) MeasureBreakdown(timing, workload, limits);
  if (!runs("sparse_pull") && !runs("sparse_push") && !runs("dense")) return 0;

  PsServerOptions server_options;
  server_options.listen_address = "localhost:0";
  absl::StatusOr<std::unique_ptr<PsServer>> server = PsServer::Start(server_options);
  if (!server.ok()) Die(server.status(), "starting the ps");
  GrpcPsClientOptions client_options;
  client_options.data_plane = transport == "data_plane";
  std::unique_ptr<PsClient> client = NewGrpcPsClient(0, (*server)->address(), client_options);

  std::vector<std::pair<std::string, std::vector<int64_t>>> dense = {
      {"dense", {dense_floats}}};
  if (dense_floats % 1024 == 0) dense.push_back({"dense_wide", {dense_floats / 1024, 1024}});
  CreateShardsRequest create;
  *create.add_shards() = TableDef(rows);
  if (runs("sparse_push")) *create.add_shards() = TableDef(rows, "emb_sgd", OptimizerDef::SGD);
  for (const auto& [name, shape] : dense) {
    *create.add_shards() = DenseDef(name, shape[0], shape.size() > 1 ? shape[1] : 1);
  }
  CreateShardsResponse created;
  if (absl::Status s = client->CreateShards(create, &created); !s.ok()) Die(s, "CreateShards");

  MeasureSparse(timing, client.get(), workload, in_flight, limits, runs("sparse_pull"),
                runs("sparse_push"));
  // Raw dense figures at the second --in_flight value (4 by default).
  const int dense_raw_in_flight = in_flight.size() > 1 ? in_flight[1] : 0;
  for (size_t i = 0; i < dense.size() && runs("dense"); ++i) {
    // The flat shape is the headline; the wide one only shows what per-row work costs.
    MeasureDense(timing, client.get(), dense[i].first, dense[i].second,
                 i == 0 ? dense_raw_in_flight : 0, limits);
  }

  client.reset();
  (*server)->Shutdown();
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
