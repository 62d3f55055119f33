#!/usr/bin/env bash
# A second Kubernetes cluster beside the local stack (its own etcd, kube-apiserver,
# kube-controller-manager and kwok on other ports; no Temporal: both clusters' workers share
# the stack's), for the fleet tests that roll one change over two clusters.
# Usage: dev/cluster2.sh up|down     prints nothing else; its kubeconfig: dev/cluster2.sh kubeconfig
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"

export NODEROLLOUT_STATE=$STATE_DIR/cluster2
export ETCD_PORT=2381 ETCD_PEER_PORT=2382 APISERVER_PORT=6444 KCM_PORT=10267
export KWOK_PORT=10251 KWOK_STUCK_PORT=10252

case ${1:-} in
  up) exec "$DEV_DIR/up.sh" --kube-only ;;
  down) exec "$DEV_DIR/down.sh" --purge ;;
  kubeconfig) echo "$NODEROLLOUT_STATE/kubeconfig" ;;
  *) die "usage: dev/cluster2.sh up|down|kubeconfig" ;;
esac
