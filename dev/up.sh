#!/usr/bin/env bash
# Starts the local stack on 127.0.0.1: Temporal dev server, etcd, kube-apiserver,
# kube-controller-manager and kwok. Idempotent: what already runs is left alone, and every
# component is checked for readiness. State lives in $STATE_DIR (default <repo>/.stack).
# Usage: dev/up.sh        then: source dev/env   (or: eval "$(dev/env)")
#        dev/up.sh --kube-only   Kubernetes alone (dev/cluster2.sh: a second cluster)
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=SCRIPTDIR/components.sh
source "$DEV_DIR/components.sh"

kube_only=false
case ${1:-} in
  --kube-only) kube_only=true ;;
  "") ;;
  *) die "usage: dev/up.sh [--kube-only]" ;;
esac

started=$SECONDS
"$DEV_DIR/build.sh"
command -v openssl >/dev/null || die "openssl is needed to make the stack's certificates"
command -v curl >/dev/null || die "curl is needed for readiness checks"
mkdir -p "$STATE_DIR" "$PID_DIR" "$LOG_DIR"

# make_pki writes, once per state dir, a CA, the API server's serving certificate, the
# admin client certificate and the service-account key pair.
make_pki() {
  [ -f "$PKI_DIR/done" ] && return 0
  log "creating certificates in $PKI_DIR"
  local tmp=$PKI_DIR.tmp
  rm -rf "$tmp"; mkdir -p "$tmp"
  (
    cd "$tmp"
    umask 077
    openssl req -x509 -new -nodes -newkey rsa:2048 -sha256 -days 3650 \
      -keyout ca.key -out ca.crt -subj /CN=noderollout-dev-ca \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    issue() { # issue NAME SUBJECT EXTENSIONS
      openssl req -new -nodes -newkey rsa:2048 -keyout "$1.key" -out "$1.csr" -subj "$2"
      printf '%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 \
        -days 3650 -extfile "$1.ext" -out "$1.crt"
      rm -f "$1.csr" "$1.ext"
    }
    issue apiserver /CN=kube-apiserver "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    issue admin /O=system:masters/CN=admin "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    openssl genrsa -out sa.key 2048
    openssl rsa -in sa.key -pubout -out sa.pub
  ) >"$LOG_DIR/pki.log" 2>&1 || { show_log_tail pki; die "certificate generation failed"; }
  touch "$tmp/done"
  rm -rf "$PKI_DIR"; mv "$tmp" "$PKI_DIR"
}

write_kubeconfig() {
  local tmp=$KUBECONFIG_FILE.tmp
  (
    umask 077
    cat >"$tmp" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: noderollout-dev
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$PKI_DIR/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $(base64 -w0 "$PKI_DIR/admin.crt")
    client-key-data: $(base64 -w0 "$PKI_DIR/admin.key")
contexts:
- name: noderollout-dev
  context:
    cluster: noderollout-dev
    user: admin
current-context: noderollout-dev
KUBECONFIG
  )
  mv "$tmp" "$KUBECONFIG_FILE"
}

write_env() {
  cat >"$ENV_FILE.tmp" <<ENV
export KUBECONFIG=$KUBECONFIG_FILE
export TEMPORAL_ADDRESS=127.0.0.1:$TEMPORAL_PORT
export TEMPORAL_UI=http://127.0.0.1:$TEMPORAL_UI_PORT
export NODEROLLOUT_STATE=$STATE_DIR
export PROMETHEUS_URL=http://127.0.0.1:$PROMETHEUS_PORT
export PUSHGATEWAY_URL=http://127.0.0.1:$PUSHGATEWAY_PORT
ENV
  mv "$ENV_FILE.tmp" "$ENV_FILE"
}

make_pki
write_kubeconfig

# Temporal does not depend on Kubernetes, so it starts first and warms up meanwhile.
$kube_only || start_component temporal
start_component etcd
wait_ready etcd
start_component kube-apiserver
wait_ready kube-apiserver
start_component kube-controller-manager
start_component kwok
start_component kwok-stuck
# The fake reboots are the project's own code, built here like the worker.
(cd "$REPO_DIR" && go build -o "$FAKEREBOOT_BIN" ./dev/cmd/fakereboot) || die "building dev/cmd/fakereboot failed"
start_component fakereboot
# Prometheus and its Pushgateway watch the stack, not a cluster: a second cluster
# (--kube-only) shares the stack's, as it shares Temporal.
$kube_only || start_component pushgateway
$kube_only || start_component prometheus
for c in temporal kube-controller-manager kwok kwok-stuck fakereboot pushgateway prometheus; do
  case $c in temporal | pushgateway | prometheus) $kube_only && continue ;; esac
  wait_ready "$c"
done
# Pods are refused until their namespace's default ServiceAccount exists.
wait_until kube-controller-manager "$READY_TIMEOUT" \
  kube_get /api/v1/namespaces/default/serviceaccounts/default
write_env

log "stack ready in $((SECONDS - started))s"
log "  Kubernetes: https://127.0.0.1:$APISERVER_PORT  (KUBECONFIG=$KUBECONFIG_FILE)"
log "  Temporal:   127.0.0.1:$TEMPORAL_PORT, UI http://127.0.0.1:$TEMPORAL_UI_PORT"
log "  next: source dev/env; dev/nodes.sh 10"
