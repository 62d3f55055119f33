#!/usr/bin/env bash
# Builds the Temporal CLI (dev server + UI) from the Go module proxy into the cache, once per version.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
if [ -x "$TEMPORAL_BIN" ]; then exit 0; fi
log "building temporal CLI v$TEMPORAL_CLI_VERSION (cold: ~12 min on 2 cores)"
tmp=$(dirname "$TEMPORAL_BIN").tmp
rm -rf "$tmp"; mkdir -p "$tmp"
GOBIN=$tmp GOFLAGS=-mod=mod go install \
  -ldflags="-s -w -X github.com/temporalio/cli/temporalcli.Version=$TEMPORAL_CLI_VERSION" \
  "github.com/temporalio/cli/cmd/temporal@v$TEMPORAL_CLI_VERSION"
rm -rf "$(dirname "$TEMPORAL_BIN")"; mv "$tmp" "$(dirname "$TEMPORAL_BIN")"
log "temporal CLI ready: $TEMPORAL_BIN"
