#!/usr/bin/env bash
# A whole training job across network namespaces (tools/netns_cluster.sh): the chief, two ps and
# two workers each on their own address, every task binding the address its spec gives. ps:1 and
# worker:1 are SIGKILLed mid-job (after three checkpoints) and started again; the job still finishes,
# and its test RMSE is within 0.03 of the same job run in one process. A task told to bind an
# address that isn't its host's says so, naming the task and the address. Needs root (CI runs as
# root) and iproute2.
#
#   bazel test //tests:netns_cluster_test
set -euo pipefail

if [[ "$(id -u)" != 0 ]]; then
  echo "FAIL: needs root to make network namespaces (CI runs as root)" >&2
  exit 1
fi
root="${TEST_SRCDIR:+$TEST_SRCDIR/${TEST_WORKSPACE:-pstrain}}"
root="${root:-$(cd "$(dirname "$0")/.." && pwd)}"
script="$root/tools/netns_cluster.sh"
export PSTRAIN_BIN="$root"
tmp="$(mktemp -d /tmp/pstrain-netns.XXXXXX)"  # outside the sandbox: every namespace sees it

bash "$script" down > /dev/null 2>&1 || true
trap 'bash "$script" down > /dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
bash "$script" up

# Toy ratings: rating = 3 + user bias + item bias + a user x item taste + noise.
python3 - "$tmp/ratings.csv" <<'PY'
import random, sys
r = random.Random(5)
users = [r.gauss(0, 0.5) for _ in range(300)]
items = [r.gauss(0, 0.5) for _ in range(120)]
ut = [[r.gauss(0, 0.5) for _ in range(4)] for _ in range(300)]
it = [[r.gauss(0, 0.5) for _ in range(4)] for _ in range(120)]
with open(sys.argv[1], "w") as f:
    f.write("userId,movieId,rating\n")
    for _ in range(24000):
        u, i = r.randrange(300), r.randrange(120)
        y = 3 + users[u] + items[i] + sum(a * b for a, b in zip(ut[u], it[i])) + r.gauss(0, 0.3)
        f.write("%d,%d,%.2f\n" % (u, i, min(5, max(0.5, y))))
PY
args=(--model=movielens_mf --data="$tmp/ratings.csv" --epochs=20 --checkpoint_every_steps=40
      --checkpoint_every=0 --restore=none)

# The same job in one process.
"$root/trainer/coordinator" --cluster_spec=in_process:workers=2,ps=2 --checkpoint_dir="$tmp/one/ckpt" \
  --logdir= "${args[@]}" > "$tmp/one.out" 2> "$tmp/one.err"
one="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["test_rmse"])' "$tmp/one.out")"

# Across the namespaces, with a ps and a worker killed and restarted mid-job.
CHAOS=1 bash "$script" run "$tmp/net" -- "${args[@]}" > "$tmp/net.out" 2> "$tmp/net.err" || {
  echo "FAIL: the job across namespaces failed:"; cat "$tmp/net.err"; tail -30 "$tmp/net/chief.log"; exit 1; }
net="$(tail -n 1 "$tmp/net.out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["test_rmse"])')"
echo "test RMSE: one process $one, across namespaces with failures $net"
grep -q "ps:1 at 10.77.0.12:2222" "$tmp/net/chief.log" || { echo "FAIL: the chief never saw ps:1 at its address"; exit 1; }
grep -q "ps:1 restarted: its shards were reloaded" "$tmp/net/chief.log" || {
  echo "FAIL: ps:1's restart was not recovered from a checkpoint"; tail -40 "$tmp/net/chief.log"; exit 1; }
grep -q "worker:1 .* failed" "$tmp/net/chief.log" || { echo "FAIL: worker:1's failure unnoticed"; exit 1; }
grep -q "READY ps:1 10.77.0.12:2222" "$tmp/net/ps1.log" || { echo "FAIL: ps:1 did not bind its spec address"; exit 1; }
python3 - "$one" "$net" <<'PY'
import sys
one, net = float(sys.argv[1]), float(sys.argv[2])
if abs(one - net) > 0.03:
    sys.exit("FAIL: test RMSE %.4f across namespaces vs %.4f in one process" % (net, one))
PY

# A task whose spec address isn't its host's: a one-line error naming the task and the address.
set +e
ip netns exec pst-ps0 "$root/ps/ps_server" --cluster_spec="$tmp/net/cluster.json" --task=ps:1 \
  --bind_host=spec > "$tmp/wrong.out" 2> "$tmp/wrong.err"
code=$?
set -e
if [[ $code != 2 ]] || ! grep -q "ps:1" "$tmp/wrong.err" || ! grep -q "10.77.0.12:2222" "$tmp/wrong.err"; then
  echo "FAIL: binding another host's address: exit $code"; cat "$tmp/wrong.err"; exit 1
fi
echo "wrong address refused: $(grep error "$tmp/wrong.err")"
echo OK
