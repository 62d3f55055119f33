#!/usr/bin/env bash
# Stops the local stack (SIGTERM, then SIGKILL after $STOP_TIMEOUT s), newest component
# first. Usage: dev/down.sh [--purge]    --purge also deletes $STATE_DIR (all data).
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=SCRIPTDIR/components.sh
source "$DEV_DIR/components.sh"

purge=false
case ${1:-} in
  --purge) purge=true ;;
  "") ;;
  *) die "usage: dev/down.sh [--purge]" ;;
esac

# A second cluster a test started (dev/cluster2.sh) goes with the stack.
if [ -d "$STATE_DIR/cluster2" ]; then "$DEV_DIR/cluster2.sh" down; fi
# So does the PostgreSQL that the bench's PostgreSQL row put under Temporal.
if [ -f "$PID_DIR/postgres.pid" ]; then "$DEV_DIR/temporal-postgres.sh" stop; fi
for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do stop_component "${COMPONENTS[i]}"; done

if $purge && [ -d "$STATE_DIR" ]; then
  case $(cd "$STATE_DIR" && pwd -P) in
    / | "$HOME" | "$(cd "$REPO_DIR" && pwd -P)") die "refusing to purge $STATE_DIR" ;;
  esac
  rm -rf "$STATE_DIR"
  log "removed $STATE_DIR"
fi
