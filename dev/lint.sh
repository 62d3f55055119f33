#!/usr/bin/env bash
# make vet's static checks beyond go vet: staticcheck, and govulncheck against the Go
# vulnerability database. Both tools are built from dev/lint (a module of its own, pinned
# there) through the Go module proxy; the database is built from the OSV entries of
# golang.org/x/vulndb, also fetched through the module proxy, because nothing else is
# reachable from CI. Cached in $CACHE_DIR/lint after the first run.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"

# The vulnerability data: bump to a newer pseudo-version of golang.org/x/vulndb to refresh it.
VULNDB_VERSION=v0.0.0-20261105234957-e22db6528018

lint_bin=$CACHE_DIR/lint/bin
db_dir=$CACHE_DIR/lint/vulndb-$VULNDB_VERSION
(cd "$DEV_DIR/lint" && go build -o "$lint_bin/" honnef.co/go/tools/cmd/staticcheck golang.org/x/vuln/cmd/govulncheck)
if [ ! -f "$db_dir/index/db.json" ]; then
  osv=$(cd "$DEV_DIR/lint" && go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')/data/osv
  (cd "$REPO_DIR" && go run ./dev/cmd/vulndb -osv "$osv" -out "$db_dir.tmp")
  rm -rf "$db_dir" && mv "$db_dir.tmp" "$db_dir"
fi

cd "$REPO_DIR"
log "staticcheck"
"$lint_bin/staticcheck" ./...
for module in bench deploy test; do
  (cd "$REPO_DIR/$module" && "$lint_bin/staticcheck" -tags e2e ./...)
done
# govulncheck looks at what ships: the worker and starter's module.
log "govulncheck (database golang.org/x/vulndb@$VULNDB_VERSION)"
"$lint_bin/govulncheck" -db "file://$db_dir" -format json ./... | go run ./dev/cmd/vulngate
