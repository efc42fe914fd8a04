// What this machine can do, measured in the same run as a benchmark so its figures can be judged
// against them: memory copy bandwidth, random row gather rate, first-touch bandwidth of fresh
// memory, and loopback TCP bandwidth. Each
// measurement runs for a fixed time after a warm-up and uses one thread per role.
//
// Not thread-safe in the sense that matters: each function keeps a core (or two) busy; run them one
// at a time, with nothing else running, for figures worth comparing.
#ifndef PSTRAIN_BENCH_MACHINE_LIMITS_H_
#define PSTRAIN_BENCH_MACHINE_LIMITS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pstrain {

// How long each measurement runs.
struct LimitTiming {
  // Untimed run before the measurement (page faults, caches, TCP window growth). Default 0.5 s.
  absl::Duration warmup = absl::Milliseconds(500);
  // The timed part. Default 2 s.
  absl::Duration duration = absl::Seconds(2);
};

// Single-thread memcpy between two buffers of `buffer_bytes` each (default 64 MiB, far beyond the
// caches). Returns GB/s (1e9) of bytes copied (not read + written).
double MeasureMemcpyGBps(const LimitTiming& timing, int64_t buffer_bytes = int64_t{64} << 20);

struct GatherOptions {
  // Size of the table rows are gathered from. Default 1 GiB.
  int64_t table_bytes = int64_t{1} << 30;
  // Bytes per row. Default 64 (16 float32).
  int64_t row_bytes = 64;
  // Rows gathered per batch into a contiguous output buffer, like one lookup request's reply.
  // Default 16384.
  int64_t rows_per_batch = 16384;
  // Ask for transparent huge pages on the table (madvise MADV_HUGEPAGE). Default false: the table
  // gets whatever an ordinary `new char[]` gets, as the ps's shards do.
  bool huge_pages = false;
  // Take and release a striped spin lock (an atomic exchange, then a release store, on one of 4096
  // flags) around each row's copy, as a row-locked server does. A locked instruction is a full
  // barrier on x86: it shows what that costs a gather whose speed comes from overlapping misses.
  // Default false.
  bool lock_per_row = false;
  // Threads gathering at once from the one table, each with its own ids and output buffer, as a
  // server's threads serving requests side by side. Default 1.
  int threads = 1;
};

// Gather of uniformly random rows (ids from a cheap inline generator, written to an id buffer
// first as a request's would be), copying each row with memcpy, on options.threads threads.
// Returns rows/s, summed over the threads.
double MeasureRandomGatherRowsPerSec(const LimitTiming& timing, const GatherOptions& options = {});

// The name of a gather limit's line, from its shape: "limit.gather_64B_rows_256MiB_2threads"
// (with "_lock_per_row" or "_hugepages" when those are set).
std::string GatherLimitName(const GatherOptions& options);

// Fresh memory's first touch: a new anonymous mapping of `bytes` (huge pages asked for, as the
// ps's large tables do), one byte written per 4 KiB page, so the kernel (and, in a VM, the host)
// must map and zero every page. Returns GB/s of memory made usable. What a table that grows into
// new memory pays per byte, however fast it fills it.
double MeasureFirstTouchGBps(int64_t bytes = int64_t{1} << 30);

// `streams` plain TCP connections over 127.0.0.1 (no gRPC) at once, each with one sender thread
// writing `write_bytes` per write() and one receiver thread reading into a buffer of the same size
// (the data plane opens 2 connections per client). Returns GB/s received over all of them.
// Errors: kUnavailable if a socket pair can't be set up (with the errno text).
absl::StatusOr<double> MeasureLoopbackTcpGBps(const LimitTiming& timing,
                                              int64_t write_bytes = int64_t{1} << 20,
                                              int streams = 1);

// Random 4 KiB reads of a file of `file_bytes` made in `dir` (written once, then read with
// O_DIRECT, so the device answers, not the page cache), `queue_depth` reads in flight (one thread
// each, pread). Returns reads/s. The file is removed. Errors: kUnavailable (the file can't be made
// or read: the errno text; a file system without O_DIRECT says so).
absl::StatusOr<double> MeasureDiskRandomReadsPerSec(const LimitTiming& timing,
                                                    const std::string& dir, int64_t file_bytes,
                                                    int queue_depth);

// The name of a loopback TCP limit's line: "limit.loopback_tcp_2streams".
std::string LoopbackLimitName(int streams);

// The kernel's transparent huge page mode, e.g. "madvise" (the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled), or "unknown".
std::string TransparentHugePageMode();

// Number of CPUs this process may run on.
int AvailableCpus();

}  // namespace pstrain

#endif  // PSTRAIN_BENCH_MACHINE_LIMITS_H_
