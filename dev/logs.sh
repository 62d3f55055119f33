#!/usr/bin/env bash
# Shows a component's log. Usage: dev/logs.sh NAME [-f]   (names: see dev/status.sh)
#   -f  follow the log, like tail -f
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
if [ $# -lt 1 ] || ! is_component "$1"; then
  die "usage: dev/logs.sh NAME [-f] (one of: ${COMPONENTS[*]})"
fi
file=$LOG_DIR/$1.log
[ -f "$file" ] || die "no log at $file"
case ${2:-} in
  -f) exec tail -n 100 -F "$file" ;;
  "") exec tail -n 200 "$file" ;;
  *) die "usage: dev/logs.sh NAME [-f]" ;;
esac
