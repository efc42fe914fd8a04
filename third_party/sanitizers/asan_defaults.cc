// Defaults built into every binary of the asan config (.bazelrc links this library into each
// through --custom_malloc), so that the tasks a test starts, and a user's ASan build of a ps, run
// as the suite does; ASAN_OPTIONS, LSAN_OPTIONS and UBSAN_OPTIONS still override them. The leak
// suppressions are lsan_suppressions.cc's (a dependency), shared with the fuzz build.
extern "C" {

// A refused huge allocation returns null, so the code's own RESOURCE_EXHAUSTED path runs instead
// of ASan aborting the task.
const char* __asan_default_options() { return "allocator_may_return_null=1:detect_leaks=1"; }

const char* __ubsan_default_options() { return "print_stacktrace=1:halt_on_error=1"; }

}  // extern "C"
