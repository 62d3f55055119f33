#!/usr/bin/env bash
# Puts the stack's Temporal on PostgreSQL, as self-hosters run it, for the bench's PostgreSQL row.
#   dev/temporal-postgres.sh up     stops the dev server (SQLite), starts PostgreSQL (Debian's
#                                   package; installed with apt when missing) with a fresh database
#                                   and the Temporal server (dev/build-temporal-server.sh) in its
#                                   place: same ports, same dynamic config, same search attributes.
#   dev/temporal-postgres.sh down   stops both and starts the dev server again.
#   dev/temporal-postgres.sh stop   stops both (dev/down.sh calls it).
# The server's pid is written as the stack's temporal.pid and PostgreSQL's postmaster as
# postgres.pid, so the bench charges both (every backend included) to Temporal.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"

PG_PORT=${PG_PORT:-5433}
PG_DIR=$STATE_DIR/postgres
SERVER_DIR=$STATE_DIR/temporal-postgres

# pg_bin NAME: a PostgreSQL program, from PATH or Debian's versioned directory.
pg_bin() {
  if command -v "$1" >/dev/null; then command -v "$1"; return; fi
  local found
  found=$(find /usr/lib/postgresql -path "*/bin/$1" 2>/dev/null | sort -V | tail -1)
  [ -n "$found" ] || return 1
  echo "$found"
}

ensure_postgres() {
  pg_bin pg_ctl >/dev/null && return 0
  [ "$(id -u)" = 0 ] || die "PostgreSQL is not installed: run 'sudo apt-get install -y postgresql'"
  log "installing PostgreSQL from Debian's packages"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null
}

# as_pg runs a PostgreSQL program as the postgres user when we are root (it refuses root).
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

psql_admin() {
  as_pg "$(pg_bin psql)" -h 127.0.0.1 -p "$PG_PORT" -U postgres -v ON_ERROR_STOP=1 -q "$@"
}

start_postgres() {
  rm -rf "$PG_DIR"; mkdir -p "$PG_DIR"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$PG_DIR"; fi
  as_pg "$(pg_bin initdb)" -D "$PG_DIR" -U postgres --auth=trust >/dev/null
  touch "$LOG_DIR/postgres.log"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$LOG_DIR/postgres.log"; fi
  # Server settings as a small self-hosted install would have them; durability left on.
  as_pg "$(pg_bin pg_ctl)" -D "$PG_DIR" -l "$LOG_DIR/postgres.log" -w -o \
    "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c max_connections=200 -c shared_buffers=256MB" start >/dev/null
  head -1 "$PG_DIR/postmaster.pid" > "$PID_DIR/postgres.pid"
  psql_admin -c "CREATE ROLE temporal LOGIN PASSWORD 'temporal' CREATEDB"
  log "postgres: 127.0.0.1:$PG_PORT, data in $PG_DIR"
}

# sql_tool DB ARGS...: the Temporal SQL schema tool on one of our databases.
sql_tool() {
  local db=$1
  shift
  "$TEMPORAL_SQL_TOOL_BIN" --plugin postgres12 --ep 127.0.0.1 -p "$PG_PORT" -u temporal --pw temporal --db "$db" "$@"
}

setup_schemas() {
  local db schema
  for db in temporal temporal_visibility; do
    schema=postgresql/v12/temporal
    if [ "$db" = temporal_visibility ]; then schema=postgresql/v12/visibility; fi
    {
      sql_tool "$db" create-database
      sql_tool "$db" setup-schema -v 0.0
      sql_tool "$db" update-schema --schema-name "$schema"
    } >>"$LOG_DIR/temporal-sql-tool.log" 2>&1 || die "schema setup of $db failed: $LOG_DIR/temporal-sql-tool.log"
  done
}

