// The suite's side of a fuzz target: runs every seed (FuzzSeeds) and every file under the paths
// given (saved crash inputs, a corpus) through LLVMFuzzerTestOneInput once. A crash or a sanitizer
// report fails the test; so does a target without seeds, and one whose peak memory passes the
// limit tools/fuzz.sh gives libFuzzer (an out-of-memory finding kept as a regression fails here).
#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

// tools/fuzz.sh's -rss_limit_mb.
constexpr long kRssLimitMb = 2048;

long PeakRssMb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024;  // kilobytes on Linux
}

int Run(const std::string& input) {
  return LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

}  // namespace

int main(int argc, char** argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  const std::vector<std::string> seeds = pstrain::FuzzSeeds();
  if (seeds.empty()) {
    std::fprintf(stderr, "no seeds\n");
    return 1;
  }
  for (const std::string& seed : seeds) Run(seed);
  size_t files = 0;
  for (int i = 1; i < argc; ++i) {
    std::error_code error;
    std::vector<std::filesystem::path> paths;
    if (std::filesystem::is_directory(argv[i], error)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(argv[i], error)) {
        if (entry.is_regular_file()) paths.push_back(entry.path());
      }
    } else if (std::filesystem::exists(argv[i], error)) {
      paths.push_back(argv[i]);
    }
    for (const auto& path : paths) {
      std::ifstream in(path, std::ios::binary);
      std::ostringstream bytes;
      bytes << in.rdbuf();
      std::fprintf(stderr, "replaying %s\n", path.c_str());
      Run(bytes.str());
      ++files;
    }
  }
  std::printf("replayed %zu seeds and %zu saved inputs, peak memory %ld MiB\n", seeds.size(),
              files, PeakRssMb());
  if (PeakRssMb() > kRssLimitMb) {
    std::fprintf(stderr, "peak memory %ld MiB is over the fuzzers' limit of %ld MiB\n",
                 PeakRssMb(), kRssLimitMb);
    return 1;
  }
  return 0;
}
