#!/usr/bin/env bash
# Starts one component of the local stack again, on its existing data, and waits until it
# is ready. Usage: dev/start-component.sh NAME   (names: see dev/status.sh)
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=SCRIPTDIR/components.sh
source "$DEV_DIR/components.sh"
if [ $# -ne 1 ] || ! is_component "$1"; then
  die "usage: dev/start-component.sh NAME (one of: ${COMPONENTS[*]})"
fi
[ -f "$PKI_DIR/done" ] || die "no stack state in $STATE_DIR; run dev/up.sh first"
# A component that exits while it starts is started again, twice at most: the Temporal dev
# server picks its internal services' ports itself, and another process of a busy machine can
# take one before it binds it. One that runs but is not ready in time is not retried.
for attempt in 1 2 3; do
  start_component "$1"
  if wait_ready "$1"; then
    log "$1 ready"
    exit 0
  fi
  is_running "$1" && die "$1 is running but not ready after ${READY_TIMEOUT}s"
  log "$1 exited while starting (attempt $attempt of 3)"
done
die "$1 did not start"
