#!/usr/bin/env bash
# Runs fuzz campaigns: builds every target of tests/fuzz/ with libFuzzer (clang-14, ASan, UBSan)
# and runs each for a set time from its seeds and its saved corpus.
#
#   bash tools/fuzz.sh                      # every target, 30 s each (what CI runs)
#   bash tools/fuzz.sh --seconds=3600 ps_service_fuzz wire_format_fuzz   # a long campaign
#
# Work goes to $PSTRAIN_FUZZ_DIR (default /tmp/pstrain-fuzz): corpus/<target>/ grows from run to
# run; a crash leaves its input in crashes/<target>/ and fails the run. To keep a crash as a
# regression test, copy its input into tests/fuzz/regressions/<target>/ (the suite replays it).
# Prints one line per target: its executions, corpus size and crashes; exit 1 if any crashed.
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=30
targets=()
for arg in "$@"; do
  case "$arg" in
    --seconds=*) seconds="${arg#--seconds=}" ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) targets+=("$arg") ;;
  esac
done
if (( ${#targets[@]} == 0 )); then
  mapfile -t targets < <(sed -n 's/^ *name = "\(.*_fuzz\)",$/\1/p' tests/fuzz/BUILD.bazel)
fi

work="${PSTRAIN_FUZZ_DIR:-/tmp/pstrain-fuzz}"
# Its own Bazel output tree (clang for these, gcc for everything else), one per checkout.
output_base="${PSTRAIN_FUZZ_OUTPUT_BASE:-$HOME/.cache/pstrain-fuzz-bazel/$(pwd | md5sum | cut -c1-12)}"
bazel_fuzz=(bazel --output_base="$output_base")

labels=()
for t in "${targets[@]}"; do labels+=("//tests/fuzz:$t"); done
echo "fuzz: building ${#targets[@]} targets with clang-14 + libFuzzer"
if ! "${bazel_fuzz[@]}" build --config=fuzz --symlink_prefix=/ "${labels[@]}"; then
  echo "fuzz: build failed" >&2
  exit 2
fi
bin="$("${bazel_fuzz[@]}" info --config=fuzz bazel-bin 2>/dev/null)"

failed=0
for t in "${targets[@]}"; do
  corpus="$work/corpus/$t"
  seeds="$work/seeds/$t"
  crashes="$work/crashes/$t"
  mkdir -p "$corpus" "$seeds" "$crashes"
  # The target writes its seeds (pstrain::FuzzSeeds) and exits; -runs=0 in case it didn't.
  PSTRAIN_FUZZ_WRITE_SEEDS="$seeds" timeout 300 "$bin/tests/fuzz/$t" -runs=0 >/dev/null 2>&1
  if [[ -z "$(ls -A "$seeds")" ]]; then
    echo "fuzz: $t wrote no seeds" >&2
    failed=1
    continue
  fi
  log="$work/$t.log"
  started="$work/.started-$t"
  touch "$started"
  # -rss_limit_mb: a target using more memory than this is a finding (the targets give their ps a
  # 64 MiB budget); -timeout: an input taking longer is one too.
  ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
    "$bin/tests/fuzz/$t" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=30 \
    -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" "$seeds" \
    -use_value_profile=1 >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  units=$(ls "$corpus" | wc -l)
  # This run's findings only (older ones stay until removed); libFuzzer also leaves inputs slower
  # than 10 s there (slow-unit-*): noted, not failures.
  found=$(find "$crashes" -type f -newer "$started" ! -name 'slow-unit-*' | wc -l)
  printf '{"target": "%s", "seconds": %s, "executions": %s, "corpus": %s, "crashes": %s, "rc": %s}\n' \
    "$t" "$seconds" "${execs:-0}" "$units" "$found" "$rc"
  if (( rc != 0 || found != 0 )); then
    failed=1
    echo "fuzz: $t failed; its log: $log; inputs: $crashes" >&2
    grep -m1 -A12 "ERROR: \|==ERROR\|runtime error\|deadly signal" "$log" >&2
  fi
done
exit $failed
