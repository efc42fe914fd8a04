"""cuda_library: .cu files compiled by the local nvcc into a cc_library (see cuda_configure.bzl)."""

load("@local_cuda//:defs.bzl", "CUDA_ENABLED", "NVCC", "NVCC_FLAGS")

def cuda_library(name, srcs, hdrs = [], deps = [], nvcc_flags = [], **kwargs):
    """Compiles each .cu in `srcs` with nvcc and wraps the objects in cc_library `name`.

    nvcc runs in a genrule: -std=c++17 -O2 with the gencode flags @local_cuda chose, the
    toolchain's C++ compiler as host compiler (-ccbin), host code -fPIC, nvcc warnings as errors. Each .cu may include
    `hdrs` (by their workspace paths) and the CUDA toolkit's headers (CUB included), but nothing
    from `deps`: those are linked, not compiled in. The cc_library links @local_cuda//:cuda.

    Without CUDA the macro defines nothing: depend on it through if_cuda().

    Args:
      name: the cc_library.
      srcs: .cu files.
      hdrs: headers the .cu files include; also the library's public headers.
      deps: more cc deps of the library.
      nvcc_flags: extra nvcc flags.
      **kwargs: passed to the cc_library (visibility, tags, ...).
    """
    if not CUDA_ENABLED:
        return
    objs = []
    for src in srcs:
        if not src.endswith(".cu"):
            fail("cuda_library %s: %s is not a .cu file" % (name, src))
        stem = name + "_" + src[:-len(".cu")].replace("/", "_")

        # One object, compiled -fPIC: Bazel links a plain .o both into shared libraries (tests
        # link dynamically) and into static binaries. (A second copy named .pic.o would be
        # linked beside it: duplicate symbols.)
        obj = stem + ".o"
        native.genrule(
            name = stem + "_nvcc",
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = " ".join([
                NVCC,
                "-ccbin $(CC)",
                "-std=c++17",
                "-O2",
                "-Xcompiler -fPIC",
                "-Werror all-warnings",
                "-I.",
                "-I$(GENDIR)",
            ] + NVCC_FLAGS + nvcc_flags + [
                "-c $(location %s)" % src,
                "-o $(location %s)" % obj,
            ]),
            toolchains = ["@bazel_tools//tools/cpp:current_cc_toolchain"],
            message = "nvcc " + src,
            tags = kwargs.get("tags", []),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda"],
        **kwargs
    )

def cuda_cc_binary(name, deps = [], **kwargs):
    """A cc_binary that exists only in a build with CUDA (it links @local_cuda//:cuda).

    For programs that call the CUDA runtime themselves, such as the standalone kernel check:
    defining them only where CUDA is found keeps `bazel build //...` green without it, and
    compiles them (so they cannot rot) wherever it is.
    """
    if not CUDA_ENABLED:
        return
    native.cc_binary(
        name = name,
        deps = deps + ["@local_cuda//:cuda"],
        **kwargs
    )
