// A real ps_server process under clients that send more than it may hold on its data plane (16
// clients, a 511 MiB update each, at once): its resident memory stays under its in-flight account
// plus its table plus a fixed margin, every well-formed request is applied exactly once or refused
// with RESOURCE_EXHAUSTED, and a normal worker's lookups keep being answered meanwhile (their
// latency printed with the other figures, one line of JSON).
//
// For measurements: PSTRAIN_PS_MEMORY_INFLIGHT (default "1G") sets the ps's --inflight_bytes (0:
// none, as before there was one; then no bound is asserted); PSTRAIN_PS_MEMORY_GRPC_CLIENTS (default
// 0) adds clients sending the same over gRPC, whose requests the account doesn't count yet (gRPC
// holds a whole message before a handler sees it), so no bound is asserted with them either;
// PSTRAIN_PS_MEMORY_CLIENTS (default 16) sets how many send on the data plane.
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "cluster/port_picker.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/grpc_ps_client.h"
#include "tests/subprocess.h"

namespace pstrain {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kRowFloats = 4;
// The table: 512 MiB; each update: its first 511 MiB (a request stays under gRPC's 512 MiB message
// limit with its header).
constexpr int64_t kTableBytes = 512 * kMiB;
constexpr int64_t kRows = kTableBytes / (kRowFloats * 4);
constexpr int64_t kUpdateBytes = 511 * kMiB;
constexpr int64_t kUpdateRows = kUpdateBytes / (kRowFloats * 4);

int64_t InflightFlagBytes(const std::string& text) {
  std::string digits = text;
  int64_t unit = 1;
  if (!digits.empty() && (digits.back() == 'G' || digits.back() == 'M')) {
    unit = digits.back() == 'G' ? 1024 * kMiB : kMiB;
    digits.pop_back();
  }
  int64_t n = 0;
  return absl::SimpleAtoi(digits, &n) ? n * unit : 0;
}

class PsMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
    const char* inflight = std::getenv("PSTRAIN_PS_MEMORY_INFLIGHT");
    inflight_ = inflight != nullptr ? inflight : "1G";
    absl::StatusOr<int> port = PickUnusedPort(), worker_port = PickUnusedPort();
    ASSERT_TRUE(port.ok() && worker_port.ok());
    address_ = absl::StrCat("localhost:", *port);
    const std::string spec = tmp_ + "/ps_memory_cluster.json";
    std::ofstream(spec) << R"({"cluster": {"ps": [")" << address_
                        << R"("], "worker": ["localhost:)" << *worker_port << R"("]}})";
    absl::StatusOr<std::unique_ptr<Subprocess>> ps = Subprocess::Start(
        "ps_memory_ps0",
        {RunfilePath("ps/ps_server"), "--cluster_spec=" + spec, "--task=ps:0",
         "--checkpoint_root=" + tmp_, "--inflight_bytes=" + inflight_,
         "--max_data_connections=" + std::to_string(max_data_connections_)},
        {}, tmp_);
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_ = std::move(*ps);
    ASSERT_TRUE(ps_->WaitForStdout("READY", absl::Seconds(60)).ok()) << ps_->Stderr();
  }

  std::string tmp_;
  std::string inflight_;
  int max_data_connections_ = 256;
  std::string address_;
  std::unique_ptr<Subprocess> ps_;
};

