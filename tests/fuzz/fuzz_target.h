// What every fuzz target of tests/fuzz/ defines: libFuzzer's entry point, and its seed inputs made
// from valid messages and files (the corpus a campaign starts from; the suite replays them too).
//
// A target is built two ways (tests/fuzz/fuzz.bzl): with libFuzzer under --config=fuzz
// (tools/fuzz.sh), and, in the normal suite, with replay_main.cc, which runs every seed and every
// saved regression input (tests/fuzz/regressions/<target>/) once.
#ifndef PSTRAIN_TESTS_FUZZ_FUZZ_TARGET_H_
#define PSTRAIN_TESTS_FUZZ_FUZZ_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace pstrain {

// The target's seed inputs.
std::vector<std::string> FuzzSeeds();

// A directory of this process's own (made once, under $TEST_TMPDIR or /tmp), for targets whose
// code reads or writes files; EmptyFuzzDir() empties it between inputs.
const std::string& FuzzDir();
void EmptyFuzzDir();

// Whether PSTRAIN_FUZZ_VERBOSE is set: targets then print what each step of an input did (for
// reading a crash input or checking that seeds do what they should).
bool FuzzVerbose();

// Writes `bytes` to FuzzDir()/`name` and returns the path.
std::string WriteFuzzFile(const std::string& name, const uint8_t* data, size_t size);

// Reads an input's bytes from the front: each Take* returns 0 / empty once the input runs out.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return size_ == 0; }
  uint8_t TakeByte();
  uint16_t TakeU16();
  std::string TakeBytes(size_t n);
  std::string TakeRest();

 private:
  const uint8_t* data_;
  size_t size_;
};

// A service's handler on one call (common/raw_service.h's RawHandler): method number, the
// request's pieces, where the reply goes.
using FuzzServe = std::function<absl::Status(int method, const std::vector<absl::string_view>& request,
                                             const std::function<char*(size_t)>& reply)>;

// Serves up to `max_calls` calls read from `in`, each: a byte (the method number, modulo
// `method_count` + 1, so one past the last is tried too), a byte (where the request is cut in two
// pieces, as gRPC's slices may cut it), and a u16-length request. Traps if a handler replies twice.
void ServeFuzzCalls(FuzzInput* in, int method_count, int max_calls, const FuzzServe& serve);

// Builds inputs in FuzzInput's format (for seeds).
class FuzzInputBuilder {
 public:
  FuzzInputBuilder& Byte(uint8_t b);
  FuzzInputBuilder& U16(uint16_t v);
  FuzzInputBuilder& Bytes(const std::string& s);
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_FUZZ_FUZZ_TARGET_H_
