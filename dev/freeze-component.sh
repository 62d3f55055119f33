#!/usr/bin/env bash
# Freezes one component of the local stack (SIGSTOP): it keeps its sockets, so callers connect
# and then hear nothing, as from a hung process or a partitioned host; --thaw resumes it.
# Usage: dev/freeze-component.sh [--thaw] NAME   (names: see dev/status.sh)
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=SCRIPTDIR/components.sh
source "$DEV_DIR/components.sh"
signal=STOP
if [ "${1:-}" = --thaw ]; then
  signal=CONT
  shift
fi
if [ $# -ne 1 ] || ! is_component "$1"; then
  die "usage: dev/freeze-component.sh [--thaw] NAME (one of: ${COMPONENTS[*]})"
fi
pid=$(pid_of "$1") || die "$1 is not running"
# The component runs in its own session (start_component): its whole group, a supervisor's
# child included.
kill -"$signal" -- "-$pid"
log "sent SIG$signal to $1 (process group $pid)"
