#include "bench/machine_limits.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/splitmix64.h"

namespace pstrain {
namespace {

// Keeps the compiler from dropping writes to `p` that nothing reads afterwards.
inline void Clobber(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

// Runs `step` (which returns the units of work it did) untimed for the warm-up, then for the
// duration; returns units per second of the timed part. The clock is read once per step, so a step
// should take microseconds or more.
template <typename Step>
double UnitsPerSec(const LimitTiming& timing, Step step) {
  const absl::Time warm_end = absl::Now() + timing.warmup;
  while (absl::Now() < warm_end) step();
  const absl::Time start = absl::Now();
  const absl::Time end = start + timing.duration;
  double units = 0;
  absl::Time now;
  do {
    units += step();
    now = absl::Now();
  } while (now < end);
  return units / absl::ToDoubleSeconds(now - start);
}

// An anonymous mapping, aligned to 2 MiB so that huge pages can back all of it; unmapped on
// destruction.
class Mapping {
 public:
  Mapping(int64_t bytes, bool huge_pages) {
    constexpr int64_t kHuge = int64_t{2} << 20;
    mapped_bytes_ = bytes + kHuge;
    void* p = mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) return;
    mapped_ = static_cast<char*>(p);
    data_ = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1));
    // Advice only: if the kernel refuses, the table just gets 4 KiB pages.
    if (huge_pages) madvise(data_, bytes, MADV_HUGEPAGE);
  }
  ~Mapping() {
    if (mapped_ != nullptr) munmap(mapped_, mapped_bytes_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  char* data() const { return data_; }

 private:
  char* mapped_ = nullptr;
  char* data_ = nullptr;
  int64_t mapped_bytes_ = 0;
};

std::string ErrnoText(absl::string_view what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

// Closes a file descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset(other.fd_);
      other.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }
  void reset(int fd) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// How fast `counter`, which running threads add to, grows: over timing.duration after
// timing.warmup (a timed window over running work: nothing to wait for but the clock).
double CountPerSecOverWindow(const LimitTiming& timing, const std::atomic<int64_t>& counter) {
  absl::SleepFor(timing.warmup);
  const int64_t count0 = counter.load();
  const absl::Time t0 = absl::Now();
  absl::SleepFor(timing.duration);
  const int64_t count1 = counter.load();
  const absl::Time t1 = absl::Now();
  return static_cast<double>(count1 - count0) / absl::ToDoubleSeconds(t1 - t0);
}

}  // namespace

double MeasureMemcpyGBps(const LimitTiming& timing, int64_t buffer_bytes) {
  std::unique_ptr<char[]> src(new char[buffer_bytes]);
  std::unique_ptr<char[]> dst(new char[buffer_bytes]);
  std::memset(src.get(), 1, buffer_bytes);  // touch every page before timing
  std::memset(dst.get(), 2, buffer_bytes);
  const double bytes_per_sec = UnitsPerSec(timing, [&] {
    std::memcpy(dst.get(), src.get(), buffer_bytes);
    Clobber(dst.get());
    return static_cast<double>(buffer_bytes);
  });
  return bytes_per_sec / 1e9;
}

double MeasureRandomGatherRowsPerSec(const LimitTiming& timing, const GatherOptions& options) {
  const int64_t row_bytes = options.row_bytes;
  const uint64_t num_rows = static_cast<uint64_t>(options.table_bytes / row_bytes);
  Mapping table(options.table_bytes, options.huge_pages);
  if (table.data() == nullptr) return 0;
  std::memset(table.data(), 3, options.table_bytes);  // fault every page in before timing
  const int64_t n = options.rows_per_batch;
  constexpr int64_t kStripes = 4096;
  std::unique_ptr<std::atomic<bool>[]> locks(new std::atomic<bool>[kStripes]);
  for (int64_t i = 0; i < kStripes; ++i) locks[i].store(false, std::memory_order_relaxed);
  // One batch of one thread: n random rows copied into its output.
  auto batch = [&](uint64_t* state, int64_t* ids, char* o) {
    for (int64_t i = 0; i < n; ++i) {
      // Multiply-shift maps 32 random bits onto [0, num_rows) without a division.
      ids[i] = static_cast<int64_t>(((SplitMix64Next(state) >> 32) * num_rows) >> 32);
    }
    const char* base = table.data();
    if (options.lock_per_row) {
      for (int64_t i = 0; i < n; ++i) {
        std::atomic<bool>& lock = locks[ids[i] & (kStripes - 1)];
        while (lock.exchange(true, std::memory_order_acquire)) {
        }
        std::memcpy(o + i * row_bytes, base + ids[i] * row_bytes, row_bytes);
        lock.store(false, std::memory_order_release);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(o + i * row_bytes, base + ids[i] * row_bytes, row_bytes);
      }
    }
    Clobber(o);
  };
  if (options.threads <= 1) {
    std::vector<int64_t> ids(n);
    std::unique_ptr<char[]> out(new char[n * row_bytes]);
    uint64_t state = 12345;
    return UnitsPerSec(timing, [&] {
      batch(&state, ids.data(), out.get());
      return static_cast<double>(n);
    });
  }
  // Several threads: each gathers batches until told to stop; rows are counted over a timed
  // window of the running threads.
  std::atomic<bool> stop{false};
  std::atomic<int64_t> rows{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < options.threads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int64_t> ids(n);
      std::unique_ptr<char[]> out(new char[n * row_bytes]);
      uint64_t state = 12345 + 7919 * static_cast<uint64_t>(t);
      while (!stop.load(std::memory_order_relaxed)) {
        batch(&state, ids.data(), out.get());
        rows.fetch_add(n, std::memory_order_relaxed);
      }
    });
  }
  const double rows_per_sec = CountPerSecOverWindow(timing, rows);
  stop.store(true);
  for (std::thread& t : threads) t.join();
  return rows_per_sec;
}

