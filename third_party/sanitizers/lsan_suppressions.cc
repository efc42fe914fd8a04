// LeakSanitizer's suppressions, for every leak-checking build: the asan config (through
// asan_defaults) and the fuzz build (tests/fuzz/fuzz.bzl links it into each fuzzer).
extern "C" {

// c-ares (gRPC's DNS resolver) keeps a few bytes per resolver until exit, which a program that
// starts servers or channels would otherwise report as a leak.
const char* __lsan_default_suppressions() { return "leak:libcares.so\n"; }

}  // extern "C"
