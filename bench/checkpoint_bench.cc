// Checkpoint save and restore throughput against the disk, on an in-process cluster of 2 ps tasks:
// an Adagrad embedding table of --table_mib MiB of values (plus as much again of accumulator) is
// saved into RocksDB and restored. In the same run, the disk's sequential write (with fdatasync)
// and read throughput on the same filesystem, with files of the same total size.
//
// Reads are measured cold: the files are dropped from the page cache (posix_fadvise DONTNEED on
// clean, synced pages) before the disk read and before the restore alike.
//
//   bazel run -c opt //bench:checkpoint_bench [-- --table_mib=1024 --dir=/tmp/pstrain_ckpt_bench]
//
// Prints one JSON object per line per figure.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "coordinator/checkpoint_files.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/cluster_coordinator.h"
#include "nlohmann/json.hpp"
#include "coordinator/in_process_cluster.h"

ABSL_FLAG(int64_t, table_mib, 1024, "MiB of embedding values (the slots add as much again).");
ABSL_FLAG(int64_t, dim, 16, "Embedding width (float32).");
ABSL_FLAG(std::string, dir, "/tmp/pstrain_checkpoint_bench", "Where files go (removed after).");
ABSL_FLAG(int, rounds, 2, "Save/restore rounds; the best of each is reported beside the median.");

