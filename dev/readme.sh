#!/usr/bin/env bash
# Runs the README's command blocks, in order, on the local stack that `make demo` left up (its
# worker, its 50 labelled nodes, bin/starter): every command a newcomer copies after
# `make demo` must work as written. The blocks that are `make` targets are left out (make demo
# has run; make test and the benchmarks run on their own). Each block runs as one bash script
# with -euo pipefail, so one failing command fails it, named with its README line.
# Usage: dev/readme.sh   (after make demo)
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO_DIR"
[ -x bin/starter ] || die "dev/readme.sh: no bin/starter; run make demo first"
# shellcheck source=/dev/null
source dev/env
export PATH="$PATH:$(dirname "$TEMPORAL_BIN")"

# blocks prints each unlabelled fenced block of README.md as "LINE<TAB>text", one block per
# NUL-terminated record; a block whose first command is `make` is skipped.
blocks() {
  awk '
    /^```/ {
      if (!open) { open = 1; plain = ($0 == "```"); text = ""; first = NR + 1; next }
      open = 0
      if (plain && text !~ /^make /) printf "%d\t%s%c", first, text, 0
      next
    }
    open { text = text $0 "\n" }
  ' README.md
}

ran=0
while IFS=$'\t' read -r -d '' line block; do
  log "README.md:$line:"
  printf '%s' "$block" | sed 's/^/    /'
  if ! bash -euo pipefail -c "$block"; then
    die "README.md:$line: this block failed as written"
  fi
  ran=$((ran + 1))
done < <(blocks)
[ "$ran" -gt 0 ] || die "dev/readme.sh: found no command block in README.md"

# The README's CLI example starts rollout-from-cli and leaves it running; stop it, so the stack
# is as make demo left it.
bin/starter abort from-cli --wait >/dev/null 2>&1 || true
log "dev/readme.sh: $ran README blocks ran as written"