# write_config: the server configured as the dev server configures itself (one history shard,
# its ports, its metrics), with its persistence on PostgreSQL.
write_config() {
  mkdir -p "$SERVER_DIR/config"
  store() { # store NAME DATABASE CONNS
    cat <<EOF
    $1:
      sql:
        pluginName: postgres12
        databaseName: $2
        connectAddr: "127.0.0.1:$PG_PORT"
        connectProtocol: tcp
        user: temporal
        password: temporal
        maxConns: $3
        maxIdleConns: $3
        maxConnLifetime: 1h
EOF
  }
  {
    cat <<EOF
log:
  stdout: true
  level: warn
persistence:
  defaultStore: postgres-default
  visibilityStore: postgres-visibility
  numHistoryShards: 1
  datastores:
EOF
    store postgres-default temporal 20
    store postgres-visibility temporal_visibility 10
    cat <<EOF
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: 127.0.0.1
  metrics:
    prometheus:
      listenAddress: "127.0.0.1:$TEMPORAL_METRICS_PORT"
      handlerPath: /metrics
services:
  frontend:
    rpc: {grpcPort: $TEMPORAL_PORT, membershipPort: 6933, bindOnLocalHost: true, httpPort: $TEMPORAL_HTTP_PORT}
  history:
    rpc: {grpcPort: 7334, membershipPort: 6934, bindOnLocalHost: true}
  matching:
    rpc: {grpcPort: 7335, membershipPort: 6935, bindOnLocalHost: true}
  worker:
    rpc: {grpcPort: 7339, membershipPort: 6939, bindOnLocalHost: true}
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: "127.0.0.1:$TEMPORAL_PORT"
dcRedirectionPolicy:
  policy: noop
dynamicConfigClient:
  filepath: "$SERVER_DIR/config/dynamicconfig.yaml"
  pollInterval: 10s
EOF
  } > "$SERVER_DIR/config/development.yaml"
  # The dev server's own dynamic-config defaults, then the stack's production settings
  # (dev/components.sh, TEMPORAL_PRODUCTION_CONFIG) and eager activities, as the stack runs them.
  cat > "$SERVER_DIR/config/dynamicconfig.yaml" <<'EOF'
history.hostLevelCacheMaxSize:
  - value: 8096
frontend.namespaceRPS.visibility:
  - value: 100
frontend.persistenceMaxQPS:
  - value: 10000
history.persistenceMaxQPS:
  - value: 45000
system.forceSearchAttributesCacheRefreshOnRead:
  - value: false
matching.numTaskqueueReadPartitions:
  - value: 1
matching.numTaskqueueWritePartitions:
  - value: 1
history.cacheNonUserContextLockTimeout:
  - value: 5s
system.enableActivityEagerExecution:
  - value: true
EOF
}

start_server() {
  "$DEV_DIR/stop-component.sh" temporal >/dev/null 2>&1 || true
  setsid "$TEMPORAL_SERVER_BIN" --root "$SERVER_DIR" --config config --env development --allow-no-auth start \
    > "$LOG_DIR/temporal-postgres.log" 2>&1 < /dev/null &
  echo $! > "$PID_DIR/temporal.pid"
  rm -f "$PID_DIR/temporal.child.pid"
  local tries=0
  until "$TEMPORAL_BIN" operator cluster health --address "127.0.0.1:$TEMPORAL_PORT" >/dev/null 2>&1; do
    tries=$((tries + 1))
    [ $tries -lt 120 ] || die "the Temporal server on PostgreSQL did not become healthy: $LOG_DIR/temporal-postgres.log"
    sleep 1
  done
  tries=0
  until "$TEMPORAL_BIN" operator namespace create --namespace default --retention 24h \
    --address "127.0.0.1:$TEMPORAL_PORT" >/dev/null 2>&1 ||
    "$TEMPORAL_BIN" operator namespace describe --namespace default --address "127.0.0.1:$TEMPORAL_PORT" >/dev/null 2>&1; do
    tries=$((tries + 1))
    [ $tries -lt 60 ] || die "could not create the default namespace: $LOG_DIR/temporal-postgres.log"
    sleep 1
  done
  local sa
  for sa in RolloutName RolloutRequester; do
    "$TEMPORAL_BIN" operator search-attribute create --name "$sa" --type Keyword \
      --address "127.0.0.1:$TEMPORAL_PORT" >/dev/null
  done
  log "temporal on postgres: 127.0.0.1:$TEMPORAL_PORT (pid $(cat "$PID_DIR/temporal.pid")), log $LOG_DIR/temporal-postgres.log"
}

stop_all() {
  local pid
  if [ -f "$PID_DIR/temporal.pid" ] && pid=$(cat "$PID_DIR/temporal.pid") &&
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "--root $SERVER_DIR"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$PID_DIR/temporal.pid"
  fi
  if [ -f "$PG_DIR/postmaster.pid" ]; then
    as_pg "$(pg_bin pg_ctl)" -D "$PG_DIR" -m fast -w stop >/dev/null || true
  fi
  rm -f "$PID_DIR/postgres.pid"
}

case ${1:-} in
  up)
    [ -f "$ENV_FILE" ] || die "the stack is not up: run dev/up.sh first"
    "$DEV_DIR/build-temporal-server.sh"
    ensure_postgres
    stop_all
    start_postgres
    setup_schemas
    write_config
    start_server ;;
  down)
    stop_all
    "$DEV_DIR/start-component.sh" temporal ;;
  stop) stop_all ;;
  *) die "usage: dev/temporal-postgres.sh up|down|stop" ;;
esac
