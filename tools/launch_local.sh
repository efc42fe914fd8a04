#!/usr/bin/env bash
# Starts a whole local multi-process cluster on picked ports (each ps and worker its own process),
# runs the coordinator against it, and stops every process it started when the job ends or when
# this script is interrupted.
#
#   tools/launch_local.sh [--workers=N] [--ps=M] [--tls] [--token] [-- coordinator flags...]
#
# --tls: every task and the coordinator speak mutual TLS, with a CA and certificate made for the
# run by tools/make_certs.sh; --token: every call carries a random shared token (--auth_token_file).
# Tasks listen on localhost only. The spec is written to $PSTRAIN_RUN_DIR/cluster.json (default: a
# new temp dir), and each task's log to $PSTRAIN_RUN_DIR/<task>.log.
set -euo pipefail
cd "$(dirname "$0")/.."

workers=2
ps=2
coordinator_args=()
tls=0
token=0
while (( $# > 0 )); do
  case "$1" in
    --workers=*) workers="${1#*=}" ;;
    --ps=*) ps="${1#*=}" ;;
    --tls) tls=1 ;;
    --token) token=1 ;;
    --) shift; coordinator_args=("$@"); break ;;
    *) echo "launch_local: unknown argument '$1' (expected --workers=N, --ps=M, --tls, --token, -- coordinator flags)" >&2; exit 2 ;;
  esac
  shift
done
for v in "$workers" "$ps"; do
  if ! [[ "$v" =~ ^[1-9][0-9]*$ ]]; then
    echo "launch_local: --workers and --ps take whole numbers >= 1, got '$v'" >&2; exit 2
  fi
done

bazel build //ps:ps_server //trainer:worker_server //trainer:coordinator >/dev/null
bin="$(bazel info bazel-bin 2>/dev/null)"
run_dir="${PSTRAIN_RUN_DIR:-$(mktemp -d -t pstrain.XXXXXX)}"
mkdir -p "$run_dir"

# Pick free ports: bind port 0 and read back what the kernel chose, all at once so none repeat.
read -r -a ports <<<"$(python3 - "$((workers + ps + 1))" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("localhost", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
)"
join() { local IFS=,; echo "$*"; }
ps_addrs=(); worker_addrs=()
for ((i = 0; i < ps; i++)); do ps_addrs+=("\"localhost:${ports[i]}\""); done
for ((i = 0; i < workers; i++)); do worker_addrs+=("\"localhost:${ports[ps + i]}\""); done
spec="$run_dir/cluster.json"
cat >"$spec" <<JSON
{"cluster": {"chief": ["localhost:${ports[ps + workers]}"],
             "ps": [$(join "${ps_addrs[@]}")],
             "worker": [$(join "${worker_addrs[@]}")]}}
JSON
echo "launch_local: cluster spec $spec; logs in $run_dir"

# Flags every process gets: where it listens, and its transport security.
common=()
if (( tls )); then
  bash tools/make_certs.sh "$run_dir/certs" >/dev/null
  common+=(--tls_cert="$run_dir/certs/task.pem" --tls_key="$run_dir/certs/task.key"
           --tls_ca="$run_dir/certs/ca.pem")
fi
if (( token )); then
  (umask 077 && openssl rand -hex 32 >"$run_dir/token")
  common+=(--auth_token_file="$run_dir/token")
fi

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for ((i = 0; i < ps; i++)); do
  "$bin/ps/ps_server" --cluster_spec="$spec" --task="ps:$i" --bind_host=localhost \
    ${common[@]+"${common[@]}"} >"$run_dir/ps$i.log" 2>&1 &
  pids+=("$!")
done
for ((i = 0; i < workers; i++)); do
  "$bin/trainer/worker_server" --cluster_spec="$spec" --task="worker:$i" --bind_host=localhost \
    ${common[@]+"${common[@]}"} >"$run_dir/worker$i.log" 2>&1 &
  pids+=("$!")
done

set +e
"$bin/trainer/coordinator" --cluster_spec="$spec" ${common[@]+"${common[@]}"} \
  ${coordinator_args[@]+"${coordinator_args[@]}"}
rc=$?
set -e
exit "$rc"
