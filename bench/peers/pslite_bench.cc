// The ps-lite peer of ps_bench (bench/ps_bench.cc): the same workload on ps-lite's KVServer and
// KVWorker over ZeroMQ/TCP on 127.0.0.1, one scheduler, one server and one worker process. Not
// built by Bazel and not part of the product: bench/peers/run_pslite.sh compiles it against a
// ps-lite checkout (built from its own Makefile on Debian's libzmq and protobuf) and runs it.
//
// The server's table is an array of --rows rows of 16 float32, as a fixed ps shard is; a key is a
// row. Pull: copy each key's row into the reply. Push: SGD on each key's row (row -= lr * grad),
// one row read and written per key, as ps_bench's sparse_push_sgd. A second table of as many rows
// (keys kAdagradKey0 + row) takes Adagrad pushes, as ps_bench's sparse_push: an accumulator array
// beside the weights, initialized to 0.1, and per float acc += g * g; w -= lr * g / (sqrt(acc) +
// 1e-7), the same update as ps/optimizers.cc's, so two rows are read and written per key.
// --prefetch=1 prefetches the row (both rows, for Adagrad) 16 keys ahead (the stronger peer on
// pushes). Dense: one key --dense_floats long, pulled whole and pushed with SGD. Every request has
// --ids 16,384 sorted distinct uniform random keys.
//
// The worker prints one JSON line per figure, each measured in this run:
//   {"name": "pslite.sparse_pull.in_flight_1", "value": M rows/s, ...}
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "ps/ps.h"

namespace {

constexpr int kWidth = 16;

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoll(v) : fallback;
}

double EnvDouble(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atof(v) : fallback;
}

// Settings, shared by the three processes through the environment (run_pslite.sh sets them).
const int64_t kRows = EnvInt("PSLITE_BENCH_ROWS", 4194304);
const int64_t kIds = EnvInt("PSLITE_BENCH_IDS", 16384);
const int64_t kDenseFloats = EnvInt("PSLITE_BENCH_DENSE_FLOATS", 1048576);
const bool kPrefetch = EnvInt("PSLITE_BENCH_PREFETCH", 0) != 0;
const double kSeconds = EnvDouble("PSLITE_BENCH_SECONDS", 2.0);
// Requests in flight to measure at, e.g. "1,4" (the default).
std::vector<int> InFlightList() {
  std::vector<int> out;
  const char* v = std::getenv("PSLITE_BENCH_IN_FLIGHT");
  std::string list = v != nullptr && *v != '\0' ? v : "1,4";
  size_t at = 0;
  while (at < list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const int n = std::atoi(list.substr(at, comma - at).c_str());
    if (n > 0) out.push_back(n);
    at = comma + 1;
  }
  if (out.empty()) out = {1, 4};
  return out;
}
const std::vector<int> kInFlight = InFlightList();
const ps::Key kDenseKey = static_cast<ps::Key>(kRows);  // the key after the table's rows
const ps::Key kAdagradKey0 = kDenseKey + 1;              // the Adagrad table's first row

class ArrayServer {
 public:
  ArrayServer()
      : table_(kRows * kWidth),
        adagrad_(kRows * kWidth),
        accum_(kRows * kWidth, 0.1f),
        dense_(kDenseFloats, 0.5f) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-0.05f, 0.05f);
    for (float& x : table_) x = u(rng);
    for (float& x : adagrad_) x = u(rng);
  }

  void Handle(const ps::KVMeta& meta, const ps::KVPairs<float>& data,
              ps::KVServer<float>* server) {
    const size_t n = data.keys.size();
    const bool dense = n == 1 && data.keys[0] == kDenseKey;
    const bool adagrad = n > 0 && data.keys[0] >= kAdagradKey0;
    ps::KVPairs<float> res;
    if (meta.push) {
      const float lr = 0.01f;
      if (adagrad) {
        for (size_t i = 0; i < n; ++i) {
          if (kPrefetch && i + 16 < n) {
            const size_t ahead = (data.keys[i + 16] - kAdagradKey0) * kWidth;
            __builtin_prefetch(&adagrad_[ahead], 1);
            __builtin_prefetch(&accum_[ahead], 1);
          }
          const size_t at = (data.keys[i] - kAdagradKey0) * kWidth;
          float* w = &adagrad_[at];
          float* acc = &accum_[at];
          const float* g = &data.vals[i * kWidth];
          for (int j = 0; j < kWidth; ++j) {
            acc[j] += g[j] * g[j];
            w[j] -= lr * g[j] / (std::sqrt(acc[j]) + 1e-7f);
          }
        }
      } else if (dense) {
        float* d = dense_.data();
        const float* g = data.vals.data();
        for (int64_t i = 0; i < kDenseFloats; ++i) d[i] -= lr * g[i];
      } else {
        for (size_t i = 0; i < n; ++i) {
          if (kPrefetch && i + 16 < n) __builtin_prefetch(&table_[data.keys[i + 16] * kWidth], 1);
          float* row = &table_[data.keys[i] * kWidth];
          const float* g = &data.vals[i * kWidth];
          for (int j = 0; j < kWidth; ++j) row[j] -= lr * g[j];
        }
      }
    } else {
      res.keys = data.keys;
      if (dense) {
        res.vals.CopyFrom(dense_.data(), dense_.size());
      } else {
        res.vals.resize(n * kWidth);
        for (size_t i = 0; i < n; ++i) {
          if (kPrefetch && i + 16 < n) __builtin_prefetch(&table_[data.keys[i + 16] * kWidth]);
          std::memcpy(&res.vals[i * kWidth], &table_[data.keys[i] * kWidth],
                      kWidth * sizeof(float));
        }
      }
    }
    server->Response(meta, res);
  }

 private:
  std::vector<float> table_;
  std::vector<float> adagrad_;  // the Adagrad table's weights
  std::vector<float> accum_;    // and its accumulators
  std::vector<float> dense_;
};

