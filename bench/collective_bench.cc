// All-reduce across workers on loopback (collective/, Gloo over TCP): algbw and busbw (nccl-tests'
// definitions: algbw = bytes / time, busbw = algbw * 2(n-1)/n) at 4 KiB to 256 MiB on 2 and 4
// ranks (threads of this process, each with its own TCP connections), beside the same run's
// loopback TCP limit and torch.distributed's Gloo all_reduce at the same sizes and iteration
// counts (bench/torch_gloo_allreduce.py, one process per rank; Debian's python3-torch).
//
//   bazel run -c opt //bench:collective_bench [-- --world_sizes=2,4 --max_bytes=268435456]
//
// Targets (issue 20): at least 90% of torch's algbw from 1 MiB up; busbw at 64 MiB at least 50%
// of loopback TCP.
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/barrier.h"
#include "absl/time/clock.h"
#include "bench/bench_loops.h"
#include "bench/machine_limits.h"
#include "collective/gloo_group.h"
#include "collective/rendezvous_service.h"
#include "common/json_parse.h"

ABSL_FLAG(std::string, world_sizes, "2,4", "Ranks per group, comma-separated.");
ABSL_FLAG(int64_t, min_bytes, 4 << 10, "Smallest all-reduce, bytes.");
ABSL_FLAG(int64_t, max_bytes, int64_t{256} << 20, "Largest all-reduce, bytes (x4 steps).");
ABSL_FLAG(bool, torch, true, "Run the torch.distributed Gloo peer.");
ABSL_FLAG(int64_t, ring_segment_bytes, -1, "The ring's segment size (-1: the group's default).");
ABSL_FLAG(int64_t, small_allreduce_bytes, -1,
          "All-reduces up to this size use BCube, larger the ring (-1: the group's default).");
ABSL_FLAG(std::string, python, "/usr/bin/python3", "The python with torch (Debian's).");

namespace pstrain {
namespace {

// Iterations per size: about 256 MiB moved per rank per size, at least 3, at most 2000.
int Iters(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / bytes, 3, 2000));
}

// Seconds per all-reduce (rank 0's, over `iters` after 2 untimed) for each size.
std::vector<double> RunOurs(int world_size, const std::vector<int64_t>& sizes,
                            const std::string& rendezvous, uint64_t generation) {
  std::vector<double> seconds(sizes.size());
  std::vector<std::thread> threads;
  std::vector<absl::Status> errors(world_size);
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      CollectiveGroupOptions options;
      options.rendezvous_address = rendezvous;
      options.group = "bench";
      options.generation = generation;
      options.rank = r;
      options.size = world_size;
      options.name = absl::StrCat("rank:", r);
      if (absl::GetFlag(FLAGS_ring_segment_bytes) > 0) {
        options.ring_segment_bytes = absl::GetFlag(FLAGS_ring_segment_bytes);
      }
      if (absl::GetFlag(FLAGS_small_allreduce_bytes) >= 0) {
        options.small_allreduce_bytes = absl::GetFlag(FLAGS_small_allreduce_bytes);
      }
      auto group = CreateGlooGroup(options);
      if (!group.ok()) {
        errors[r] = group.status();
        return;
      }
      for (size_t i = 0; i < sizes.size(); ++i) {
        std::vector<float> data(sizes[i] / sizeof(float), 1.0f);
        for (int w = 0; w < 2; ++w) {
          errors[r].Update((*group)->AllReduce(data.data(), data.size(), ReduceOp::kSum));
        }
        errors[r].Update((*group)->Barrier());
        const int iters = Iters(sizes[i]);
        const absl::Time start = absl::Now();
        for (int k = 0; k < iters; ++k) {
          errors[r].Update((*group)->AllReduce(data.data(), data.size(), ReduceOp::kSum));
        }
        const double secs = absl::ToDoubleSeconds(absl::Now() - start) / iters;
        if (r == 0) seconds[i] = secs;
        errors[r].Update((*group)->Barrier());
        if (!errors[r].ok()) return;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& e : errors) {
    if (!e.ok()) Die(e, absl::StrCat("all-reduce on ", world_size, " ranks"));
  }
  return seconds;
}

