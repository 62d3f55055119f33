#!/usr/bin/env bash
# Builds the stack's binaries that are not in the cache yet, one after the other (each
# build uses every core): the Temporal CLI, then the Kubernetes tools. No-op when cached.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
command -v go >/dev/null || die "go is needed to build the stack's binaries"
# Prometheus and its Pushgateway come from Debian's packages.
if [ ! -x "$PROMETHEUS_BIN" ] || [ ! -x "$PUSHGATEWAY_BIN" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing Debian's prometheus and prometheus-pushgateway"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      prometheus prometheus-pushgateway) >/dev/null || die "apt-get install prometheus prometheus-pushgateway failed"
  else
    die "the stack needs Debian's prometheus and prometheus-pushgateway: sudo apt-get install prometheus prometheus-pushgateway"
  fi
fi
"$DEV_DIR/build-temporal.sh"
"$DEV_DIR/build-kube.sh"
