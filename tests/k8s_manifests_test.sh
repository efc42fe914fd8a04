#!/usr/bin/env bash
# deploy/k8s without a cluster: (a) the kustomization renders (kubectl's kustomize, offline) into
# exactly the expected objects, consistent with each other (names, counts, volumes, probes), and
# every flag a pod would be started with exists in its binary (their --helpfull); (b) entrypoint.sh's
# TF_CONFIG for several pod names, exactly, and its refusals (exit 2 with a message).
# `kubectl apply --dry-run=client` is not used: even client-side it asks a server for the API's
# resource types, and there is none here.
#
#   bazel test //tests:k8s_manifests_test     (args: the three binaries, from tests/BUILD.bazel)
set -euo pipefail

if ! command -v kubectl > /dev/null; then
  echo "FAIL: kubectl is not on PATH: run 'bash tools/setup.sh' (it installs Debian's kubernetes-client)" >&2
  exit 1
fi

root="${TEST_SRCDIR:+$TEST_SRCDIR/${TEST_WORKSPACE:-pstrain}}"
root="${root:-$(cd "$(dirname "$0")/.." && pwd)}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
export HOME="$tmp"  # kubectl's cache: nothing of the user's
unset KUBECONFIG

# A copy of deploy/k8s with the Secret's files made as a user makes them (README there).
rm -rf "$tmp/k8s"
cp -RL "$root/deploy/k8s" "$tmp/k8s"
bash "$root/tools/make_certs.sh" "$tmp/k8s/secrets" > /dev/null
openssl rand -hex 32 > "$tmp/k8s/secrets/token"

kubectl version --client 2>&1 | head -n 2
kubectl kustomize "$tmp/k8s" > "$tmp/rendered.yaml"
# YAML to JSON without PyYAML: a local (no server) annotate that prints every object.
kubectl annotate --local -f "$tmp/rendered.yaml" -o json pstrain.test/rendered=1 > "$tmp/rendered.json"

exec python3 - "$tmp/rendered.json" "$root/deploy/k8s/entrypoint.sh" "$@" <<'PY'
import json, os, re, subprocess, sys

rendered, entrypoint, binaries = sys.argv[1], sys.argv[2], sys.argv[3:]
failures = []

def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)

# --- (a) the rendered objects -------------------------------------------------------------------
text = open(rendered).read()
objects, i, decoder = [], 0, json.JSONDecoder()
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i == len(text):
        break
    obj, i = decoder.raw_decode(text, i)
    objects.extend(obj["items"] if obj.get("kind") == "List" else [obj])
by_kind = {}
for o in objects:
    by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o

def generated(kind, prefix):  # a generator's object: its name carries a content hash
    names = [n for n in by_kind.get(kind, {}) if re.fullmatch(prefix + r"-[a-z0-9]{10}", n)]
    check(len(names) == 1, f"one {kind} {prefix}-<hash>, got {sorted(by_kind.get(kind, {}))}")
    return names[0] if names else None

config_name = generated("ConfigMap", "pstrain-job")
secret_name = generated("Secret", "pstrain-tls")
types = ["chief", "ps", "worker", "evaluator"]
expected = {("ConfigMap", config_name), ("Secret", secret_name),
            ("PersistentVolumeClaim", "pstrain-shared")}
expected |= {(k, "pstrain-" + t) for t in types for k in ("Service", "StatefulSet")}
got = {(o["kind"], o["metadata"]["name"]) for o in objects}
check(got == expected, f"objects: missing {sorted(expected - got)}, unexpected {sorted(got - expected)}")
print(f"rendered {len(objects)} objects: " + ", ".join(f"{k}/{n}" for k, n in sorted(got)))
if failures:
    sys.exit(1)

config = by_kind["ConfigMap"][config_name]["data"]
check(set(by_kind["Secret"][secret_name]["data"]) == {"ca.pem", "task.pem", "task.key", "token"},
      "the Secret holds ca.pem, task.pem, task.key, token")
check(by_kind["PersistentVolumeClaim"]["pstrain-shared"]["spec"]["accessModes"] == ["ReadWriteMany"],
      "the shared volume is ReadWriteMany")
counts = {"chief": config["PSTRAIN_CHIEF_REPLICAS"], "ps": config["PSTRAIN_PS_REPLICAS"],
          "worker": config["PSTRAIN_WORKER_REPLICAS"], "evaluator": "0"}
port = int(config["PSTRAIN_PORT"])

