"""pstrain_fuzz_target: one fuzz target, built for libFuzzer and replayed in the suite."""

def pstrain_fuzz_target(name, srcs, deps = [], data = [], size = "small"):
    """Defines `name` (the fuzzer: libFuzzer under --config=fuzz, else a replayer) and
    `name`_test (the suite's replay of its seeds and of regressions/`name`/).

    Args:
      name: the target, e.g. "ps_service_fuzz".
      srcs: its source, defining LLVMFuzzerTestOneInput and pstrain::FuzzSeeds.
      deps: what it drives.
      data: files its seeds are made from.
      size: the replay test's size.
    """
    native.cc_library(
        name = name + "_lib",
        testonly = 1,
        srcs = srcs,
        deps = deps + ["//tests/fuzz:fuzz_target"],
        alwayslink = 1,
    )
    native.cc_binary(
        name = name,
        testonly = 1,
        deps = [":" + name + "_lib"] + select({
            "//:fuzzing": ["//third_party/sanitizers:lsan_suppressions"],
            "//conditions:default": ["//tests/fuzz:replay_main"],
        }),
        data = data,
        linkopts = select({
            "//:fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
    )
    regressions = native.glob(["regressions/" + name + "/*"])
    native.cc_test(
        name = name + "_test",
        size = size,
        deps = [":" + name + "_lib", "//tests/fuzz:replay_main"],
        data = data + regressions,
        args = ["tests/fuzz/regressions/" + name] if regressions else [],
    )
