#!/usr/bin/env bash
# Installs every Debian package this project needs, on a fresh Debian 12 machine.
# Idempotent: packages already present are left as they are. Runs `apt-get update` itself.
set -euo pipefail

PACKAGES=(
  # build
  bazel-bootstrap g++ git python3
  # libraries
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  libabsl-dev librocksdb-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev zlib1g-dev libssl-dev
  # CPU collectives for synchronous training (collective/)
  libgloo-dev
  # HTTP endpoints: Prometheus metrics, the prediction server's JSON API
  libcpp-httplib-dev
  # tools used by scripts and tests: openssl makes the TLS tests' certificates (tools/make_certs.sh)
  iproute2 procps openssl
  # a real Prometheus server for the metrics test (tests/prometheus_test.sh)
  prometheus
  # kubectl for //tests:k8s_manifests_test (deploy/k8s): Debian's, unless one is installed already
  # (google-cloud-cli's `kubectl` package owns the same /usr/bin/kubectl, and dpkg refuses both)
  $(command -v kubectl > /dev/null || echo kubernetes-client)
  # the Python module (python/, docs/python.md): pybind11 and Python's headers to build it; NumPy,
  # PyTorch (with OpenBLAS's threaded build, which makes Debian's torch several times faster) and
  # pandas for its tests, its torch modules and the example; none is a dependency of the C++ core
  pybind11-dev python3-dev python3-numpy python3-torch python3-pandas libopenblas0-pthread
  # fuzzing (tools/fuzz.sh): clang with libFuzzer and the sanitizers' runtimes
  clang-14 libfuzzer-14-dev libclang-rt-14-dev
)

SUDO=""
if [[ "$(id -u)" != "0" ]]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if (( ${#missing[@]} == 0 )); then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
