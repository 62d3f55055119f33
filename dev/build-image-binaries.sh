#!/bin/sh
# Builds the static, stripped worker and starter binaries of the container image into OUT_DIR.
# The Dockerfile's build stage runs exactly this, and deploy/deploy_test.go runs it too, so the
# flags live here only. POSIX sh: the build stage may have no bash.
# Usage: dev/build-image-binaries.sh OUT_DIR
set -eu
out=${1:?usage: dev/build-image-binaries.sh OUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
# VERSION and COMMIT: given by the Dockerfile's build arguments (the image has no .git), else
# read from git. `starter version`, `worker --version` and noderollout_build_info show them.
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
commit=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
pkg=github.com/noderollout/noderollout/internal/version
# At least the Go that go.mod's toolchain line names: older ones have known vulnerabilities in
# the standard library these binaries reach.
export GOTOOLCHAIN=auto
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X $pkg.Version=$version -X $pkg.Commit=$commit" -o "$out/" ./worker ./starter