TEST_F(PsMemoryTest, ManyHugeUpdates_RssBounded_EachAppliedOnceOrRefused_LookupsAnswered) {
  auto admin = NewGrpcPsClient(0, address_);
  CreateShardsRequest create;
  VariableShardDef* def = create.add_shards();
  def->set_name("w");
  def->set_variable("w");
  def->set_dtype(DT_FLOAT32);
  def->add_full_shape(kRows);
  def->add_full_shape(kRowFloats);
  def->set_num_rows(kRows);
  def->set_num_shards(1);
  CreateShardsResponse created;
  ASSERT_TRUE(admin->CreateShards(create, &created).ok());
  const int64_t before = ProcStatusBytes("VmRSS", ps_->pid());

  // Every update adds 1 to every element of w, from one shared buffer of ones.
  const std::vector<float> ones(kUpdateBytes / 4, 1.0f);
  const absl::string_view values(reinterpret_cast<const char*>(ones.data()), kUpdateBytes);
  UpdateRequest update;
  UpdateOp* op = update.add_ops();
  op->set_shard("w");
  op->set_kind(UpdateOp::ASSIGN_ADD);
  op->mutable_range()->set_row_begin(0);
  op->mutable_range()->set_row_end(kUpdateRows);
  op->set_dtype(DT_FLOAT32);
  const std::vector<absl::string_view> update_values = {values};

  const char* clients_env = std::getenv("PSTRAIN_PS_MEMORY_CLIENTS");
  const int kClients = clients_env != nullptr ? std::max(1, std::atoi(clients_env)) : 16;
  std::atomic<int> applied{0}, refused{0}, other{0};
  absl::Mutex mu;
  std::vector<std::string> others, refusals;
  std::atomic<bool> done{false};
  // A normal worker: a small lookup on the data plane every 20 ms, timed.
  std::vector<double> lookup_ms;
  std::atomic<int> lookups_failed{0};
  std::thread worker([&] {
    GrpcPsClientOptions options;
    options.timeout = absl::Seconds(120);
    auto client = NewGrpcPsClient(0, address_, options);
    LookupRequest lookup;
    LookupOp* l = lookup.add_ops();
    l->set_shard("w");
    const std::vector<int64_t> ids = {0, 7, kRows - 1};
    l->set_ids(std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 8));
    while (!done.load()) {
      LookupResponse response;
      const absl::Time start = absl::Now();
      if (client->Lookup(lookup, &response).ok()) {
        absl::MutexLock lock(&mu);
        lookup_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
      } else {
        lookups_failed.fetch_add(1);
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  // The ps's resident memory, sampled meanwhile (VmHWM below is the kernel's own peak).
  std::atomic<int64_t> sampled_peak{0};
  std::thread sampler([&] {
    while (!done.load()) {
      sampled_peak =
          std::max<int64_t>(sampled_peak.load(), ProcStatusBytes("VmRSS", ps_->pid()));
      absl::SleepFor(absl::Milliseconds(10));
    }
  });
  std::vector<std::thread> clients;
  const absl::Time start = absl::Now();
  const char* grpc_env = std::getenv("PSTRAIN_PS_MEMORY_GRPC_CLIENTS");
  const int grpc_clients = grpc_env != nullptr ? std::atoi(grpc_env) : 0;
  absl::Mutex connect_mu;
  int unconnected = kClients + grpc_clients;
  for (int c = 0; c < std::max(kClients, grpc_clients); ++c) {
    for (const bool data_plane : {true, false}) {
      if (data_plane ? c >= kClients : c >= grpc_clients) continue;
      clients.emplace_back([&, data_plane] {
        GrpcPsClientOptions options;
        options.data_plane = data_plane;
        options.timeout = absl::Seconds(300);
        auto client = NewGrpcPsClient(0, address_, options);
        // Connected first (a lookup, repeated while the connection is still being made: the ps
        // and 16 clients share two cores), then all send at once: the burst is what is tested.
        LookupRequest probe;
        LookupOp* p = probe.add_ops();
        p->set_shard("w");
        const int64_t id = 0;
        p->set_ids(std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
        absl::Status connected;
        for (int attempt = 0; attempt < 30; ++attempt) {
          LookupResponse got;
          connected = client->Lookup(probe, &got);
          if (connected.ok()) break;
          absl::SleepFor(absl::Seconds(1));
        }
        if (!connected.ok()) {
          other.fetch_add(1);
          absl::MutexLock lock(&mu);
          others.push_back(absl::StrCat("connecting: ", connected.ToString()));
        }
        {
          absl::MutexLock lock(&connect_mu);
          --unconnected;
          connect_mu.Await(absl::Condition(
              +[](int* n) { return *n == 0; }, &unconnected));
        }
        if (!connected.ok()) return;
        UpdateResponse response;
        absl::Notification finished;
        absl::Status status;
        client->UpdateWithValuesAsync(&update, &update_values, &response, [&](absl::Status s) {
          status = std::move(s);
          finished.Notify();
        });
        finished.WaitForNotification();
        if (status.ok()) {
          applied.fetch_add(1);
        } else if (status.code() == absl::StatusCode::kResourceExhausted) {
          refused.fetch_add(1);
          absl::MutexLock lock(&mu);
          refusals.push_back(absl::StrCat(data_plane ? "data plane: " : "gRPC: ",
                                          status.message()));
        } else {
          other.fetch_add(1);
          absl::MutexLock lock(&mu);
          others.push_back(status.ToString());
        }
      });
    }
  }
  for (std::thread& t : clients) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  done = true;
  worker.join();
  sampler.join();
  const int64_t hwm = ProcStatusBytes("VmHWM", ps_->pid());

  // Every request applied once or refused.
  EXPECT_EQ(other.load(), 0) << (others.empty() ? "" : others.front());
  EXPECT_EQ(applied.load() + refused.load(), kClients + grpc_clients);
  // w, read back in two halves (a reply stays under the 512 MiB message limit).
  int64_t wrong = 0;
  float first = -1;
  for (int half = 0; half < 2; ++half) {
    ReadRequest read;
    ReadOp* r = read.add_ops();
    r->set_shard("w");
    r->mutable_range()->set_row_begin(half * kRows / 2);
    r->mutable_range()->set_row_end((half + 1) * kRows / 2);
    ReadResponse got;
    const absl::Status read_status = admin->Read(read, &got);
    ASSERT_TRUE(read_status.ok()) << read_status;
    ASSERT_EQ(static_cast<int64_t>(got.values(0).size()), kTableBytes / 2);
    const float* w = reinterpret_cast<const float*>(got.values(0).data());
    if (half == 0) first = w[0];
    for (int64_t i = 0; i < kTableBytes / 8; i += 4099) {
      const int64_t element = half * kTableBytes / 8 + i;
      wrong += w[i] != (element < kUpdateBytes / 4 ? applied.load() : 0);
    }
  }
  EXPECT_EQ(wrong, 0) << "w[0] = " << first << " after " << applied.load() << " updates applied";

  // The worker's lookups kept being answered.
  std::sort(lookup_ms.begin(), lookup_ms.end());
  EXPECT_EQ(lookups_failed.load(), 0);
  ASSERT_FALSE(lookup_ms.empty());

  // Resident memory: the table (512 MiB), plus the account, plus a margin for the process, its
  // heap's retained free memory (up to 256 MiB: common/grpc_util.h) and the replies.
  const int64_t account = InflightFlagBytes(inflight_);
  const int64_t bound = kTableBytes + account + 768 * kMiB;
  std::cout << "{\"inflight_bytes\": \"" << inflight_ << "\", \"clients\": " << kClients
            << ", \"grpc_clients\": " << grpc_clients << ", \"applied\": " << applied.load()
            << ", \"refused\": " << refused.load() << ", \"seconds\": " << seconds
            << ", \"rss_before_mib\": " << before / kMiB << ", \"peak_rss_mib\": " << hwm / kMiB
            << ", \"sampled_peak_rss_mib\": " << sampled_peak.load() / kMiB
            << ", \"bound_mib\": " << bound / kMiB << ", \"lookups\": " << lookup_ms.size()
            << ", \"lookup_ms_median\": " << lookup_ms[lookup_ms.size() / 2]
            << ", \"lookup_ms_p99\": " << lookup_ms[lookup_ms.size() * 99 / 100]
            << ", \"lookup_ms_max\": " << lookup_ms.back() << "}" << std::endl;
  for (const std::string& refusal : refusals) std::cout << "refused: " << refusal << std::endl;
  if (account > 0 && grpc_clients == 0) {
    EXPECT_LT(hwm, bound) << "peak RSS " << hwm / kMiB << " MiB";
  }
}

// 5,000 connections opened on the data plane and held, never saying hello: the ps stays up with a
// bounded number of threads (past max_handshaking the oldest silent connection is closed), and a
// real client connecting afterwards is served.
TEST_F(PsMemoryTest, ThousandsOfSilentConnections_PsUpThreadsBounded_RealClientServed) {
  auto admin = NewGrpcPsClient(0, address_);
  HealthResponse health;
  ASSERT_TRUE(admin->Health(HealthRequest(), &health).ok());
  ASSERT_GT(health.data_port(), 0);
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  int wanted = 5000;
  files.rlim_cur = std::min<rlim_t>(files.rlim_max, wanted + 256);
  ::setrlimit(RLIMIT_NOFILE, &files);
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_cur < static_cast<rlim_t>(wanted + 256)) {
    wanted = static_cast<int>(files.rlim_cur) - 256;
    std::cout << "this machine allows " << files.rlim_cur << " open files: " << wanted
              << " connections" << std::endl;
  }
  std::vector<int> held;
  const absl::Time start = absl::Now();
  for (int i = 0; i < wanted; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(health.data_port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      continue;  // the backlog was full for a moment: the ps is closing the oldest
    }
    held.push_back(fd);
  }
  const double connect_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const int64_t threads = ProcStatusBytes("Threads", ps_->pid()) / 1024;  // a count, not KiB
  EXPECT_GT(held.size(), static_cast<size_t>(wanted) * 9 / 10);
  // The ps's threads: gRPC's, its pools', and at most max_handshaking (64) for connections
  // saying hello; not one per connection.
  EXPECT_LT(threads, 400) << threads << " threads with " << held.size() << " connections held";
  ASSERT_TRUE(admin->Health(HealthRequest(), &health).ok());
  CreateShardsRequest create;
  VariableShardDef* def = create.add_shards();
  def->set_name("v");
  def->set_variable("v");
  def->set_dtype(DT_FLOAT32);
  def->add_full_shape(8);
  def->add_full_shape(2);
  def->set_num_rows(8);
  def->set_num_shards(1);
  CreateShardsResponse created;
  ASSERT_TRUE(admin->CreateShards(create, &created).ok());
  auto client = NewGrpcPsClient(0, address_);  // its lookups go over the data plane
  LookupRequest lookup;
  LookupOp* l = lookup.add_ops();
  l->set_shard("v");
  const std::vector<int64_t> ids = {0, 7};
  l->set_ids(std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 8));
  LookupResponse response;
  const absl::Time lookup_start = absl::Now();
  const absl::Status looked_up = client->Lookup(lookup, &response);
  const double lookup_seconds = absl::ToDoubleSeconds(absl::Now() - lookup_start);
  EXPECT_TRUE(looked_up.ok()) << looked_up;
  std::cout << "{\"connections_held\": " << held.size() << ", \"connect_seconds\": "
            << connect_seconds << ", \"ps_threads\": " << threads
            << ", \"real_client_lookup_seconds\": " << lookup_seconds << "}" << std::endl;
  for (int fd : held) ::close(fd);
}

}  // namespace
}  // namespace pstrain