// The peer's seconds per all_reduce by size, or empty when it did not run.
std::vector<double> RunTorch(int world_size, const std::vector<int64_t>& sizes, std::string* why) {
  std::vector<std::string> spec;
  for (int64_t b : sizes) spec.push_back(absl::StrCat(b, ":", Iters(b)));
  const std::string command =
      absl::StrCat(absl::GetFlag(FLAGS_python), " bench/torch_gloo_allreduce.py --world_size ",
                   world_size, " --sizes ", absl::StrJoin(spec, ","), " 2>/dev/null");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *why = "could not start python";
    return {};
  }
  std::vector<double> seconds(sizes.size(), 0);
  size_t got = 0;
  char line[4096];
  while (fgets(line, sizeof(line), pipe) != nullptr) {
    absl::StatusOr<nlohmann::json> j = ParseJson(line);
    if (!j.ok() || !j->is_object()) continue;
    if (j->contains("error")) *why = (*j)["error"].get<std::string>();
    if (!j->contains("bytes")) continue;
    const int64_t bytes = (*j)["bytes"].get<int64_t>();
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] == bytes) {
        seconds[i] = (*j)["seconds_per_op"].get<double>();
        ++got;
      }
    }
  }
  const int rc = pclose(pipe);
  if (got != sizes.size()) {
    if (why->empty()) *why = absl::StrCat("the torch peer exited with ", rc);
    return {};
  }
  return seconds;
}

int Main() {
  std::vector<int> world_sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_world_sizes), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1) {
      Die(absl::InvalidArgumentError(absl::StrCat("bad --world_sizes entry '", s, "'")), "flags");
    }
    world_sizes.push_back(n);
  }
  std::vector<int64_t> sizes;
  for (int64_t b = absl::GetFlag(FLAGS_min_bytes); b <= absl::GetFlag(FLAGS_max_bytes); b *= 4) {
    sizes.push_back(b);
  }
  LimitTiming lt;
  absl::StatusOr<double> tcp = MeasureLoopbackTcpGBps(lt);
  if (!tcp.ok()) Die(tcp.status(), "loopback TCP");
  Emit({{"name", "limit.loopback_tcp_1stream"}, {"value", Round(*tcp)}, {"unit", "GB/s"},
        {"cpus", AvailableCpus()}});

  auto rendezvous = RendezvousServer::Start("127.0.0.1:0");
  if (!rendezvous.ok()) Die(rendezvous.status(), "rendezvous");
  uint64_t generation = 0;
  for (int n : world_sizes) {
    const std::vector<double> ours = RunOurs(n, sizes, (*rendezvous)->address(), ++generation);
    std::string why;
    const std::vector<double> torch =
        absl::GetFlag(FLAGS_torch) ? RunTorch(n, sizes, &why) : std::vector<double>{};
    if (!absl::GetFlag(FLAGS_torch)) why = "--torch=false";
    double worst_vs_torch_from_1mib = 0;
    bool any = false;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const double algbw = sizes[i] / ours[i] / 1e9;
      const double busbw = n > 1 ? algbw * 2.0 * (n - 1) / n : algbw;
      nlohmann::json line = {{"name", "allreduce"},        {"world_size", n},
                             {"bytes", sizes[i]},          {"iters", Iters(sizes[i])},
                             {"us_per_op", Round(ours[i] * 1e6, 1)},
                             {"algbw_GBps", Round(algbw)}, {"busbw_GBps", Round(busbw)},
                             {"busbw_vs_loopback_tcp", Round(busbw / *tcp)}};
      if (!torch.empty()) {
        const double torch_algbw = sizes[i] / torch[i] / 1e9;
        line["torch_algbw_GBps"] = Round(torch_algbw);
        line["vs_torch"] = Round(algbw / torch_algbw);
        if (sizes[i] >= (1 << 20)) {
          worst_vs_torch_from_1mib =
              any ? std::min(worst_vs_torch_from_1mib, algbw / torch_algbw) : algbw / torch_algbw;
          any = true;
        }
      }
      if (sizes[i] == (int64_t{64} << 20)) {
        Emit({{"name", "target.busbw_64MiB_vs_loopback_tcp"}, {"world_size", n},
              {"value", Round(busbw / *tcp)}, {"target", 0.5}});
      }
      Emit(line);
    }
    if (any) {
      Emit({{"name", "target.worst_vs_torch_from_1MiB"}, {"world_size", n},
            {"value", Round(worst_vs_torch_from_1mib)}, {"target", 0.9}});
    } else {
      Emit({{"name", "peer.torch_gloo"}, {"world_size", n}, {"skipped", why}});
    }
  }
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
