#!/usr/bin/env bash
# make demo: the local stack, 50 fake nodes, the worker, and a rollout of a sample Job over
# all of them with parallelism 10, followed live. The stack stays up afterwards.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"

"$DEV_DIR/up.sh"
"$DEV_DIR/nodes.sh" 50 --prefix demo-node- --label noderollout.dev/demo=true
"$DEV_DIR/worker.sh" start
# bin/worker and bin/starter, as README's "A first rollout" runs them afterwards.
make -C "$REPO_DIR" --no-print-directory build
# A demo is run again and again: let a finished demo rollout run anew (every node is already
# done for this template then, so ask for a rerun).
"$REPO_DIR/bin/starter" start -f "$DEV_DIR/demo.yaml" --wait --allow-rerun \
  --temporal-address "127.0.0.1:$TEMPORAL_PORT" --ui-address "http://127.0.0.1:$TEMPORAL_UI_PORT"
cat <<DONE

The stack is still up:
  Temporal UI:  http://127.0.0.1:$TEMPORAL_UI_PORT/namespaces/default/workflows
  kubeconfig:   $KUBECONFIG_FILE      (source dev/env to use it and the Temporal CLI)
  worker log:   $LOG_DIR/worker.log
Stop everything with: make down
DONE
