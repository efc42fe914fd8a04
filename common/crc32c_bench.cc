// CRC-32C speed, hardware and portable paths, over buffers from cache-sized to memory-sized.
// `bazel run -c opt //common:crc32c_bench`. Prints one JSON object per line:
//   {"impl": "hardware", "bytes": 65536, "gb_per_s": 21.3}
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/crc32c.h"

namespace pstrain {
namespace {

using Impl = uint32_t (*)(uint32_t, const char*, size_t);

// GB/s (1e9 bytes) over repeated passes of `bytes` bytes for about `seconds`, after a warm-up pass.
double Measure(Impl impl, const std::vector<char>& buffer, size_t bytes, double seconds) {
  volatile uint32_t sink = impl(0, buffer.data(), bytes);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int64_t total = 0;
  double elapsed = 0;
  do {
    for (int i = 0; i < 16; ++i) {
      sink = impl(sink, buffer.data(), bytes);
      total += static_cast<int64_t>(bytes);
    }
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  (void)sink;
  return static_cast<double>(total) / elapsed / 1e9;
}

void Run() {
  const size_t kMax = size_t{256} << 20;
  std::vector<char> buffer(kMax);
  uint32_t x = 1;
  for (char& c : buffer) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  struct Named {
    const char* name;
    Impl impl;
  };
  std::vector<Named> impls = {{"portable", &crc32c::internal::ExtendPortable}};
  if (crc32c::IsHardwareAccelerated()) {
    impls.insert(impls.begin(), {"hardware", &crc32c::internal::ExtendHardware});
  }
  for (const Named& named : impls) {
    for (size_t bytes : {size_t{64}, size_t{1} << 10, size_t{16} << 10, size_t{256} << 10,
                         size_t{4} << 20, kMax}) {
      const double gbps = Measure(named.impl, buffer, bytes, /*seconds=*/0.5);
      std::printf("{\"impl\": \"%s\", \"bytes\": %zu, \"gb_per_s\": %.2f}\n", named.name, bytes,
                  gbps);
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace pstrain

int main() {
  pstrain::Run();
  return 0;
}