namespace pstrain {
namespace {

void Print(nlohmann::json j) { std::printf("%s\n", j.dump().c_str()); std::fflush(stdout); }

[[noreturn]] void Die(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "error: %s: %s\n", what.c_str(), std::string(s.message()).c_str());
  std::exit(1);
}

// Drops every file under `path` from the page cache (they must be synced: clean pages only).
void DropCache(const std::string& path) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(path)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Sequential write of `bytes` in 8 MiB writes, then fdatasync: GB/s.
double DiskWriteGBps(const std::string& file, int64_t bytes) {
  std::vector<char> buffer(8 << 20);
  for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<char>(i * 131);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CHECK(fd >= 0) << "can't create " << file;
  const absl::Time start = absl::Now();
  for (int64_t done = 0; done < bytes;) {
    const ssize_t w = ::write(fd, buffer.data(), std::min<int64_t>(buffer.size(), bytes - done));
    CHECK(w > 0) << "write failed: " << std::strerror(errno);
    done += w;
  }
  CHECK(::fdatasync(fd) == 0);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  ::close(fd);
  return bytes / seconds / 1e9;
}

// Sequential cold read of the whole file in 8 MiB reads: GB/s.
double DiskReadGBps(const std::string& file) {
  DropCache(std::filesystem::path(file).parent_path().string());
  std::vector<char> buffer(8 << 20);
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  CHECK(fd >= 0);
  int64_t total = 0;
  const absl::Time start = absl::Now();
  while (true) {
    const ssize_t r = ::read(fd, buffer.data(), buffer.size());
    CHECK(r >= 0);
    if (r == 0) break;
    total += r;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  ::close(fd);
  return total / seconds / 1e9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Run() {
  const int64_t dim = absl::GetFlag(FLAGS_dim);
  const int64_t rows = (absl::GetFlag(FLAGS_table_mib) << 20) / (dim * 4);
  const std::string dir = absl::GetFlag(FLAGS_dir);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/disk");
  std::filesystem::create_directories(dir + "/ckpt");

  InProcessClusterOptions cluster_options;
  cluster_options.num_ps = 2;
  cluster_options.num_workers = 1;
  auto cluster = InProcessCluster::Start(cluster_options);
  if (!cluster.ok()) Die("cluster", cluster.status());
  auto coordinator = ClusterCoordinator::Create((*cluster)->spec());
  if (!coordinator.ok()) Die("coordinator", coordinator.status());

  VariableSpec spec;
  spec.name = "embedding";
  spec.shape = {rows, dim};
  spec.partitioner.kind = PartitionerKind::kFixed;
  spec.partitioner.num_shards = 4;  // 2 shards per ps
  spec.initializer.set_kind(InitializerDef::UNIFORM);
  spec.initializer.set_minval(-0.05);
  spec.initializer.set_maxval(0.05);
  OptimizerDef adagrad;
  adagrad.set_kind(OptimizerDef::ADAGRAD);
  spec.optimizer = adagrad;
  const absl::Time created = absl::Now();
  auto variable = (*coordinator)->variables()->Create(spec);
  if (!variable.ok()) Die("creating the table", variable.status());
  LOG(INFO) << "created " << rows << " x " << dim << " in "
            << absl::ToDoubleSeconds(absl::Now() - created) << " s";

  CheckpointOptions options;
  options.dir = dir + "/ckpt";
  options.keep = 1;
  auto manager = CheckpointManager::Create(options, (*coordinator)->ps()->clients(),
                                           (*coordinator)->variables());
  if (!manager.ok()) Die("checkpoint manager", manager.status());

  const int64_t bytes = rows * dim * 4 * 2;  // values + accumulator
  std::vector<double> save_mbps, restore_mbps, warm_restore_mbps, write_mbps, read_mbps;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    // The disk, with as many bytes as the checkpoint, split over two files written one after the
    // other (the two ps write theirs at the same time; one stream is the kinder figure).
    const std::string file = dir + "/disk/seq.bin";
    write_mbps.push_back(DiskWriteGBps(file, bytes) * 1000);
    read_mbps.push_back(DiskReadGBps(file) * 1000);
    std::filesystem::remove(file);

    absl::Time start = absl::Now();
    absl::StatusOr<std::string> path;
    absl::Status s = (*coordinator)->RunExclusive([&] {
      path = (*manager)->Save(round + 1, {});
      return path.status();
    });
    if (!s.ok()) Die("save", s);
    save_mbps.push_back(bytes / absl::ToDoubleSeconds(absl::Now() - start) / 1e6);

    DropCache(*path);
    start = absl::Now();
    absl::StatusOr<RestoredCheckpoint> restored = (*manager)->Restore(*path);
    if (!restored.ok()) Die("restore", restored.status());
    restore_mbps.push_back(bytes / absl::ToDoubleSeconds(absl::Now() - start) / 1e6);
    CHECK(restored->bytes == bytes) << restored->bytes << " vs " << bytes;
    // Again with the files in the page cache: what the restore path itself costs.
    start = absl::Now();
    restored = (*manager)->Restore(*path);
    if (!restored.ok()) Die("restore", restored.status());
    warm_restore_mbps.push_back(bytes / absl::ToDoubleSeconds(absl::Now() - start) / 1e6);
  }
  const double disk_write = Median(write_mbps);
  const double disk_read = Median(read_mbps);
  Print({{"figure", "disk_sequential_write_fdatasync"}, {"MB_per_s", disk_write},
         {"runs", write_mbps}, {"bytes", bytes}});
  Print({{"figure", "disk_sequential_read_cold"}, {"MB_per_s", disk_read}, {"runs", read_mbps}});
  Print({{"figure", "checkpoint_save"}, {"MB_per_s", Median(save_mbps)}, {"runs", save_mbps},
         {"bytes", bytes}, {"ps", 2}, {"fraction_of_disk_write", Median(save_mbps) / disk_write},
         {"target_fraction", 0.7}});
  Print({{"figure", "checkpoint_restore_cold"}, {"MB_per_s", Median(restore_mbps)},
         {"runs", restore_mbps}, {"bytes", bytes},
         {"fraction_of_disk_read", Median(restore_mbps) / disk_read}, {"target_fraction", 0.7}});
  Print({{"figure", "checkpoint_restore_warm"}, {"MB_per_s", Median(warm_restore_mbps)},
         {"runs", warm_restore_mbps}, {"note", "files in the page cache: the restore path's own cost"}});
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  pstrain::SetMinLogLevelFromEnv();
  return pstrain::Run();
}