containers = {}
for t in types:
    name = "pstrain-" + t
    sts, svc = by_kind["StatefulSet"][name], by_kind["Service"][name]
    spec, pod = sts["spec"], sts["spec"]["template"]["spec"]
    check(spec["serviceName"] == name, f"{name}: serviceName is its headless Service")
    check(str(spec["replicas"]) == counts[t], f"{name}: replicas {spec['replicas']} != count {counts[t]}")
    check(svc["spec"].get("clusterIP") == "None" and svc["spec"].get("publishNotReadyAddresses"),
          f"{name}: a headless Service publishing not-ready pods")
    check(svc["spec"]["selector"] == spec["selector"]["matchLabels"]
          == sts["spec"]["template"]["metadata"]["labels"], f"{name}: selectors agree")
    check([p["port"] for p in svc["spec"]["ports"]] == [port], f"{name}: Service port {port}")
    (c,) = pod["containers"]
    containers[t] = c
    check([(p["name"], p["containerPort"]) for p in c["ports"]] == [("grpc", port)], f"{name}: port")
    check(c["envFrom"] == [{"configMapRef": {"name": config_name}}], f"{name}: env from {config_name}")
    check({"name": "PSTRAIN_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
          in c["env"], f"{name}: PSTRAIN_NAMESPACE from the downward API")
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    check(volumes[mounts["/var/lib/pstrain"]].get("persistentVolumeClaim") == {"claimName": "pstrain-shared"},
          f"{name}: the shared volume at /var/lib/pstrain")
    check(volumes[mounts[config["PSTRAIN_TLS_DIR"]]]["secret"]["secretName"] == secret_name,
          f"{name}: the TLS Secret at PSTRAIN_TLS_DIR")
    check(os.path.dirname(config["PSTRAIN_AUTH_TOKEN_FILE"]) == config["PSTRAIN_TLS_DIR"],
          "the token file is in the Secret")
    for kind in ("requests", "limits"):
        check({"cpu", "memory"} <= set(c["resources"].get(kind, {})), f"{name}: cpu and memory {kind}")
    if t in ("ps", "worker"):
        check(c.get("readinessProbe", {}).get("tcpSocket") == {"port": "grpc"}, f"{name}: readiness probe")

# The ps confine checkpoints to --checkpoint_root: the chief's --checkpoint_dir must lie under it.
flags = lambda args: dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
ps_root = flags(containers["ps"]["args"])["checkpoint_root"].rstrip("/")
ckpt = flags(config["PSTRAIN_TRAIN_ARGS"].split())["checkpoint_dir"]
check(ckpt.startswith(ps_root + "/") and ps_root.startswith("/var/lib/pstrain/"),
      f"--checkpoint_dir {ckpt} lies under the ps tasks' --checkpoint_root {ps_root} on the shared volume")

# --- (b) the entrypoint -------------------------------------------------------------------------
def run(host, env, args=()):
    env = dict(env, PATH=os.environ["PATH"], HOSTNAME=host, PSTRAIN_ENTRYPOINT_DRY_RUN="1")
    return subprocess.run(["sh", entrypoint, *args], env=env, capture_output=True, text=True)

def command_of(r):  # the command a dry run would exec, as words
    lines = [l for l in r.stderr.splitlines() if "would exec:" in l]
    return lines[-1].split("would exec:", 1)[1].split() if lines else []

# Every pod of the manifests, with the ConfigMap's environment and its container's args: the binary
# and flags it would exec, each flag one its binary has.
known = {}
for path in binaries:
    help_text = subprocess.run([path, "--helpfull"], capture_output=True, text=True).stdout
    known[os.path.basename(path)] = set(re.findall(r"^\s+--(\w+) \(", help_text, re.M))
    check(len(known[os.path.basename(path)]) > 5, f"{path} --helpfull lists its flags")
want_binary = {"chief": "coordinator", "ps": "ps_server", "worker": "worker_server",
               "evaluator": "coordinator"}
for t in types:
    host = f"pstrain-{t}-0"
    r = run(host, dict(config, PSTRAIN_NAMESPACE="ml"), containers[t].get("args", []))
    check(r.returncode == 0, f"{host} (manifests' environment): exit {r.returncode}: {r.stderr}")
    command = command_of(r)
    check(command and command[0] == "/opt/pstrain/bin/" + want_binary[t], f"{host}: execs {want_binary[t]}: {command}")
    for a in command[1:]:
        check(a.startswith("--") and a[2:].split("=")[0] in known.get(want_binary[t], ()),
              f"{host}: {want_binary[t]} has no flag {a}")
    check(any(a.startswith("--tls_cert=") for a in command) and
          any(a.startswith("--auth_token_file=") for a in command), f"{host}: TLS and token flags")

# TF_CONFIG, exactly, for a job of 1 chief, 2 ps and 3 workers in namespace ml.
base = {"PSTRAIN_NAMESPACE": "ml", "PSTRAIN_CHIEF_REPLICAS": "1", "PSTRAIN_PS_REPLICAS": "2",
        "PSTRAIN_WORKER_REPLICAS": "3"}
addr = lambda t, i: f"pstrain-{t}-{i}.pstrain-{t}.ml.svc.cluster.local:2222"
cluster = {"chief": [addr("chief", 0)], "ps": [addr("ps", i) for i in range(2)],
           "worker": [addr("worker", i) for i in range(3)]}
for t, i, binary in [("chief", 0, "coordinator"), ("ps", 0, "ps_server"), ("ps", 1, "ps_server"),
                     ("worker", 0, "worker_server"), ("worker", 2, "worker_server"),
                     ("evaluator", 0, "coordinator")]:
    host = f"pstrain-{t}-{i}"
    r = run(host, base)
    check(r.returncode == 0, f"{host}: exit {r.returncode}: {r.stderr}")
    want = {"cluster": cluster, "task": {"type": t, "index": i}}
    try:
        check(json.loads(r.stdout) == want, f"{host}: TF_CONFIG {r.stdout.strip()} != {json.dumps(want)}")
    except ValueError:
        check(False, f"{host}: TF_CONFIG is not JSON: {r.stdout!r}")
    check(command_of(r)[:1] == ["/opt/pstrain/bin/" + binary], f"{host}: execs {binary}: {r.stderr}")
# Synchronous: no ps; every worker runs the coordinator; another suffix and port.
sync = dict(base, PSTRAIN_PS_REPLICAS="0", PSTRAIN_WORKER_REPLICAS="2", PSTRAIN_STRATEGY="multi_worker_mirrored",
            PSTRAIN_SERVICE_SUFFIX="svc.example.org", PSTRAIN_PORT="3333", PSTRAIN_TRAIN_ARGS="--model=m")
r = run("job7-worker-1", sync)
a = lambda t, i: f"job7-{t}-{i}.job7-{t}.ml.svc.example.org:3333"
want = {"cluster": {"chief": [a("chief", 0)], "worker": [a("worker", 0), a("worker", 1)]},
        "task": {"type": "worker", "index": 1}}
check(r.returncode == 0 and r.stdout.strip() and json.loads(r.stdout) == want, f"job7-worker-1: {r.stdout} {r.stderr}")
check(command_of(r) == ["/opt/pstrain/bin/coordinator", "--cluster_spec=", "--strategy=multi_worker_mirrored",
                        "--model=m"], f"job7-worker-1 runs the coordinator: {r.stderr}")

# Refusals: exit 2 and a message naming what is wrong.
without_workers = {k: v for k, v in base.items() if k != "PSTRAIN_WORKER_REPLICAS"}
for host, env, message in [
        ("web-0", base, "hostname 'web-0' is not <job>-<chief|ps|worker|evaluator>-<ordinal>"),
        ("pstrain-web", base, "hostname 'pstrain-web' is not"),
        ("pstrain-foo-0", base, "task type 'foo' is not chief, ps, worker or evaluator"),
        ("pstrain-ps-01", base, "'01' is not an ordinal"),
        ("pstrain-worker-3", base, "worker index 3 is out of range: the job has 3 worker task(s)"),
        ("pstrain-evaluator-1", base, "at most one evaluator"),
        ("pstrain-ps-0", without_workers, "PSTRAIN_WORKER_REPLICAS is not set"),
        ("pstrain-ps-0", dict(base, PSTRAIN_PS_REPLICAS="two"), "PSTRAIN_PS_REPLICAS='two' is not"),
        ("pstrain-ps-0", dict(base, PSTRAIN_CHIEF_REPLICAS="2"), "at most one chief"),
        ("pstrain-ps-0", dict(base, PSTRAIN_NAMESPACE=""), "PSTRAIN_NAMESPACE is not set"),
        ("pstrain-ps-0", dict(base, PSTRAIN_STRATEGY="allreduce"), "PSTRAIN_STRATEGY='allreduce' is not"),
        ("pstrain-ps-0", dict(base, PSTRAIN_JOB_NAME="other"), "belongs to job 'pstrain', not PSTRAIN_JOB_NAME='other'")]:
    r = run(host, env)
    check(r.returncode == 2 and message in r.stderr and r.stdout == "",
          f"{host}: want exit 2 and {message!r}, got exit {r.returncode}, stderr {r.stderr!r}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("PASS: manifests and entrypoint")
PY
