#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, etcd and kwok from dev/tools (a module of
# its own) into the cache, once per version set. One `go build` for all four, so the packages
# they share compile once. Cold: 20-40 min on 2 cores, and some GB of Go build cache.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
if kube_bins_present; then exit 0; fi
log "building kube-apiserver, kube-controller-manager v$KUBE_VERSION, etcd v$ETCD_VERSION, kwok v$KWOK_VERSION"
tmp=$KUBE_BIN_DIR.tmp
rm -rf "$tmp"; mkdir -p "$tmp"
cd "$DEV_DIR/tools"
# -mod=readonly: the build must match the committed go.mod and go.sum exactly.
go build -mod=readonly -buildvcs=false -trimpath -o "$tmp/" \
  -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=${KUBE_VERSION%%.*} -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$KUBE_VERSION")" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  ./etcd \
  sigs.k8s.io/kwok/cmd/kwok
rm -rf "$KUBE_BIN_DIR"; mv "$tmp" "$KUBE_BIN_DIR"
log "kube tools ready in $KUBE_BIN_DIR"
