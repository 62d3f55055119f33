#!/usr/bin/env bash
# Builds the benchmark's peer, Rancher system-upgrade-controller (SUC), into the cache, once
# per version and patch: from the source snapshot in $PEERS_DIR (checked against its SHA-256),
# its dependencies through the Go module proxy (its go.sum pins them). Two binaries:
#   system-upgrade-controller       as shipped (bench system suc)
#   system-upgrade-controller-qps   with dev/peers/suc-client-qps.patch (bench system suc-qps)
# Cold: ~3 min on 2 cores with its modules to download (bench/README.md, "The peer").
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
if [ -x "$SUC_BIN" ] && [ -x "$SUC_QPS_BIN" ]; then exit 0; fi
[ -f "$SUC_TARBALL" ] || die "no SUC source snapshot at $SUC_TARBALL (set NODEROLLOUT_PEERS to the directory holding it)"
echo "$SUC_TARBALL_SHA256  $SUC_TARBALL" | sha256sum --check --status ||
  die "$SUC_TARBALL does not match its pinned SHA-256 ($SUC_TARBALL_SHA256)"
command -v patch >/dev/null || die "patch is needed to build the peer's rate-limit variant"
log "building system-upgrade-controller v$SUC_VERSION (as shipped and with its client rate limit raised)"
tmp=$SUC_BIN_DIR.tmp
rm -rf "$tmp"; mkdir -p "$tmp/src"
tar -xzf "$SUC_TARBALL" -C "$tmp/src" --strip-components=1
ldflags="-s -w -X github.com/rancher/system-upgrade-controller/pkg/version.Version=v$SUC_VERSION -X github.com/rancher/system-upgrade-controller/pkg/version.GitCommit=${SUC_COMMIT:0:8}"
(
  cd "$tmp/src"
  # -mod=readonly: exactly the dependencies its go.mod and go.sum name.
  go build -mod=readonly -buildvcs=false -trimpath -ldflags "$ldflags" -o "$tmp/system-upgrade-controller" .
  patch -p1 --quiet <"$SUC_PATCH"
  go build -mod=readonly -buildvcs=false -trimpath -ldflags "$ldflags" -o "$tmp/system-upgrade-controller-qps" .
)
rm -rf "$tmp/src"
rm -rf "$SUC_BIN_DIR"; mv "$tmp" "$SUC_BIN_DIR"
log "system-upgrade-controller ready in $SUC_BIN_DIR"
