#!/usr/bin/env bash
# make bench / make bench-quick: the scale benchmark (bench/) on the local stack. Starts the
# stack when it is not up and stops it again at the end; a stack that was up is left running.
#   dev/bench.sh full    100, 1,000 and 10,000 nodes; results into bench/results/ (committed)
#   dev/bench.sh quick   100 and 1,000 nodes; results into $STATE_DIR/bench-quick/. Then the peer
#                        (system-upgrade-controller, as shipped and with its client rate limit
#                        raised) beside the baseline and noderollout at 100 nodes, none failing
#                        (SUC never gives up on a failing node); results in bench-quick/peer/.
#                        Exits 1 if noderollout's median makespan at 1,000 nodes exceeds 1.8x the
#                        baseline's, if any noderollout run costs more than 6 Temporal actions per
#                        node (D = 5 s; or its action counter could not be read), or any node is lost.
#   dev/bench.sh scale   noderollout alone on 100,000 fake Nodes (bench/fakeworker: its workflows on the
#                        real Temporal server, a Kubernetes fake at the activity boundary); results into
#                        bench/results/scale/
# Extra arguments go to the bench program (cd bench && go run . --help), e.g. --sizes 100,500;
# with any, quick runs only what they say (the peer's part is left out unless they name it).
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"

mode=${1:-quick}
shift || true
case $mode in
  full) out=$REPO_DIR/bench/results ;;
  quick) out=$STATE_DIR/bench-quick ;;
  scale) out=$REPO_DIR/bench/results/scale ;;
  *) die "usage: dev/bench.sh full|quick|scale [bench flags]" ;;
esac

use_stack
# shellcheck source=/dev/null
source "$ENV_FILE"

# The peer's part of quick: SUC and the scheduler it needs (both cached after the first build).
ci_quick=false
if [ "$mode" = quick ] && [ $# -eq 0 ]; then ci_quick=true; fi
peer_quick=$ci_quick
# The peer is built from a source snapshot beside the repository (../shared/peers); a machine
# without it (and without a cached build) runs the other rows and says what it left out.
if $peer_quick && ! { [ -x "$SUC_BIN" ] && [ -x "$SUC_QPS_BIN" ]; } && [ ! -f "$SUC_TARBALL" ]; then
  log "bench quick: the peer's rows are left out: no SUC source snapshot at $SUC_TARBALL and no cached build (set NODEROLLOUT_PEERS to the directory holding it)"
  peer_quick=false
fi
if $peer_quick || [[ " $* " == *suc* ]]; then
  "$DEV_DIR/build-kube.sh"
  "$DEV_DIR/build-suc.sh"
fi

bin=$STATE_DIR/bin/bench
work=$LOG_DIR/bench
mkdir -p "$bin" "$work"
(cd "$REPO_DIR" && go build -o "$bin/" ./worker ./starter)
(cd "$REPO_DIR/bench" && go build -o "$bin/" . ./baseline ./floorworker ./fakeworker)
log "bench $mode: logs in $work, results in $out"
cd "$REPO_DIR"
common=(--work-dir "$work"
  --worker-bin "$bin/worker" --baseline-bin "$bin/baseline" --floor-bin "$bin/floorworker" --starter-bin "$bin/starter"
  --suc-bin "$SUC_BIN" --suc-qps-bin "$SUC_QPS_BIN" --dev-dir "$DEV_DIR"
  --kubeconfig "$KUBECONFIG" --temporal-address "$TEMPORAL_ADDRESS" --temporal-metrics "127.0.0.1:$TEMPORAL_METRICS_PORT" --state-dir "$STATE_DIR")
# CI's quick run holds the cost per node in Temporal actions too (issue 36: at most 6 at D = 5 s).
gates=()
if $ci_quick; then gates=(--gate-actions 6); fi
if [ "$mode" = scale ]; then
  "$bin/bench" --mode quick --out "$out" "${common[@]}" --fake-kube-bin "$bin/fakeworker" \
    --sizes 100000 --systems noderollout --fail-percent 0 --trace=false "$@"
  exit
fi
status=0
"$bin/bench" --mode "$mode" --out "$out" "${common[@]}" "${gates[@]}" "$@" || status=$?
if $peer_quick; then
  log "bench quick: the peer at 100 nodes, results in $out/peer"
  "$bin/bench" --mode quick --out "$out/peer" "${common[@]}" "${gates[@]}" \
    --sizes 100 --fail-percent 0 --systems baseline,noderollout,suc,suc-qps --suc-tail=false || status=$?
fi
exit "$status"
