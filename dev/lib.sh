# Shared settings and helpers for the dev/ stack scripts; sourced, never run.
# shellcheck shell=bash disable=SC2034 # settings here are used by the scripts that source this
set -euo pipefail
DEV_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$DEV_DIR")
CACHE_DIR=${NODEROLLOUT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/noderollout}
STATE_DIR=${NODEROLLOUT_STATE:-$REPO_DIR/.stack}
# Let go.mod's toolchain line choose the Go that builds our modules: a Go installation defaults
# to GOTOOLCHAIN=local and would build with whatever Go the machine has (README, "Two commands").
export GOTOOLCHAIN=auto

TEMPORAL_CLI_VERSION=1.5.1
KUBE_VERSION=1.37.2
ETCD_VERSION=3.7.0
KWOK_VERSION=0.8.0

TEMPORAL_BIN=$CACHE_DIR/temporal-$TEMPORAL_CLI_VERSION/temporal
KUBE_BIN_DIR=$CACHE_DIR/kube-$KUBE_VERSION-kwok-$KWOK_VERSION-etcd-$ETCD_VERSION
APISERVER_BIN=$KUBE_BIN_DIR/kube-apiserver
KCM_BIN=$KUBE_BIN_DIR/kube-controller-manager
ETCD_BIN=$KUBE_BIN_DIR/etcd
KWOK_BIN=$KUBE_BIN_DIR/kwok
# Only the peer benchmark (bench system suc) needs a scheduler: noderollout pins its Pods with
# nodeName, SUC places them by node affinity. Built with the other kube tools, started on demand.
SCHEDULER_BIN=$KUBE_BIN_DIR/kube-scheduler

# Only the PostgreSQL bench row needs these: the Temporal server the dev server embeds, built on
# its own, and its SQL schema tool (dev/build-temporal-server.sh, dev/temporal-postgres.sh).
TEMPORAL_SERVER_VERSION=1.29.1
TEMPORAL_SERVER_DIR=$CACHE_DIR/temporal-server-$TEMPORAL_SERVER_VERSION
TEMPORAL_SERVER_BIN=$TEMPORAL_SERVER_DIR/server
TEMPORAL_SQL_TOOL_BIN=$TEMPORAL_SERVER_DIR/sql

# Rancher system-upgrade-controller, the peer the benchmark compares with (bench system suc),
# built from a source snapshot (its module is not on the Go module proxy; its dependencies are).
# The snapshot lives outside the repository, in the shared peers directory beside the clone.
SUC_VERSION=0.20.1
SUC_COMMIT=f1362a3fe1a8d55a0c65847f7c2779909dc7ec95
PEERS_DIR=${NODEROLLOUT_PEERS:-$(dirname "$REPO_DIR")/shared/peers}
SUC_TARBALL=$PEERS_DIR/system-upgrade-controller-v$SUC_VERSION.tar.gz
SUC_TARBALL_SHA256=c97d3e7a2be04fcab9980509a3629d3701722af03777f8baea36d56c136406cc
SUC_PATCH=$DEV_DIR/peers/suc-client-qps.patch
# As shipped, and with its client rate limit raised (SUC_PATCH): the cache key names the patch.
SUC_BIN_DIR=$CACHE_DIR/suc-$SUC_VERSION-patch-$( (sha256sum "$SUC_PATCH" 2>/dev/null || echo none) | cut -c1-8)
SUC_BIN=$SUC_BIN_DIR/system-upgrade-controller
SUC_QPS_BIN=$SUC_BIN_DIR/system-upgrade-controller-qps

TEMPORAL_PORT=${TEMPORAL_PORT:-7233}
TEMPORAL_UI_PORT=${TEMPORAL_UI_PORT:-8233}
TEMPORAL_HTTP_PORT=${TEMPORAL_HTTP_PORT:-7243}
TEMPORAL_METRICS_PORT=${TEMPORAL_METRICS_PORT:-7244}
ETCD_PORT=${ETCD_PORT:-2379}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-2380}
APISERVER_PORT=${APISERVER_PORT:-6443}
KCM_PORT=${KCM_PORT:-10257}
KWOK_PORT=${KWOK_PORT:-10247}
KWOK_STUCK_PORT=${KWOK_STUCK_PORT:-10248}
SCHEDULER_PORT=${SCHEDULER_PORT:-10259}
WORKER_METRICS_PORT=${WORKER_METRICS_PORT:-9090}
PROMETHEUS_PORT=${PROMETHEUS_PORT:-9095}
PUSHGATEWAY_PORT=${PUSHGATEWAY_PORT:-9096}

# Where a running stack keeps its data, pids, logs, certificates and client config.
PID_DIR=$STATE_DIR/pids
LOG_DIR=$STATE_DIR/logs
PKI_DIR=$STATE_DIR/pki
KUBECONFIG_FILE=$STATE_DIR/kubeconfig
ENV_FILE=$STATE_DIR/env

# The noderollout worker, when started by dev/worker.sh (make demo).
WORKER_BIN=$STATE_DIR/bin/worker
# The stack's fake reboots of kwok Nodes (dev/cmd/fakereboot), built by up.sh.
FAKEREBOOT_BIN=$STATE_DIR/bin/fakereboot
# Prometheus and its Pushgateway, from Debian's packages (dev/build.sh installs them): the
# metric gates are tested against the real query API, on series the tests push.
PROMETHEUS_BIN=${PROMETHEUS_BIN:-/usr/bin/prometheus}
PUSHGATEWAY_BIN=${PUSHGATEWAY_BIN:-/usr/bin/prometheus-pushgateway}

