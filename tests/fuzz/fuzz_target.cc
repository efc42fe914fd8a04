#include "tests/fuzz/fuzz_target.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace pstrain {

const std::string& FuzzDir() {
  static const std::string* dir = [] {
    // The test's own directory under Bazel; else memory (a campaign writes files per input).
    const char* base = std::getenv("TEST_TMPDIR");
    std::error_code error;
    const std::string root = base != nullptr && *base != '\0'                     ? base
                             : std::filesystem::is_directory("/dev/shm", error) ? "/dev/shm"
                                                                                 : "/tmp";
    std::string pattern = root + "/pstrain_fuzz_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(FuzzDir(), ignored);
    });
    return new std::string(pattern);
  }();
  return *dir;
}

void EmptyFuzzDir() {
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(FuzzDir(), ignored)) {
    std::filesystem::remove_all(entry.path(), ignored);
  }
}

std::string WriteFuzzFile(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = FuzzDir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

bool FuzzVerbose() {
  static const bool verbose = std::getenv("PSTRAIN_FUZZ_VERBOSE") != nullptr;
  return verbose;
}

uint8_t FuzzInput::TakeByte() {
  if (size_ == 0) return 0;
  --size_;
  return *data_++;
}

uint16_t FuzzInput::TakeU16() {
  const uint16_t lo = TakeByte();
  return static_cast<uint16_t>(lo | (TakeByte() << 8));
}

std::string FuzzInput::TakeBytes(size_t n) {
  n = std::min(n, size_);
  std::string s(reinterpret_cast<const char*>(data_), n);
  data_ += n;
  size_ -= n;
  return s;
}

std::string FuzzInput::TakeRest() { return TakeBytes(size_); }

FuzzInputBuilder& FuzzInputBuilder::Byte(uint8_t b) {
  out_.push_back(static_cast<char>(b));
  return *this;
}

FuzzInputBuilder& FuzzInputBuilder::U16(uint16_t v) {
  Byte(v & 0xff);
  return Byte(v >> 8);
}

FuzzInputBuilder& FuzzInputBuilder::Bytes(const std::string& s) {
  out_ += s;
  return *this;
}

void ServeFuzzCalls(FuzzInput* in, int method_count, int max_calls, const FuzzServe& serve) {
  std::string reply;
  for (int calls = 0; !in->empty() && calls < max_calls; ++calls) {
    const int method = in->TakeByte() % (method_count + 1);
    const size_t cut = in->TakeByte();
    const std::string request = in->TakeBytes(in->TakeU16());
    const size_t at = std::min(cut, request.size());
    const std::vector<absl::string_view> pieces = {absl::string_view(request).substr(0, at),
                                                   absl::string_view(request).substr(at)};
    bool replied = false;
    const absl::Status status = serve(method, pieces, [&](size_t bytes) {
      if (replied) __builtin_trap();  // at most one reply
      replied = true;
      reply.assign(bytes, '\0');
      return reply.data();
    });
    if (FuzzVerbose()) {
      std::fprintf(stderr, "call %d: method %d: %s\n", calls, method, status.ToString().c_str());
    }
  }
}

}  // namespace pstrain

// libFuzzer calls it once before fuzzing. PSTRAIN_FUZZ_WRITE_SEEDS=DIR: write the target's seeds
// into DIR (tools/fuzz.sh makes the starting corpus this way) and exit.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const char* dir = std::getenv("PSTRAIN_FUZZ_WRITE_SEEDS");
  if (dir == nullptr || *dir == '\0') return 0;
  const std::vector<std::string> seeds = pstrain::FuzzSeeds();
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream out(std::string(dir) + "/seed-" + std::to_string(i), std::ios::binary);
    out << seeds[i];
  }
  std::printf("wrote %zu seeds to %s\n", seeds.size(), dir);
  std::exit(0);
}
