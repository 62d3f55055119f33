#!/usr/bin/env bash
# Runs the noderollout worker against the local stack, as a stack component (pid and log in
# the state dir, stopped by dev/down.sh).
# Usage: dev/worker.sh start|stop|restart
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=SCRIPTDIR/components.sh
source "$DEV_DIR/components.sh"

case ${1:-start} in
  start)
    (cd "$REPO_DIR" && go build -o "$WORKER_BIN" ./worker)
    start_component worker
    wait_ready worker
    log "worker ready: metrics on http://127.0.0.1:$WORKER_METRICS_PORT/metrics, log $LOG_DIR/worker.log"
    ;;
  stop) stop_component worker ;;
  restart)
    stop_component worker
    "$0" start
    ;;
  *) die "usage: dev/worker.sh start|stop|restart" ;;
esac