# Components in start order; down.sh stops them in reverse. up.sh starts all but the
# scheduler (the bench starts it for the peer's runs: dev/start-component.sh kube-scheduler)
# and the worker.
COMPONENTS=(temporal etcd kube-apiserver kube-controller-manager kwok kwok-stuck fakereboot pushgateway prometheus kube-scheduler worker)
STACK_COMPONENTS=(temporal etcd kube-apiserver kube-controller-manager kwok kwok-stuck fakereboot pushgateway prometheus)

# Seconds to wait for a component to become ready, and for one to exit after SIGTERM.
READY_TIMEOUT=${READY_TIMEOUT:-120}
STOP_TIMEOUT=${STOP_TIMEOUT:-20}

log() { printf '[dev] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

kube_bins_present() {
  local b
  for b in "$APISERVER_BIN" "$KCM_BIN" "$ETCD_BIN" "$KWOK_BIN"; do [ -x "$b" ] || return 1; done
}

is_component() {
  local c
  for c in "${COMPONENTS[@]}"; do [ "$c" = "$1" ] && return 0; done
  return 1
}

# pid_of NAME prints the recorded pid of a component if that process is still ours: alive
# and running the binary we started, or dev/supervise.sh running it (a recycled pid is not
# ours).
pid_of() {
  local file=$PID_DIR/$1.pid pid exe args
  [ -f "$file" ] || return 1
  pid=$(<"$file")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  # Temporal may be the server on PostgreSQL in the dev server's place (dev/temporal-postgres.sh).
  if [ "$1" = temporal ] && [ "$exe" = "$(readlink -f "$TEMPORAL_SERVER_BIN")" ]; then
    printf '%s\n' "$pid"
    return 0
  fi
  if [ "$exe" != "$(readlink -f "$(component_bin "$1")")" ]; then
    args=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $args == *"$DEV_DIR/supervise.sh "*" $(component_bin "$1") "* ]] || return 1
  fi
  printf '%s\n' "$pid"
}

is_running() { pid_of "$1" >/dev/null; }

# use_stack, for a script that needs the local stack (make e2e, make bench): starts it unless it
# is up, and stops it when the script exits only if it started it here; a stack that was
# already up is left running.
use_stack() {
  started_here=false
  if ! "$DEV_DIR/status.sh" >/dev/null 2>&1; then
    "$DEV_DIR/up.sh"
    started_here=true
  fi
  trap stop_stack_if_started_here EXIT
}

stop_stack_if_started_here() {
  if $started_here; then "$DEV_DIR/down.sh"; fi
}

# proc_alive PID: the process exists and is not a zombie waiting to be reaped. Its main thread
# can be a zombie while its other threads still exit (ps shows "Zl"): those still hold its
# open files (a database among them), so the process counts as alive until they are gone.
proc_alive() {
  local stat tasks
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ] && return 0
  tasks=("/proc/$1/task/"*)
  ((${#tasks[@]} > 1))
}

component_bin() {
  case $1 in
    temporal) echo "$TEMPORAL_BIN" ;;
    etcd) echo "$ETCD_BIN" ;;
    kube-apiserver) echo "$APISERVER_BIN" ;;
    kube-controller-manager) echo "$KCM_BIN" ;;
    kwok | kwok-stuck) echo "$KWOK_BIN" ;;
    fakereboot) echo "$FAKEREBOOT_BIN" ;;
    prometheus) echo "$PROMETHEUS_BIN" ;;
    pushgateway) echo "$PUSHGATEWAY_BIN" ;;
    kube-scheduler) echo "$SCHEDULER_BIN" ;;
    worker) echo "$WORKER_BIN" ;;
    *) return 1 ;;
  esac
}

# show_log_tail NAME prints the last lines of a component's log, for failure reports.
show_log_tail() {
  local file=$LOG_DIR/$1.log
  log "last 30 lines of $file:"
  if [ -f "$file" ]; then tail -n 30 "$file" >&2; else log "(no log)"; fi
}

# wait_until NAME TIMEOUT CHECK... retries CHECK until it succeeds, the component dies, or
# TIMEOUT seconds pass; on failure it prints the component's log tail and returns 1.
wait_until() {
  local name=$1 timeout=$2 deadline
  shift 2
  deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    # Whether the recorded process is alive, not pid_of: for its first milliseconds a process
    # just started is still setsid or nohup on its way to exec the component's binary, which
    # pid_of does not count as ours (that wrongly failed a start as "exited").
    if [ -f "$PID_DIR/$name.pid" ] && ! proc_alive "$(<"$PID_DIR/$name.pid")"; then
      log "$name exited while waiting for: $*"
      show_log_tail "$name"
      return 1
    fi
    if ((SECONDS >= deadline)); then
      log "$name not ready after ${timeout}s: $*"
      show_log_tail "$name"
      return 1
    fi
    sleep 0.2
  done
}

# kube_get PATH does an authenticated GET on the local API server as admin.
kube_get() {
  curl --silent --show-error --fail --max-time 5 \
    --cacert "$PKI_DIR/ca.crt" --cert "$PKI_DIR/admin.crt" --key "$PKI_DIR/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT$1"
}
