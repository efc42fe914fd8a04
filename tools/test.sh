#!/usr/bin/env bash
# Runs the tests (installing what they need first) and ends with one line "N passed, N failed"
# counted from the test cases' results. Exit code non-zero on any failure.
#
#   bash tools/test.sh                 # what CI runs: every stage below, in order
#   bash tools/test.sh --stage=suite   # one stage (suite, asan, tsan, threadsafety or fuzz); may repeat
#   bash tools/test.sh --config=asan //ps/...   # anything else: `bazel test` with these arguments
#
# Stages: suite: `bazel test //...`; asan: the same under ASan + UBSan (--config=asan), but for the
# Python module's tests (tagged no_asan: Debian's python3 can't load an ASan-built extension);
# tsan: the ps, collective, worker, coordinator and cluster tests under ThreadSanitizer (--config=tsan);
# threadsafety: every target built by clang-14 with its thread-safety analysis as errors
# (--config=threadsafety: the ABSL_GUARDED_BY and ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations checked),
# counted as one test case; fuzz: every fuzz target for PSTRAIN_FUZZ_SECONDS (default 20) from its
# seeds (tools/fuzz.sh), counted as one test case per target.
set -uo pipefail
cd "$(dirname "$0")/.."

# The TSan subset: the concurrent parts. (The model-training tests are left out: under TSan they
# take many times their normal time and test the same locks as these.)
TSAN_TARGETS=(//ps/... //collective/... //worker/... //coordinator/... //common/... //third_party/sanitizers/...
              //tests:coordinator_test //tests:ps_cluster_test //tests:checkpoint_test
              //tests:dynamic_table_test)

stages=()
bazel_args=()
for arg in "$@"; do
  case "$arg" in
    --stage=*) stages+=("${arg#--stage=}") ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) bazel_args+=("$arg") ;;
  esac
done
if (( ${#bazel_args[@]} > 0 && ${#stages[@]} == 0 )); then
  stages=(custom)
elif (( ${#stages[@]} == 0 )); then
  stages=(suite asan tsan threadsafety fuzz)
fi

bash tools/setup.sh

total_passed=0
total_failed=0
failed_stages=()

# bazel test "$@", then its test cases counted into the totals.
run_bazel_test() {
  local name="$1"
  shift
  local log="/tmp/pstrain-test-$name.log"
  local flags=()
  for a in "$@"; do [[ "$a" == --* ]] && flags+=("$a"); done
  echo "test: [$name] bazel test $*"
  local started=$SECONDS
  bazel test "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local counts passed failed
  counts=$(python3 tools/count_test_results.py "$(bazel info "${flags[@]}" bazel-testlogs 2>/dev/null)" "$log")
  read -r passed failed <<<"$counts"
  if (( rc != 0 && failed == 0 )); then failed=1; fi  # e.g. a build error: no result file says so
  echo "test: [$name] ${passed} passed, ${failed} failed in $((SECONDS - started)) s"
  total_passed=$((total_passed + passed))
  total_failed=$((total_failed + failed))
  if (( rc != 0 || failed != 0 )); then failed_stages+=("$name"); fi
}

run_fuzz() {
  local log=/tmp/pstrain-test-fuzz.log
  local started=$SECONDS
  echo "test: [fuzz] tools/fuzz.sh --seconds=${PSTRAIN_FUZZ_SECONDS:-20}"
  PSTRAIN_FUZZ_DIR="${PSTRAIN_FUZZ_DIR:-/tmp/pstrain-test-fuzz}" \
    bash tools/fuzz.sh --seconds="${PSTRAIN_FUZZ_SECONDS:-20}" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local passed failed
  passed=$(grep -c '"crashes": 0, "rc": 0}' "$log")
  failed=$(grep -c '^{"target"' "$log")
  failed=$((failed - passed))
  if (( rc != 0 && failed == 0 )); then failed=1; fi
  echo "test: [fuzz] ${passed} targets clean, ${failed} failed in $((SECONDS - started)) s"
  total_passed=$((total_passed + passed))
  total_failed=$((total_failed + failed))
  if (( rc != 0 || failed != 0 )); then failed_stages+=(fuzz); fi
}

# Every target, built by clang with -Wthread-safety -Werror=thread-safety, in its own output tree
# (as fuzzing: changing the compiler would rebuild the normal tree). The patterns name the tracked
# packages' top folders, not `//...`: that would walk the bazel-* links into the normal tree.
run_threadsafety() {
  local log=/tmp/pstrain-test-threadsafety.log
  local started=$SECONDS
  local output_base="${PSTRAIN_TS_OUTPUT_BASE:-$HOME/.cache/pstrain-threadsafety-bazel/$(pwd | md5sum | cut -c1-12)}"
  local patterns=(//:all)
  local top
  for top in $(git ls-files '*/BUILD.bazel' | cut -d/ -f1 | sort -u); do patterns+=("//$top/..."); done
  echo "test: [threadsafety] clang-14 -Wthread-safety -Werror=thread-safety over ${#patterns[@]} patterns"
  bazel --output_base="$output_base" build --config=threadsafety --symlink_prefix=/ --keep_going \
    -- "${patterns[@]}" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  # The CUDA build's host files (this build is CPU-only: nvcc's host compiler is gcc), where the
  # toolkit is installed: the same analysis, syntax only.
  if [[ -f /usr/local/cuda/include/nccl.h ]]; then
    local bin f
    bin="$(bazel --output_base="$output_base" info --config=threadsafety bazel-bin 2>/dev/null)"
    for f in worker/device/cuda_device.cc worker/device/replicas.cc collective/nccl_group.cc; do
      echo "test: [threadsafety] $f (CUDA host code, -fsyntax-only)"
      clang++-14 -std=c++17 -fsyntax-only -Wthread-safety -Werror=thread-safety -I. -I"$bin" \
        -I/usr/local/cuda/include "$f" 2>&1 | tee -a "$log"
      if (( PIPESTATUS[0] != 0 )); then rc=1; fi
    done
  fi
  local findings passed=0 failed=0
  findings=$(grep -c 'error: .*\[-Werror,-Wthread-safety' "$log")
  if (( rc == 0 )); then passed=1; else failed=$(( findings > 0 ? findings : 1 )); fi
  echo "test: [threadsafety] ${findings} findings, build rc ${rc}, in $((SECONDS - started)) s"
  total_passed=$((total_passed + passed))
  total_failed=$((total_failed + failed))
  if (( rc != 0 )); then failed_stages+=(threadsafety); fi
}

for stage in "${stages[@]}"; do
  case "$stage" in
    suite) run_bazel_test suite //... ;;
    # The Python module's tests (tag no_asan) are left out: /usr/bin/python3 isn't built with ASan,
    # so it can't load an extension that is.
    asan) run_bazel_test asan --config=asan --test_tag_filters=-no_asan //... ;;
    tsan) run_bazel_test tsan --config=tsan "${TSAN_TARGETS[@]}" ;;
    threadsafety) run_threadsafety ;;
    fuzz) run_fuzz ;;
    custom) run_bazel_test custom "${bazel_args[@]}" ;;
    *) echo "test: unknown stage '$stage' (suite, asan, tsan, threadsafety, fuzz)" >&2; exit 2 ;;
  esac
done

if (( ${#failed_stages[@]} > 0 )); then echo "test: failed stages: ${failed_stages[*]}"; fi
echo "${total_passed} passed, ${total_failed} failed"
if (( ${#failed_stages[@]} > 0 || total_failed != 0 )); then exit 1; fi
exit 0
