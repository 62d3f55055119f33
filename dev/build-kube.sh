#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok from dev/tools (a
# module of its own) into the cache, once per version set. One `go build` for all five, so the
# packages they share compile once. Cold: 20-40 min on 2 cores, and some GB of Go build cache;
# the scheduler adds 6 packages of its own and a link to that (~20 s). A cache built before the
# scheduler was added gets the scheduler alone, next to the binaries a running stack may be using.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=${KUBE_VERSION%%.*} -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$KUBE_VERSION")"
cd "$DEV_DIR/tools"
if kube_bins_present; then
  [ -x "$SCHEDULER_BIN" ] && exit 0
  log "building kube-scheduler v$KUBE_VERSION"
  go build -mod=readonly -buildvcs=false -trimpath -o "$SCHEDULER_BIN.tmp" -ldflags "$ldflags" \
    k8s.io/kubernetes/cmd/kube-scheduler
  mv "$SCHEDULER_BIN.tmp" "$SCHEDULER_BIN"
  log "kube-scheduler ready: $SCHEDULER_BIN"
  exit 0
fi
log "building kube-apiserver, kube-controller-manager, kube-scheduler v$KUBE_VERSION, etcd v$ETCD_VERSION, kwok v$KWOK_VERSION"
tmp=$KUBE_BIN_DIR.tmp
rm -rf "$tmp"; mkdir -p "$tmp"
# -mod=readonly: the build must match the committed go.mod and go.sum exactly.
go build -mod=readonly -buildvcs=false -trimpath -o "$tmp/" -ldflags "$ldflags" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  ./etcd \
  sigs.k8s.io/kwok/cmd/kwok
rm -rf "$KUBE_BIN_DIR"; mv "$tmp" "$KUBE_BIN_DIR"
log "kube tools ready in $KUBE_BIN_DIR"
