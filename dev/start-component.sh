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
start_component "$1"
wait_ready "$1"
log "$1 ready"
