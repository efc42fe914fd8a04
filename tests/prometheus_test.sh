#!/usr/bin/env bash
# A real Prometheus (Debian's prometheus package) scrapes an in-process job: the coordinator binary
# runs a long sum job with --metrics_port (its own endpoint, then each task's on the next ports);
# Prometheus scrapes them every second, and the series are read back through its HTTP query API:
# the chief's closures, every ps's requests by method, every worker's closures and their latency
# histogram, all labelled by task.
#
#   bazel test //tests:prometheus_test      (arg: the coordinator binary)
set -euo pipefail

coordinator="$1"
prometheus="$(command -v prometheus || true)"
if [[ -z "$prometheus" ]]; then
  echo "FAIL: prometheus is not installed: run 'bash tools/setup.sh' (Debian's prometheus)" >&2
  exit 1
fi
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

# Five free ports in a row for the job (chief, 2 ps, 2 workers; from 20000 up, apart from the
# 10000-19999 that in-process clusters' PortPicker draws from) and one for Prometheus.
read -r base prom <<<"$(python3 - <<'PY'
import socket
def free(n):
    for start in range(20000, 60000, 97):
        ok = True
        for p in range(start, start + n):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                ok = False
            finally:
                s.close()
            if not ok:
                break
        if ok:
            return start
s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
print(free(5), p)
PY
)"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done; wait 2> /dev/null || true; }
trap cleanup EXIT

# A job that runs until we stop it: many closures of 5 ms simulated work.
"$coordinator" --job=sum --steps=10000000 --work_us=5000 --cluster_spec=in_process:workers=2,ps=2 \
  --metrics_port="$base" --metrics_host=127.0.0.1 > "$tmp/job.out" 2> "$tmp/job.err" &
pids+=($!)

cat > "$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  - job_name: pstrain
    static_configs:
      - targets: ['127.0.0.1:$base', '127.0.0.1:$((base + 1))', '127.0.0.1:$((base + 2))',
                  '127.0.0.1:$((base + 3))', '127.0.0.1:$((base + 4))']
EOF
"$prometheus" --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$prom" > "$tmp/prometheus.log" 2>&1 &
pids+=($!)

exec python3 - "$prom" "$tmp" <<'PY'
import json, sys, time, urllib.parse, urllib.request

prom, tmp = sys.argv[1], sys.argv[2]

def query(q):
    url = "http://127.0.0.1:%s/api/v1/query?%s" % (prom, urllib.parse.urlencode({"query": q}))
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]

wanted = {
    # what: (query, the tasks its series must cover)
    "chief closures": ('pstrain_coordinator_closures_total > 0', {"chief"}),
    # The sum job's one variable lives on ps:0; ps:1's series exist, at 0.
    "ps requests by method": ('pstrain_ps_requests_total{method="Update"} > 0', {"ps:0"}),
    "every ps's series": ('pstrain_ps_requests_total{method="Update"} >= 0', {"ps:0", "ps:1"}),
    "worker closures": ('pstrain_worker_closures_total{closure="add_range"} > 0',
                        {"worker:0", "worker:1"}),
    "worker latency p50": (
        'histogram_quantile(0.5, sum by (le, task) (rate(pstrain_worker_closure_seconds_bucket[5s])))',
        {"worker:0", "worker:1"}),
    "every target up": ('up{job="pstrain"} == 1', None),
}
deadline = time.time() + 90
missing = dict(wanted)
last = {}
while missing and time.time() < deadline:
    for what, (q, tasks) in list(missing.items()):
        try:
            result = query(q)
        except Exception as e:  # Prometheus still starting
            last[what] = repr(e)
            continue
        last[what] = result
        if tasks is None:
            if len(result) == 5:
                del missing[what]
            continue
        have = {r["metric"].get("task") for r in result}
        if tasks <= have:
            del missing[what]
    if missing:
        time.sleep(1)

if missing:
    for what in missing:
        print("FAIL: %s: %s" % (what, json.dumps(last.get(what))[:500]))
    print("--- job stderr (tail) ---")
    print(open(tmp + "/job.err").read()[-2000:])
    print("--- prometheus log (tail) ---")
    print(open(tmp + "/prometheus.log").read()[-2000:])
    sys.exit(1)
p50 = query('histogram_quantile(0.5, sum by (le) (rate(pstrain_worker_closure_seconds_bucket[5s])))')
print("OK: every series scraped; the workers' median closure time %s s (5 ms of simulated work)"
      % p50[0]["value"][1])
PY
