#!/usr/bin/env bash
# make e2e: runs the end-to-end suite on the local stack. Starts the stack when it is not
# up, and then stops it again at the end (a stack that was already up is left running).
# Extra arguments go to go test, e.g. dev/e2e.sh -run TestRerun. The terminal (and CI's log)
# gets the tests' verdicts and logs, and every Pod the kwok watchdog found stuck.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"

use_stack
# shellcheck source=/dev/null
source "$STATE_DIR/env"
export E2E_LOG_DIR=$LOG_DIR TEMPORAL_CLI=$TEMPORAL_BIN E2E_TEMPORAL_METRICS=127.0.0.1:$TEMPORAL_METRICS_PORT
cd "$REPO_DIR/test"
set +e
go test -tags e2e -count=1 -timeout 60m -v "$@" ./e2e/ 2>&1 | tee "$LOG_DIR/e2e.out" |
  grep --line-buffered -E '^(\s*--- (PASS|FAIL|SKIP)|ok|FAIL|PASS|panic|e2e: kwok watchdog:)|_test.go:[0-9]+:'
status=${PIPESTATUS[0]}
set -e
[ "$status" -eq 0 ] || log "end-to-end tests failed; full output in $LOG_DIR/e2e.out, worker logs in $LOG_DIR"
exit "$status"
