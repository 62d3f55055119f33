#!/usr/bin/env bash
# Runs a command and starts it again whenever it exits, as kubelet or systemd restart a
# control-plane component: kube-controller-manager exits when it loses its leader lease (for
# example while kube-apiserver is away) and comes back with fresh informers. SIGTERM stops
# the command, then the supervisor. --pid-file FILE: write the running command's pid there
# (the bench reads the component's CPU from it).
# Usage: dev/supervise.sh [--pid-file FILE] COMMAND [ARGS...]
set -uo pipefail
pid_file=
if [ "${1:-}" = --pid-file ]; then
  pid_file=$2
  shift 2
fi
child=
stopping=false
stop() {
  stopping=true
  if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; fi
}
trap stop TERM INT
restarts=0
while true; do
  "$@" &
  child=$!
  if [ -n "$pid_file" ]; then echo "$child" >"$pid_file"; fi
  # wait returns early when a trapped signal arrives; wait again until the child is gone.
  code=0
  while kill -0 "$child" 2>/dev/null; do
    wait "$child"
    code=$?
  done
  child=
  if $stopping; then exit 0; fi
  restarts=$((restarts + 1))
  printf '[supervise] %s: %s exited with code %d; restart %d in 1 s\n' \
    "$(date -u +%FT%TZ)" "$(basename "$1")" "$code" "$restarts"
  sleep 1 &
  wait $!
  if $stopping; then exit 0; fi
done
