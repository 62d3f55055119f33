#!/usr/bin/env bash
# Builds the stack's binaries that are not in the cache yet, one after the other (each
# build uses every core): the Temporal CLI, then the Kubernetes tools. No-op when cached.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
command -v go >/dev/null || die "go is needed to build the stack's binaries"
"$DEV_DIR/build-temporal.sh"
"$DEV_DIR/build-kube.sh"
