#!/usr/bin/env bash
# Builds the Temporal server (the version the dev server embeds) and its SQL schema tool from the
# Go module proxy into the cache, once per version. Only the PostgreSQL bench row needs them.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
if [ -x "$TEMPORAL_SERVER_BIN" ] && [ -x "$TEMPORAL_SQL_TOOL_BIN" ]; then exit 0; fi
log "building the Temporal server v$TEMPORAL_SERVER_VERSION and its SQL tool"
tmp=$TEMPORAL_SERVER_DIR.tmp
rm -rf "$tmp"; mkdir -p "$tmp"
GOBIN=$tmp GOFLAGS=-mod=mod go install -ldflags="-s -w" \
  "go.temporal.io/server/cmd/server@v$TEMPORAL_SERVER_VERSION" \
  "go.temporal.io/server/cmd/tools/sql@v$TEMPORAL_SERVER_VERSION"
rm -rf "$TEMPORAL_SERVER_DIR"; mv "$tmp" "$TEMPORAL_SERVER_DIR"
log "Temporal server ready: $TEMPORAL_SERVER_BIN"
