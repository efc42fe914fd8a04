#!/bin/sh
# The container entrypoint of a pstrain task on Kubernetes (POSIX sh; deploy/Dockerfile installs it).
#
# A StatefulSet names its pods <job>-<type>-<ordinal> (pstrain-ps-1) and its headless Service gives
# each one a stable DNS name, <pod>.<job>-<type>.<namespace>.<suffix>. From the pod's hostname and
# the replica counts this script writes TensorFlow's TF_CONFIG, exports it, and execs the binary of
# the task type with the security flags, the training flags where the binary trains, and its own
# arguments (the container's args) last:
#
#   chief      coordinator --cluster_spec= --strategy=S $PSTRAIN_TRAIN_ARGS "$@"   (empty: TF_CONFIG)
#   ps         ps_server "$@"                     (e.g. --checkpoint_root, --memory_budget)
#   worker     worker_server "$@"                 (strategy parameter_server)
#              coordinator --cluster_spec= --strategy=S $PSTRAIN_TRAIN_ARGS "$@"
#                                                 (multi_worker_mirrored, hybrid: every worker trains)
#   evaluator  coordinator --cluster_spec= $PSTRAIN_TRAIN_ARGS "$@"   (TF_CONFIG's task makes it
#              the evaluator: it evaluates each new checkpoint in --checkpoint_dir until the last)
#
# Environment (every pod of a job must see the same counts: they are the cluster spec):
#   PSTRAIN_CHIEF_REPLICAS, PSTRAIN_PS_REPLICAS, PSTRAIN_WORKER_REPLICAS   required, integers
#   PSTRAIN_NAMESPACE        required (the downward API's metadata.namespace)
#   PSTRAIN_SERVICE_SUFFIX   default svc.cluster.local
#   PSTRAIN_PORT             default 2222: every task listens there
#   PSTRAIN_STRATEGY         parameter_server (default), multi_worker_mirrored or hybrid
#   PSTRAIN_TRAIN_ARGS       the coordinator's flags, split at spaces (no spaces inside a value)
#   PSTRAIN_TLS_DIR          if set: --tls_cert=DIR/task.pem --tls_key=DIR/task.key --tls_ca=DIR/ca.pem
#   PSTRAIN_AUTH_TOKEN_FILE  if set: --auth_token_file=FILE
#   PSTRAIN_BIN_DIR          default /opt/pstrain/bin
#   PSTRAIN_JOB_NAME         optional: if set, the hostname's job part must equal it
#   PSTRAIN_HOSTNAME         default $HOSTNAME, else `hostname` (the pod's name)
#   PSTRAIN_ENTRYPOINT_DRY_RUN=1   print TF_CONFIG on stdout and the command on stderr; exec nothing
#
# Anything wrong (hostname, counts, namespace, a missing file) is one line on stderr naming it, and
# exit code 2.
set -eu

fail() {
  echo "pstrain-entrypoint: error: $*" >&2
  exit 2
}

is_count() {  # a non-negative decimal integer without leading zeros
  case "$1" in
    '' | *[!0-9]*) return 1 ;;
    0) return 0 ;;
    0*) return 1 ;;
  esac
  return 0
}

count() {  # count NAME: the value of the environment variable NAME, checked
  eval "value=\${$1-}"
  [ -n "$value" ] || fail "$1 is not set (the $2 StatefulSet's replica count; every pod of the job needs the same counts)"
  is_count "$value" || fail "$1='$value' is not a non-negative integer"
  echo "$value"
}

host="${PSTRAIN_HOSTNAME:-${HOSTNAME:-$(hostname)}}"
ordinal="${host##*-}"
rest="${host%-*}"
type="${rest##*-}"
job="${rest%-*}"
expected="<job>-<chief|ps|worker|evaluator>-<ordinal>, as a StatefulSet names its pods"
if [ "$rest" = "$host" ] || [ "$job" = "$rest" ] || [ -z "$job" ]; then
  fail "hostname '$host' is not $expected"
fi
case "$type" in
  chief | ps | worker | evaluator) ;;
  *) fail "hostname '$host': task type '$type' is not chief, ps, worker or evaluator ($expected)" ;;
esac
is_count "$ordinal" || fail "hostname '$host': '$ordinal' is not an ordinal ($expected)"
case "$job" in
  *[!a-z0-9-]* | -* | *-) fail "hostname '$host': job name '$job' is not a DNS label" ;;
esac
if [ -n "${PSTRAIN_JOB_NAME:-}" ] && [ "$PSTRAIN_JOB_NAME" != "$job" ]; then
  fail "hostname '$host' belongs to job '$job', not PSTRAIN_JOB_NAME='$PSTRAIN_JOB_NAME'"
fi

chiefs=$(count PSTRAIN_CHIEF_REPLICAS chief) || exit 2
ps=$(count PSTRAIN_PS_REPLICAS ps) || exit 2
workers=$(count PSTRAIN_WORKER_REPLICAS worker) || exit 2
namespace="${PSTRAIN_NAMESPACE:-}"
[ -n "$namespace" ] || fail "PSTRAIN_NAMESPACE is not set (give it the pod's metadata.namespace)"
case "$namespace" in
  *[!a-z0-9-]* | -* | *-) fail "PSTRAIN_NAMESPACE='$namespace' is not a namespace name" ;;
