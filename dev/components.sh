# How each component of the local stack is started, where it listens and when it is ready.
# Sourced by up.sh, start-component.sh and status.sh after lib.sh.
# shellcheck shell=bash

# The dev server's dynamic config set back to what a production deployment runs, where the dev
# server's own defaults differ (each measured in bench/results/NOTES.md):
# - start-dev forces a search-attribute cache refresh on every read (so that a new attribute is
#   seen at once in a demo); production caches them.
# - A task queue with one worker gets one partition: with the default four, the worker's
#   pollers and the tasks meet on different partitions and tasks wait to be forwarded.
# - A workflow that starts many children is one hot lock: the history service's own tasks
#   (start a child, record its end) wait for it up to this long instead of the default 500 ms,
#   after which they are refused as "busy" and retried with back-off.
TEMPORAL_PRODUCTION_CONFIG=(
  --dynamic-config-value system.forceSearchAttributesCacheRefreshOnRead=false
  --dynamic-config-value matching.numTaskqueueReadPartitions=1
  --dynamic-config-value matching.numTaskqueueWritePartitions=1
  --dynamic-config-value 'history.cacheNonUserContextLockTimeout="5s"'
)

# component_command NAME sets CMD to the command line that runs the component.
component_command() {
  local stages=$DEV_DIR/kwok
  case $1 in
    temporal)
      # WAL and no fsync: the history survives a stop or a crash of the server (the fault
      # tests restart it), just not of the machine; with fsync on every transition SQLite,
      # not the rollout, would set the pace. A 256 MiB page cache and mmap keep a database grown
      # by a 10,000-node benchmark (~500 MB) from going to the file for every read.
      CMD=("$TEMPORAL_BIN" server start-dev
        --ip 127.0.0.1 --port "$TEMPORAL_PORT" --ui-port "$TEMPORAL_UI_PORT"
        --http-port "$TEMPORAL_HTTP_PORT" --metrics-port "$TEMPORAL_METRICS_PORT"
        --db-filename "$STATE_DIR/temporal.db"
        --sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=off
        --sqlite-pragma cache_size=-262144 --sqlite-pragma mmap_size=1073741824
        --dynamic-config-value system.enableActivityEagerExecution=true
        "${TEMPORAL_PRODUCTION_CONFIG[@]}"
        --search-attribute RolloutName=Keyword --search-attribute RolloutRequester=Keyword
        --log-level warn) ;;
    etcd)
      CMD=("$ETCD_BIN" --name noderollout --data-dir "$STATE_DIR/etcd"
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT"
        --advertise-client-urls "http://127.0.0.1:$ETCD_PORT"
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT"
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT"
        --initial-cluster "noderollout=http://127.0.0.1:$ETCD_PEER_PORT"
        --unsafe-no-fsync
        --quota-backend-bytes $((8 * 1024 * 1024 * 1024))
        --log-level warn) ;;
    kube-apiserver)
      # The endpoint reconciler is off because it refuses a loopback advertise address;
      # the service range is configuration only, nothing routes to it. TaintNodesByCondition
      # is off so new Nodes carry no not-ready taint: no node-lifecycle controller runs to
      # lift it. The watch grace period makes SIGTERM close open watches; without it the
      # server waits for its clients to hang up and takes over 20 s to stop. Privileged Pods
      # are allowed, as kubeadm's API server allows them: a reboot or driver Job is one.
      CMD=("$APISERVER_BIN"
        --etcd-servers "http://127.0.0.1:$ETCD_PORT"
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT"
        --endpoint-reconciler-type none
        --tls-cert-file "$PKI_DIR/apiserver.crt" --tls-private-key-file "$PKI_DIR/apiserver.key"
        --client-ca-file "$PKI_DIR/ca.crt"
        --authorization-mode RBAC
        --service-account-issuer https://kubernetes.default.svc.cluster.local
        --service-account-key-file "$PKI_DIR/sa.pub"
        --service-account-signing-key-file "$PKI_DIR/sa.key"
        --service-cluster-ip-range 10.0.0.0/24
        --disable-admission-plugins TaintNodesByCondition
        --allow-privileged=true
        --shutdown-watch-termination-grace-period 2s
        --max-requests-inflight 2000 --max-mutating-requests-inflight 1000) ;;
    kube-controller-manager)
      # Only the controllers that Jobs, their Pods, namespaces and PodDisruptionBudgets need.
      # No scheduler runs: noderollout pins every Pod with spec.nodeName. As in a real control
      # plane it holds a leader lease and runs under a supervisor: when kube-apiserver is away
      # longer than the renew deadline it loses the lease and exits, and the supervisor starts
      # a fresh one, whose informers and work queues start clean instead of waiting out the
      # back-offs the outage piled up (TestSoakStackJobsCompleteSoonAfterAPIServerOutage: Jobs
      # complete 23.5 s after a 45 s outage, 89.7 s without this). The short lease bounds how
      # long the new process waits for the old lease to expire.
      CMD=("$DEV_DIR/supervise.sh" --pid-file "$PID_DIR/kube-controller-manager.child.pid" "$KCM_BIN"
        --kubeconfig "$KUBECONFIG_FILE"
        --controllers "$KCM_CONTROLLERS"
        --leader-elect=true --leader-elect-resource-lock leases
        --leader-elect-lease-duration 8s --leader-elect-renew-deadline 6s
        --leader-elect-retry-period 2s
        --use-service-account-credentials=false
        --service-account-private-key-file "$PKI_DIR/sa.key"
        --root-ca-file "$PKI_DIR/ca.crt"
        --kube-api-qps 500 --kube-api-burst 1000
        --concurrent-job-syncs 50
        --bind-address 127.0.0.1 --secure-port "$KCM_PORT"
        --cert-dir "$STATE_DIR/kcm") ;;
    kwok)
      # Leases are off: they cost most of a core per 1,000 Nodes and nothing reads them.
      CMD=("$KWOK_BIN" --kubeconfig "$KUBECONFIG_FILE"
        --manage-nodes-with-label-selector 'type=kwok,noderollout.dev/stuck!=true'
        --node-lease-duration-seconds 0
        --server-address "127.0.0.1:$KWOK_PORT"
        --config "$stages/node-ready.yaml" --config "$stages/pod-run.yaml"
        --config "$stages/pod-delete.yaml") ;;
    kwok-stuck)
      # Nodes labelled noderollout.dev/stuck=true become Ready but their Pods never start;
      # they still go away when deleted, so namespaces of timed-out tests can be removed.
      CMD=("$KWOK_BIN" --kubeconfig "$KUBECONFIG_FILE"
        --manage-nodes-with-label-selector 'type=kwok,noderollout.dev/stuck=true'
        --node-lease-duration-seconds 0
        --server-address "127.0.0.1:$KWOK_STUCK_PORT"
        --config "$stages/node-ready.yaml" --config "$stages/pod-delete.yaml") ;;
    fakereboot)
      # Reboots a kwok Node when a Pod annotated noderollout.dev/reboot-downtime runs on it.
      CMD=("$FAKEREBOOT_BIN" --kubeconfig "$KUBECONFIG_FILE") ;;
    pushgateway)
      CMD=("$PUSHGATEWAY_BIN" --web.listen-address "127.0.0.1:$PUSHGATEWAY_PORT") ;;
    prometheus)
      # Scrapes the Pushgateway every second, so a series a test pushes is queryable at once.
      write_prometheus_config
      CMD=("$PROMETHEUS_BIN" --config.file "$STATE_DIR/prometheus.yml"
        --storage.tsdb.path "$STATE_DIR/prometheus" --storage.tsdb.retention.time 1d
        --web.listen-address "127.0.0.1:$PROMETHEUS_PORT" --log.level warn) ;;
    kube-scheduler)
      # Only the peer benchmark needs it (SUC places its Pods by node affinity; noderollout and
      # the baseline set nodeName, which the scheduler skips), so up.sh does not start it: the
      # bench starts it for SUC's runs and stops it after, and its CPU is its own column. Its
      # client limits are the controller manager's; the admin kubeconfig authenticates and
      # authorizes its own endpoint's callers.
      CMD=("$SCHEDULER_BIN" --kubeconfig "$KUBECONFIG_FILE"
        --authentication-kubeconfig "$KUBECONFIG_FILE" --authorization-kubeconfig "$KUBECONFIG_FILE"
        --authentication-skip-lookup=true
        --leader-elect=false
        --kube-api-qps 500 --kube-api-burst 1000
        --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT") ;;
    worker)
      CMD=("$WORKER_BIN" --kubeconfig "$KUBECONFIG_FILE"
        --temporal-address "127.0.0.1:$TEMPORAL_PORT"
        --metrics-listen "127.0.0.1:$WORKER_METRICS_PORT"
        --kube-qps 500 --kube-burst 1000) ;;
    *) die "unknown component: $1 (one of: ${COMPONENTS[*]})" ;;
  esac
}

