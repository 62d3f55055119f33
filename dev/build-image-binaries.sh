#!/bin/sh
# Builds the static, stripped worker and starter binaries of the container image into OUT_DIR.
# The Dockerfile's build stage runs exactly this, and deploy/deploy_test.go runs it too, so the
# flags live here only. POSIX sh: the build stage may have no bash.
# Usage: dev/build-image-binaries.sh OUT_DIR
set -eu
out=${1:?usage: dev/build-image-binaries.sh OUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$out/" ./worker ./starter
