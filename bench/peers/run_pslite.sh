#!/usr/bin/env bash
# Builds and runs ps_bench's peer, ps-lite (bench/peers/pslite_bench.cc), outside Bazel and outside
# the product: ps-lite is built from its own Makefile on Debian's libzmq3-dev and protobuf, in a
# checkout you give (e.g. from `git clone https://github.com/dmlc/ps-lite`; the figures in
# docs/benchmarks.md are from commit 15b8adf). Prints the driver's JSON lines.
#
#   bash bench/peers/run_pslite.sh --pslite=/tmp/ps-lite [--prefetch=1] [--seconds=2]
#        [--tuned_malloc=1] [--in_flight=1,4]
#
# --tuned_malloc=1 (the default) gives the three processes the glibc malloc thresholds ps_bench
# sets for itself (TuneMallocForLargeMessages: mmap threshold 32 MiB, trim threshold 256 MiB),
# through GLIBC_TUNABLES, so neither side pays fresh mmaps for megabyte buffers; 0 runs it as
# ps-lite ships.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pslite="" prefetch=0 seconds=2 tuned=1 in_flight=1,4
for arg in "$@"; do
  case "$arg" in
    --pslite=*) pslite="${arg#--pslite=}" ;;
    --prefetch=*) prefetch="${arg#--prefetch=}" ;;
    --seconds=*) seconds="${arg#--seconds=}" ;;
    --tuned_malloc=*) tuned="${arg#--tuned_malloc=}" ;;
    --in_flight=*) in_flight="${arg#--in_flight=}" ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) echo "run_pslite: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
[[ -n "$pslite" && -f "$pslite/include/ps/ps.h" ]] || {
  echo "run_pslite: --pslite=DIR must be a ps-lite checkout" >&2; exit 2; }
[[ -f /usr/include/zmq.h ]] || { echo "run_pslite: needs libzmq3-dev (apt-get install libzmq3-dev)" >&2; exit 2; }

if [[ ! -f "$pslite/build/libps.a" ]]; then
  (cd "$pslite" && make -j2 ps DEPS_PATH=/usr PROTOC=/usr/bin/protoc >&2)
fi
bin="$pslite/build/pstrain_peer_bench"
if [[ ! -x "$bin" || "$here/pslite_bench.cc" -nt "$bin" || "$0" -nt "$bin" ]]; then
  # -fno-math-errno as .bazelrc builds ours: a sqrt the loops can vectorize.
  g++ -std=c++14 -O3 -march=native -fno-math-errno -I"$pslite/include" "$here/pslite_bench.cc" \
      "$pslite/build/libps.a" -lzmq -lprotobuf -pthread -o "$bin"
fi

export DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 DMLC_PS_ROOT_URI=127.0.0.1
export DMLC_PS_ROOT_PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
export PSLITE_BENCH_PREFETCH="$prefetch" PSLITE_BENCH_SECONDS="$seconds" PSLITE_BENCH_IN_FLIGHT="$in_flight"
if [[ "$tuned" == 1 ]]; then
  export GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456
fi
DMLC_ROLE=scheduler "$bin" > /dev/null &
scheduler=$!
DMLC_ROLE=server "$bin" > /dev/null &
server=$!
DMLC_ROLE=worker "$bin"
wait "$server" "$scheduler"
