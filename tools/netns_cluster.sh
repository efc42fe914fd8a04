#!/usr/bin/env bash
# A training job across "hosts" on one machine: each task in its own Linux network namespace with
# its own address (10.77.0.0/24), joined by veth pairs to a bridge in a hub namespace, so every RPC
# crosses a real (virtual) network between addresses, not loopback. Needs root and iproute2.
#
#   sudo bash tools/netns_cluster.sh up               # namespaces, links, addresses
#   sudo bash tools/netns_cluster.sh run DIR -- ARGS   # ps x2, worker x2 and the chief in them; ARGS go
#                                                      # to the chief (--model=..., --data=...)
#   sudo bash tools/netns_cluster.sh down             # removes everything it made
#
# `run` writes DIR/cluster.json, starts ps:0 (10.77.0.11), ps:1 (.12), worker:0 (.21), worker:1
# (.22) and the chief (.2), each binding the address its spec gives (--bind_host=spec), with
# checkpoints under DIR/ckpt (the namespaces share the filesystem, as hosts share a network
# filesystem), and logs in DIR/<task>.log. With CHAOS=1 it SIGKILLs ps:1 and worker:1 once three
# checkpoints are complete and starts them again a second later. It prints the chief's summary line
# and exits with the chief's code. Binaries: $PSTRAIN_BIN (default bazel-bin/{ps,trainer}).
set -euo pipefail

NET=10.77.0
HUB=pst-hub
TASKS=(chief:2 ps0:11 ps1:12 worker0:21 worker1:22)
PORT=2222

ns() { echo "pst-${1%%:*}"; }

up() {
  ip netns add "$HUB"
  ip -n "$HUB" link set lo up
  ip -n "$HUB" link add br0 type bridge
  ip -n "$HUB" link set br0 up
  for t in "${TASKS[@]}"; do
    local name="${t%%:*}" host="${t##*:}" n
    n="$(ns "$t")"
    ip netns add "$n"
    ip -n "$n" link set lo up
    ip link add "v-$name" type veth peer name "b-$name"
    ip link set "v-$name" netns "$n"
    ip link set "b-$name" netns "$HUB"
    ip -n "$n" link set "v-$name" name eth0
    ip -n "$n" addr add "$NET.$host/24" dev eth0
    ip -n "$n" link set eth0 up
    ip -n "$HUB" link set "b-$name" master br0
    ip -n "$HUB" link set "b-$name" up
  done
  echo "netns_cluster: up: ${TASKS[*]} on $NET.0/24"
}

down() {
  for t in "${TASKS[@]}"; do ip netns del "$(ns "$t")" 2> /dev/null || true; done
  ip netns del "$HUB" 2> /dev/null || true
  echo "netns_cluster: down"
}

run() {
  local dir="$1"
  shift
  [[ "${1:-}" == "--" ]] && shift
  local bin="${PSTRAIN_BIN:-bazel-bin}"
  mkdir -p "$dir/ckpt"
  dir="$(cd "$dir" && pwd)"
  cat > "$dir/cluster.json" <<EOF
{"cluster": {"chief": ["$NET.2:$PORT"], "ps": ["$NET.11:$PORT", "$NET.12:$PORT"],
             "worker": ["$NET.21:$PORT", "$NET.22:$PORT"]}}
EOF
  local pids=()
  start() {  # name ns binary task
    ip netns exec "$2" "$3" --cluster_spec="$dir/cluster.json" --task="$4" --bind_host=spec \
      ${5:+"$5"} >> "$dir/$1.log" 2>&1 &
    echo $!
  }
  ps0=$(start ps0 pst-ps0 "$bin/ps/ps_server" ps:0 --checkpoint_root="$dir")
  ps1=$(start ps1 pst-ps1 "$bin/ps/ps_server" ps:1 --checkpoint_root="$dir")
  w0=$(start worker0 pst-worker0 "$bin/trainer/worker_server" worker:0)
  w1=$(start worker1 pst-worker1 "$bin/trainer/worker_server" worker:1)
  trap 'kill $ps0 $ps1 $w0 $w1 2> /dev/null || true' EXIT
  for f in ps0 ps1 worker0 worker1; do
    for _ in $(seq 300); do grep -q READY "$dir/$f.log" 2> /dev/null && break; sleep 0.1; done
    grep -q READY "$dir/$f.log" || { echo "netns_cluster: $f did not start:"; cat "$dir/$f.log"; exit 1; }
  done
  ip netns exec pst-chief "$bin/trainer/coordinator" --cluster_spec="$dir/cluster.json" \
    --checkpoint_dir="$dir/ckpt" --logdir= "$@" > "$dir/chief.out" 2> "$dir/chief.log" &
  local chief=$!
  if [[ "${CHAOS:-0}" == 1 ]]; then
    # Mid-job: once three checkpoints are complete (the first is step 0's).
    for _ in $(seq 1200); do
      (( $(ls "$dir"/ckpt/*/MANIFEST 2> /dev/null | wc -l) >= 3 )) && break
      sleep 0.1
    done
    echo "netns_cluster: $(ls "$dir"/ckpt/*/MANIFEST | wc -l) checkpoints there; killing ps:1 and worker:1"
    kill -9 "$ps1" "$w1"
    sleep 1
    ps1=$(start ps1 pst-ps1 "$bin/ps/ps_server" ps:1 --checkpoint_root="$dir")
    w1=$(start worker1 pst-worker1 "$bin/trainer/worker_server" worker:1)
    trap 'kill $ps0 $ps1 $w0 $w1 2> /dev/null || true' EXIT
  fi
  local code=0
  wait "$chief" || code=$?
  cat "$dir/chief.out"
  return "$code"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  run) shift; run "$@" ;;
  *) sed -n 2,17p "$0"; exit 2 ;;
esac