# write_prometheus_config writes the stack's Prometheus configuration.
write_prometheus_config() {
  cat >"$STATE_DIR/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
- job_name: pushgateway
  honor_labels: true
  static_configs:
  - targets: ["127.0.0.1:$PUSHGATEWAY_PORT"]
YAML
}

KCM_CONTROLLERS=job-controller,garbage-collector-controller,ttl-after-finished-controller,serviceaccount-controller,serviceaccount-token-controller,namespace-controller,pod-garbage-collector-controller,disruption-controller

# component_ports NAME prints the TCP ports the component listens on.
component_ports() {
  case $1 in
    temporal) echo "$TEMPORAL_PORT $TEMPORAL_UI_PORT $TEMPORAL_HTTP_PORT $TEMPORAL_METRICS_PORT" ;;
    etcd) echo "$ETCD_PORT $ETCD_PEER_PORT" ;;
    kube-apiserver) echo "$APISERVER_PORT" ;;
    kube-controller-manager) echo "$KCM_PORT" ;;
    kwok) echo "$KWOK_PORT" ;;
    kwok-stuck) echo "$KWOK_STUCK_PORT" ;;
    kube-scheduler) echo "$SCHEDULER_PORT" ;;
    worker) echo "$WORKER_METRICS_PORT" ;;
    pushgateway) echo "$PUSHGATEWAY_PORT" ;;
    prometheus) echo "$PROMETHEUS_PORT" ;;
  esac
}