// Requests re-issued with `in_flight` outstanding for kSeconds after a warm-up of a quarter of it
// (at most 0.5 s); returns requests per second.
template <typename Issue>
double InFlight(ps::KVWorker<float>* kv, int in_flight, Issue issue) {
  using Clock = std::chrono::steady_clock;
  std::deque<int> pending;
  int64_t next = 0, done = 0;
  const double warmup = std::min(0.5, kSeconds / 4);
  const Clock::time_point start = Clock::now();
  Clock::time_point timed_start;
  int64_t timed_done0 = -1;
  for (;;) {
    while (static_cast<int>(pending.size()) < in_flight) pending.push_back(issue(next++));
    kv->Wait(pending.front());
    pending.pop_front();
    ++done;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (timed_done0 < 0 && elapsed >= warmup) {
      timed_done0 = done;
      timed_start = Clock::now();
    }
    if (timed_done0 >= 0 && elapsed >= warmup + kSeconds) break;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - timed_start).count();
  const int64_t timed = done - timed_done0;
  while (!pending.empty()) {
    kv->Wait(pending.front());
    pending.pop_front();
  }
  return timed / secs;
}

void Print(const std::string& name, double value, const char* unit, int in_flight) {
  std::printf(
      "{\"name\": \"pslite.%s.in_flight_%d\", \"value\": %.3f, \"unit\": \"%s\", "
      "\"in_flight\": %d, \"prefetch\": %s, \"ids_per_request\": %lld, \"rows\": %lld, "
      "\"transport\": \"ps-lite's ZeroMQ van over TCP on 127.0.0.1, 1 server process\"}\n",
      name.c_str(), in_flight, value, unit, in_flight, kPrefetch ? "true" : "false",
      static_cast<long long>(kIds), static_cast<long long>(kRows));
  std::fflush(stdout);
}

void RunWorker() {
  ps::KVWorker<float> kv(0, 0);
  // 64 requests of sorted distinct uniform random keys, cycled, as ps_bench's workload.
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int64_t> pick(0, kRows - 1);
  std::vector<ps::SArray<ps::Key>> keys(64);
  for (auto& k : keys) {
    std::vector<ps::Key> ids;
    while (static_cast<int64_t>(ids.size()) < kIds) {
      ids.push_back(static_cast<ps::Key>(pick(rng)));
      if (static_cast<int64_t>(ids.size()) == kIds) {
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      }
    }
    k.CopyFrom(ids.data(), ids.size());
  }
  // The same requests on the Adagrad table.
  std::vector<ps::SArray<ps::Key>> adagrad_keys(keys.size());
  for (size_t r = 0; r < keys.size(); ++r) {
    std::vector<ps::Key> ids(keys[r].begin(), keys[r].end());
    for (ps::Key& id : ids) id += kAdagradKey0;
    adagrad_keys[r].CopyFrom(ids.data(), ids.size());
  }
  ps::SArray<float> grads(kIds * kWidth, 0.001f);
  std::vector<ps::SArray<float>> pulled(16);
  for (int in_flight : kInFlight) {
    // A pull fills an empty array (ps-lite sizes it; one of another size is an error). A slot
    // is reused 16 requests later, long after its pull is done.
    double rps = InFlight(&kv, in_flight, [&](int64_t i) {
      pulled[i % 16] = ps::SArray<float>();
      return kv.ZPull(keys[i % keys.size()], &pulled[i % 16]);
    });
    Print("sparse_pull", rps * kIds / 1e6, "M rows/s", in_flight);
    rps = InFlight(&kv, in_flight,
                   [&](int64_t i) { return kv.ZPush(keys[i % keys.size()], grads); });
    Print("sparse_push_sgd", rps * kIds / 1e6, "M rows/s", in_flight);
    rps = InFlight(&kv, in_flight, [&](int64_t i) {
      return kv.ZPush(adagrad_keys[i % adagrad_keys.size()], grads);
    });
    Print("sparse_push_adagrad", rps * kIds / 1e6, "M rows/s", in_flight);
  }
  ps::SArray<ps::Key> dense_key(1, kDenseKey);
  ps::SArray<float> dense_grads(kDenseFloats, 0.001f);
  const double bytes = static_cast<double>(kDenseFloats) * sizeof(float);
  for (int in_flight : kInFlight) {
    double rps = InFlight(&kv, in_flight, [&](int64_t i) {
      pulled[i % 16] = ps::SArray<float>();
      return kv.ZPull(dense_key, &pulled[i % 16]);
    });
    Print("dense_pull", rps * bytes / 1e9, "GB/s", in_flight);
    rps = InFlight(&kv, in_flight, [&](int64_t) { return kv.ZPush(dense_key, dense_grads); });
    Print("dense_push_sgd", rps * bytes / 1e9, "GB/s", in_flight);
  }
}

}  // namespace

int main(int argc, char* argv[]) {
  ps::Start(0);
  ArrayServer* array = nullptr;
  ps::KVServer<float>* server = nullptr;
  if (ps::IsServer()) {
    array = new ArrayServer();
    server = new ps::KVServer<float>(0);
    server->set_request_handle(
        [array](const ps::KVMeta& meta, const ps::KVPairs<float>& data,
                ps::KVServer<float>* s) { array->Handle(meta, data, s); });
  }
  if (ps::IsWorker()) RunWorker();
  ps::Finalize(0, true);
  delete server;
  delete array;
  return 0;
}
