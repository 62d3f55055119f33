#!/usr/bin/env bash
# Shows each component of the local stack: pid, readiness, resident memory, and the total.
# Exits 0 only when every stack component (the worker and kube-scheduler are optional) runs and is ready. Usage: dev/status.sh
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=SCRIPTDIR/components.sh
source "$DEV_DIR/components.sh"

# rss_kib PID prints the resident set size of a process in KiB.
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

healthy=true total=0
printf '%-24s %-8s %-8s %10s\n' COMPONENT PID STATE RSS_MIB
for c in "${COMPONENTS[@]}"; do
  if pid=$(pid_of "$c"); then
    rss=$(rss_kib "$pid")
    total=$((total + rss))
    if component_ready "$c"; then state=ready; else state=starting; healthy=false; fi
    printf '%-24s %-8s %-8s %10d\n' "$c" "$pid" "$state" $((rss / 1024))
  else
    printf '%-24s %-8s %-8s %10s\n' "$c" - stopped -
    # The worker and the scheduler are optional: make demo and dev/worker.sh start the worker
    # (tests run their own), the peer benchmark the scheduler.
    case $c in worker | kube-scheduler) ;; *) healthy=false ;; esac
  fi
done
printf '%-24s %-8s %-8s %10d\n' total "" "" $((total / 1024))
echo "state: $STATE_DIR"
$healthy
