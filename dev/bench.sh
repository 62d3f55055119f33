#!/usr/bin/env bash
# make bench / make bench-quick: the scale benchmark (bench/) on the local stack. Starts the
# stack when it is not up and stops it again at the end; a stack that was up is left running.
#   dev/bench.sh full    100, 1,000 and 10,000 nodes; results into bench/results/ (committed)
#   dev/bench.sh quick   100 and 1,000 nodes; results into $STATE_DIR/bench-quick/. Exits 1 if
#                        noderollout's median makespan at 1,000 nodes exceeds 1.8x the baseline's or
#                        any node is lost.
# Extra arguments go to the bench program (cd bench && go run . --help), e.g. --sizes 100,500.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"

mode=${1:-quick}
shift || true
case $mode in
  full) out=$REPO_DIR/bench/results ;;
  quick) out=$STATE_DIR/bench-quick ;;
  *) die "usage: dev/bench.sh full|quick [bench flags]" ;;
esac

started_here=false
if ! "$DEV_DIR/status.sh" >/dev/null 2>&1; then
  "$DEV_DIR/up.sh"
  started_here=true
fi
cleanup() {
  if $started_here; then "$DEV_DIR/down.sh"; fi
}
trap cleanup EXIT
# shellcheck source=/dev/null
source "$ENV_FILE"

bin=$STATE_DIR/bin/bench
work=$LOG_DIR/bench
mkdir -p "$bin" "$work"
(cd "$REPO_DIR" && go build -o "$bin/" ./worker)
(cd "$REPO_DIR/bench" && go build -o "$bin/" . ./baseline ./floorworker)
log "bench $mode: logs in $work, results in $out"
cd "$REPO_DIR"
"$bin/bench" --mode "$mode" --out "$out" --work-dir "$work" \
  --worker-bin "$bin/worker" --baseline-bin "$bin/baseline" --floor-bin "$bin/floorworker" \
  --kubeconfig "$KUBECONFIG" --temporal-address "$TEMPORAL_ADDRESS" --temporal-metrics "127.0.0.1:$TEMPORAL_METRICS_PORT" --state-dir "$STATE_DIR" "$@"
