#!/usr/bin/env bash
# Stops one component of the local stack, keeping its data, e.g. to test how the worker
# rides out an outage. Usage: dev/stop-component.sh NAME   (names: see dev/status.sh)
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=SCRIPTDIR/components.sh
source "$DEV_DIR/components.sh"
if [ $# -ne 1 ] || ! is_component "$1"; then
  die "usage: dev/stop-component.sh NAME (one of: ${COMPONENTS[*]})"
fi
stop_component "$1"
