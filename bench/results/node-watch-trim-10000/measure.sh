#!/usr/bin/env bash
# Idle worker with 10,000 kwok Nodes: RSS, Go heap and CPU, before and after the node-watch trim.
# Usage: REPO=<clone> STATE=<state dir> OUT=<dir with old-worker and new-worker> measure.sh
# (old-worker built at e319632, new-worker at 4c99775; each: go build -o ... ./worker).
set -euo pipefail
export GOTOOLCHAIN=auto
export NODEROLLOUT_STATE=$STATE
cd "$REPO"
source dev/lib.sh
dev/up.sh
dev/worker.sh stop || true
go run ./dev/cmd/fakenodes --kubeconfig "$KUBECONFIG_FILE" 10000
measure() { # label bin
  local port=19099
  "$2" --kubeconfig "$KUBECONFIG_FILE" --temporal-address "127.0.0.1:$TEMPORAL_PORT" \
    --metrics-listen "127.0.0.1:$port" --kube-qps 500 --kube-burst 1000 > $OUT/$1.log 2>&1 &
  local pid=$!
  for _ in $(seq 600); do curl -sf --max-time 2 "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.5; done
  local t0; t0=$(awk '{print $14+$15}' /proc/$pid/stat)
  sleep 60 # the measurement window: an idle worker's minute
  local t1; t1=$(awk '{print $14+$15}' /proc/$pid/stat)
  local heap; heap=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^go_memstats_heap_inuse_bytes /{printf "%.1f", $2/1048576}')
  local rss hwm; rss=$(awk '/VmRSS/{printf "%.1f",$2/1024}' /proc/$pid/status); hwm=$(awk '/VmHWM/{printf "%.1f",$2/1024}' /proc/$pid/status)
  echo "$1 rss_MB=$rss peak_MB=$hwm heap_inuse_MB=$heap cpu_s_per_idle_min=$(echo "($t1-$t0)/100" | bc -l | cut -c1-5)" | tee -a $OUT/results.txt
  kill $pid; wait $pid || true
}
: > $OUT/results.txt
measure before-1 $OUT/old-worker
measure after-1 $OUT/new-worker
measure after-2 $OUT/new-worker
measure before-2 $OUT/old-worker
dev/down.sh --purge