esac
suffix="${PSTRAIN_SERVICE_SUFFIX:-svc.cluster.local}"
case "$suffix" in
  *[!a-z0-9.-]* | .* | *. | *..*) fail "PSTRAIN_SERVICE_SUFFIX='$suffix' is not a DNS suffix" ;;
esac
port="${PSTRAIN_PORT:-2222}"
if ! is_count "$port" || [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
  fail "PSTRAIN_PORT='$port' is not a port (1-65535)"
fi
strategy="${PSTRAIN_STRATEGY:-parameter_server}"
case "$strategy" in
  parameter_server | hybrid) [ "$ps" -ge 1 ] || fail "--strategy=$strategy needs PSTRAIN_PS_REPLICAS >= 1" ;;
  multi_worker_mirrored) ;;
  *) fail "PSTRAIN_STRATEGY='$strategy' is not parameter_server, multi_worker_mirrored or hybrid" ;;
esac
[ "$chiefs" -le 1 ] || fail "PSTRAIN_CHIEF_REPLICAS=$chiefs: a job has at most one chief"
[ "$workers" -ge 1 ] || fail "PSTRAIN_WORKER_REPLICAS=0: a job needs at least one worker"

case "$type" in
  chief) replicas=$chiefs ;;
  ps) replicas=$ps ;;
  worker) replicas=$workers ;;
  evaluator)  # outside the cluster, as TensorFlow allows; at most one
    [ "$ordinal" -eq 0 ] || fail "hostname '$host': a job has at most one evaluator (index 0)"
    replicas=1 ;;
esac
if [ "$ordinal" -ge "$replicas" ]; then
  fail "hostname '$host': $type index $ordinal is out of range: the job has $replicas $type task(s) (scaled without updating PSTRAIN_$(echo "$type" | tr a-z A-Z)_REPLICAS?)"
fi

# One job's address list: "a","b",...
addresses() {
  list=""
  i=0
  while [ "$i" -lt "$2" ]; do
    list="$list${list:+,}\"$job-$1-$i.$job-$1.$namespace.$suffix:$port\""
    i=$((i + 1))
  done
  echo "$list"
}
cluster=""
[ "$chiefs" -eq 0 ] || cluster="\"chief\":[$(addresses chief "$chiefs")]"
[ "$ps" -eq 0 ] || cluster="$cluster${cluster:+,}\"ps\":[$(addresses ps "$ps")]"
cluster="$cluster${cluster:+,}\"worker\":[$(addresses worker "$workers")]"
TF_CONFIG="{\"cluster\":{$cluster},\"task\":{\"type\":\"$type\",\"index\":$ordinal}}"
export TF_CONFIG

bin="${PSTRAIN_BIN_DIR:-/opt/pstrain/bin}"
dry_run="${PSTRAIN_ENTRYPOINT_DRY_RUN:-0}"

# The command: built in "$@" (the container's args stay last, so they win over what comes before).
security=""
if [ -n "${PSTRAIN_TLS_DIR:-}" ]; then
  for f in task.pem task.key ca.pem; do
    [ "$dry_run" = 1 ] || [ -r "$PSTRAIN_TLS_DIR/$f" ] ||
      fail "PSTRAIN_TLS_DIR: $PSTRAIN_TLS_DIR/$f is missing or unreadable (mount the TLS Secret there)"
  done
  security="--tls_cert=$PSTRAIN_TLS_DIR/task.pem --tls_key=$PSTRAIN_TLS_DIR/task.key --tls_ca=$PSTRAIN_TLS_DIR/ca.pem"
fi
if [ -n "${PSTRAIN_AUTH_TOKEN_FILE:-}" ]; then
  [ "$dry_run" = 1 ] || [ -r "$PSTRAIN_AUTH_TOKEN_FILE" ] ||
    fail "PSTRAIN_AUTH_TOKEN_FILE: $PSTRAIN_AUTH_TOKEN_FILE is missing or unreadable"
  security="$security${security:+ }--auth_token_file=$PSTRAIN_AUTH_TOKEN_FILE"
fi
if [ -z "$security" ]; then
  echo "pstrain-entrypoint: warning: neither PSTRAIN_TLS_DIR nor PSTRAIN_AUTH_TOKEN_FILE is set: traffic is plaintext and unauthenticated" >&2
fi

set -f  # the flags below are split at spaces, never globbed
case "$type" in
  chief)
    set -- "$bin/coordinator" $security --cluster_spec= "--strategy=$strategy" ${PSTRAIN_TRAIN_ARGS:-} "$@" ;;
  ps)
    set -- "$bin/ps_server" $security "$@" ;;
  worker)
    if [ "$strategy" = parameter_server ]; then
      set -- "$bin/worker_server" $security "$@"
    else
      set -- "$bin/coordinator" $security --cluster_spec= "--strategy=$strategy" ${PSTRAIN_TRAIN_ARGS:-} "$@"
    fi ;;
  evaluator)
    set -- "$bin/coordinator" $security --cluster_spec= ${PSTRAIN_TRAIN_ARGS:-} "$@" ;;
esac
set +f

if [ "$dry_run" = 1 ]; then
  echo "$TF_CONFIG"
  echo "pstrain-entrypoint: would exec: $*" >&2
  exit 0
fi
[ -x "$1" ] || fail "$1 is not an executable (PSTRAIN_BIN_DIR='$bin')"
echo "pstrain-entrypoint: $host is $type:$ordinal of job $job; TF_CONFIG=$TF_CONFIG" >&2
exec "$@"