std::string GatherLimitName(const GatherOptions& options) {
  const int64_t mib = options.table_bytes >> 20;
  return absl::StrCat("limit.gather_", options.row_bytes, "B_rows_",
                      mib > 0 ? absl::StrCat(mib, "MiB") : absl::StrCat(options.table_bytes, "B"),
                      "_", options.threads, options.threads == 1 ? "thread" : "threads",
                      options.lock_per_row ? "_lock_per_row" : "",
                      options.huge_pages ? "_hugepages" : "");
}

std::string LoopbackLimitName(int streams) {
  return absl::StrCat("limit.loopback_tcp_", streams, streams == 1 ? "stream" : "streams");
}

double MeasureFirstTouchGBps(int64_t bytes) {
  void* p = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  (void)::madvise(p, static_cast<size_t>(bytes), MADV_HUGEPAGE);
  volatile char* c = static_cast<volatile char*>(p);
  const absl::Time start = absl::Now();
  for (int64_t i = 0; i < bytes; i += 4096) c[i] = 1;
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  ::munmap(p, static_cast<size_t>(bytes));
  return static_cast<double>(bytes) / seconds / 1e9;
}

absl::StatusOr<double> MeasureLoopbackTcpGBps(const LimitTiming& timing, int64_t write_bytes,
                                              int streams) {
  Fd listener(socket(AF_INET, SOCK_STREAM, 0));
  if (listener.get() < 0) return absl::UnavailableError(ErrnoText("socket"));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener.get(), std::max(streams, 1)) != 0 ||
      getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::UnavailableError(ErrnoText("bind/listen on 127.0.0.1:0"));
  }
  // The connections: a sender and its receiver each.
  std::vector<std::pair<Fd, Fd>> pairs;
  for (int s = 0; s < std::max(streams, 1); ++s) {
    Fd sender(socket(AF_INET, SOCK_STREAM, 0));
    if (sender.get() < 0) return absl::UnavailableError(ErrnoText("socket"));
    if (connect(sender.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return absl::UnavailableError(ErrnoText("connect to 127.0.0.1"));
    }
    Fd receiver(accept(listener.get(), nullptr, nullptr));
    if (receiver.get() < 0) return absl::UnavailableError(ErrnoText("accept"));
    const int one = 1;
    setsockopt(sender.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // as gRPC sets it
    pairs.emplace_back(std::move(sender), std::move(receiver));
  }

  std::atomic<bool> stop{false};
  std::atomic<int64_t> received{0};
  std::vector<std::thread> threads;
  for (auto& [sender_fd, receiver_fd] : pairs) {
    const int sender = sender_fd.get();
    const int receiver = receiver_fd.get();
    threads.emplace_back([&stop, sender, write_bytes] {
      std::vector<char> buf(write_bytes, 'x');
      while (!stop.load(std::memory_order_relaxed)) {
        int64_t off = 0;
        while (off < write_bytes) {
          const ssize_t w = write(sender, buf.data() + off, write_bytes - off);
          if (w <= 0) {
            if (w < 0 && errno == EINTR) continue;
            shutdown(sender, SHUT_WR);
            return;
          }
          off += w;
        }
      }
      shutdown(sender, SHUT_WR);
    });
    threads.emplace_back([&received, receiver, write_bytes] {
      std::vector<char> buf(write_bytes);
      for (;;) {
        const ssize_t r = read(receiver, buf.data(), buf.size());
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return;  // EOF after the sender's shutdown, or an error
        received.fetch_add(r, std::memory_order_relaxed);
      }
    });
  }
  const double bytes_per_sec = CountPerSecOverWindow(timing, received);
  stop.store(true);
  for (std::thread& t : threads) t.join();
  return bytes_per_sec / 1e9;
}

std::string TransparentHugePageMode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(f, line)) return "unknown";
  const size_t open = line.find('[');
  const size_t close = line.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return "unknown";
  return line.substr(open + 1, close - open - 1);
}

int AvailableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return static_cast<int>(std::thread::hardware_concurrency());
  }
  return CPU_COUNT(&set);
}

}  // namespace pstrain

namespace pstrain {

absl::StatusOr<double> MeasureDiskRandomReadsPerSec(const LimitTiming& timing,
                                                    const std::string& dir, int64_t file_bytes,
                                                    int queue_depth) {
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = std::max<int64_t>(1, file_bytes / kBlock);
  const std::string path = dir + "/disk_limit.bin";
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      return absl::UnavailableError(absl::StrCat("disk limit: open ", path, ": ", strerror(errno)));
    }
    std::vector<char> chunk(size_t{1} << 20, 'x');
    for (int64_t written = 0; written < blocks * kBlock;) {
      const ssize_t n = ::write(fd, chunk.data(),
                                static_cast<size_t>(std::min<int64_t>(chunk.size(),
                                                                      blocks * kBlock - written)));
      if (n <= 0) {
        ::close(fd);
        ::unlink(path.c_str());
        return absl::UnavailableError(absl::StrCat("disk limit: write ", path, ": ", strerror(errno)));
      }
      written += n;
    }
    ::fsync(fd);
    ::close(fd);
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    ::unlink(path.c_str());
    return absl::UnavailableError(
        absl::StrCat("disk limit: open ", path, " with O_DIRECT: ", strerror(err)));
  }
  std::atomic<bool> timed{false}, stop{false};
  std::atomic<int64_t> reads{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < queue_depth; ++t) {
    threads.emplace_back([&, t] {
      void* buffer = nullptr;
      if (posix_memalign(&buffer, kBlock, kBlock) != 0) {
        failed.store(ENOMEM);
        return;
      }
      std::mt19937_64 rng(0x5eed + t);
      int64_t mine = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const int64_t block = static_cast<int64_t>(rng() % static_cast<uint64_t>(blocks));
        if (::pread(fd, buffer, kBlock, block * kBlock) != kBlock) {
          failed.store(errno == 0 ? EIO : errno);
          break;
        }
        if (timed.load(std::memory_order_relaxed)) ++mine;
      }
      reads.fetch_add(mine);
      free(buffer);
    });
  }
  absl::SleepFor(timing.warmup);
  timed.store(true);
  const absl::Time start = absl::Now();
  absl::SleepFor(timing.duration);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  stop.store(true);
  for (std::thread& t : threads) t.join();
  ::close(fd);
  ::unlink(path.c_str());
  if (failed.load() != 0) {
    return absl::UnavailableError(
        absl::StrCat("disk limit: pread ", path, ": ", strerror(failed.load())));
  }
  return static_cast<double>(reads.load()) / seconds;
}

}  // namespace pstrain
