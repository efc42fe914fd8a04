#!/usr/bin/env bash
# Makes a CA and one certificate for the tasks of a job, with Debian's openssl, for mutual TLS
# (--tls_ca, --tls_cert, --tls_key on every task and the coordinator):
#
#   bash tools/make_certs.sh OUT_DIR [HOST ...]
#
# writes OUT_DIR/ca.pem (give it to every task as --tls_ca), OUT_DIR/ca.key (keep it off the
# cluster), and OUT_DIR/task.pem + OUT_DIR/task.key (each task's --tls_cert and --tls_key), valid
# for localhost, 127.0.0.1 and every HOST (the names or IP addresses the cluster spec uses: a client
# checks that the server's certificate names the host it dialled). Keys are ECDSA P-256. For a
# test or a small cluster; a real deployment would give each task its own certificate from its PKI.
set -euo pipefail
if (( $# < 1 )); then sed -n 2,11p "$0"; exit 2; fi
out="$1"
shift
mkdir -p "$out"
umask 077

san="DNS:localhost,IP:127.0.0.1"
for host in "$@"; do
  if [[ "$host" =~ ^[0-9.]+$ || "$host" == *:* ]]; then san+=",IP:$host"; else san+=",DNS:$host"; fi
done

openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
  -subj "/CN=pstrain job CA" -keyout "$out/ca.key" -out "$out/ca.pem" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -subj "/CN=pstrain task" -keyout "$out/task.key" -out "$out/task.csr" 2>/dev/null
openssl x509 -req -in "$out/task.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" -CAcreateserial \
  -days 825 -out "$out/task.pem" -extfile <(printf '%s\n' \
    "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth,clientAuth" \
    "subjectAltName=$san") 2>/dev/null
rm -f "$out/task.csr" "$out/ca.srl"
chmod 644 "$out/ca.pem" "$out/task.pem"
echo "make_certs: $out/ca.pem, $out/task.pem, $out/task.key ($san)"
