#!/usr/bin/env bash
# Creates fake (kwok) Nodes in the local stack, in parallel, and waits until they are Ready.
# Usage: dev/nodes.sh N [--prefix P] [--label k=v ...]    create P0 .. P(N-1)
#        dev/nodes.sh --delete [--prefix P]               delete Nodes named P*
# Defaults: --prefix kwok-node-. Every Node gets label type=kwok (kwok manages it), no taints.
# A Node labelled noderollout.dev/stuck=true is Ready but its Pods never start.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
[ -f "$KUBECONFIG_FILE" ] || die "no $KUBECONFIG_FILE; run dev/up.sh first"
bin=$STATE_DIR/bin/fakenodes
# go build relinks only when a source changed, so repeated calls start at once.
(cd "$REPO_DIR" && go build -o "$bin" ./dev/cmd/fakenodes)
exec "$bin" --kubeconfig "$KUBECONFIG_FILE" "$@"
