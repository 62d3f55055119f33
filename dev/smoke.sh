#!/usr/bin/env bash
# Checks a running local stack end to end with dev/cmd/smokejob: Jobs complete, fail with
# an exit code, hang on a stuck Node, and their Pods go when the Jobs are deleted.
# Uses Nodes smoke-0 and smoke-stuck-0 and removes them afterwards. Usage: dev/smoke.sh
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
[ -f "$KUBECONFIG_FILE" ] || die "no $KUBECONFIG_FILE; run dev/up.sh first"
"$DEV_DIR/nodes.sh" 1 --prefix smoke-
"$DEV_DIR/nodes.sh" 1 --prefix smoke-stuck- --label noderollout.dev/stuck=true
trap '"$DEV_DIR/nodes.sh" --delete --prefix smoke- >/dev/null' EXIT
bin=$STATE_DIR/bin/smokejob
(cd "$REPO_DIR" && go build -o "$bin" ./dev/cmd/smokejob)
"$bin" --kubeconfig "$KUBECONFIG_FILE" --node smoke-0 --stuck-node smoke-stuck-0 "$@"