# component_ready NAME succeeds when the component serves requests.
component_ready() {
  case $1 in
    temporal)
      "$TEMPORAL_BIN" operator cluster health --address "127.0.0.1:$TEMPORAL_PORT" \
        --command-timeout 5s 2>/dev/null | grep -q SERVING ;;
    etcd) curl -sf --max-time 5 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"' ;;
    kube-apiserver) [ "$(kube_get /readyz)" = ok ] ;;
    kube-controller-manager) [ "$(curl -sfk --max-time 5 "https://127.0.0.1:$KCM_PORT/healthz")" = ok ] ;;
    kwok) curl -sf --max-time 5 "http://127.0.0.1:$KWOK_PORT/healthz" >/dev/null ;;
    kwok-stuck) curl -sf --max-time 5 "http://127.0.0.1:$KWOK_STUCK_PORT/healthz" >/dev/null ;;
    kube-scheduler) [ "$(curl -sfk --max-time 5 "https://127.0.0.1:$SCHEDULER_PORT/healthz")" = ok ] ;;
    worker) curl -sf --max-time 5 "http://127.0.0.1:$WORKER_METRICS_PORT/readyz" >/dev/null ;;
    fakereboot) is_running fakereboot ;;
    pushgateway) curl -sf --max-time 5 "http://127.0.0.1:$PUSHGATEWAY_PORT/-/ready" >/dev/null ;;
    prometheus) curl -sf --max-time 5 "http://127.0.0.1:$PROMETHEUS_PORT/-/ready" >/dev/null ;;
  esac
}

port_in_use() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }

# start_component NAME starts the component in the background unless it already runs.
start_component() {
  local name=$1 port pid
  if pid=$(pid_of "$name"); then
    log "$name already running (pid $pid)"
    return 0
  fi
  [ -x "$(component_bin "$name")" ] || die "$name: $(component_bin "$name") missing; run dev/build.sh"
  for port in $(component_ports "$name"); do
    if port_in_use "$port"; then
      die "$name: port $port on this machine is taken by another process ($(ss -Hltnp "sport = :$port" 2>/dev/null | grep -o 'users:.*' || echo unknown)); stop it or set the port variable (see dev/lib.sh)"
    fi
  done
  component_command "$name"
  mkdir -p "$PID_DIR" "$LOG_DIR"
  printf '\n===== %s start: %s\n' "$(date -u +%FT%TZ)" "${CMD[*]}" >>"$LOG_DIR/$name.log"
  # setsid: the component outlives the shell (and process group) that started it.
  setsid nohup "${CMD[@]}" >>"$LOG_DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$PID_DIR/$name.pid"
  log "started $name (pid $!)"
}

wait_ready() { wait_until "$1" "$READY_TIMEOUT" component_ready "$1"; }

# stop_component NAME sends SIGTERM, then SIGKILL after STOP_TIMEOUT seconds.
stop_component() {
  local name=$1 pid deadline
  if ! pid=$(pid_of "$name"); then
    rm -f "$PID_DIR/$name.pid" "$PID_DIR/$name.child.pid"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + STOP_TIMEOUT))
  while proc_alive "$pid"; do
    if ((SECONDS >= deadline)); then
      log "$name (pid $pid) still running after ${STOP_TIMEOUT}s; sending SIGKILL"
      # The whole process group: a supervised component's child goes with its supervisor.
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1
  done
  deadline=$((SECONDS + 10))
  while proc_alive "$pid"; do
    ((SECONDS < deadline)) || die "$name (pid $pid) survived SIGKILL"
    sleep 0.1
  done
  # Its ports free too, before a start that follows at once (a fault test's restart) checks them.
  for port in $(component_ports "$name"); do
    while port_in_use "$port" && ((SECONDS < deadline)); do sleep 0.1; done
  done
  rm -f "$PID_DIR/$name.pid" "$PID_DIR/$name.child.pid"
  log "stopped $name (pid $pid)"
}
