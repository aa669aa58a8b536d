#!/usr/bin/env bash
# Start the local control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
# kwok (simulated nodes), our scheduler extender and kube-scheduler configured to call it.
# State (certificates, kubeconfigs, configs, logs, pids) goes to $STATE_DIR; etcd's data to a
# temporary folder in /dev/shm. On any failure the caller runs down.sh (run-e2e.sh traps it).
set -euo pipefail
# shellcheck source=/dev/null
source "$(dirname "$0")/lib.sh"

for bin in "$BIN_DIR/kube-apiserver" "$BIN_DIR/kube-controller-manager" "$BIN_DIR/kube-scheduler" "$KWOK_BIN" "$KWOK_STAGES"; do
    [[ -e "$bin" ]] || die "$bin is missing: run 'make -C tests/k8s build' first"
done
# etcd: the one build-binaries.sh builds for the bundle's control-plane image (Kubernetes' own
# version), else Debian's etcd-server binary (3.4: without RequestWatchProgress, so clients that ask
# for streaming lists, kwok among them, fall back and see new pods up to a minute late).
etcd_bin="$CACHE_DIR/etcd-$ETCD_VERSION/etcd"
[[ -x $etcd_bin ]] || etcd_bin=etcd
command -v "$etcd_bin" >/dev/null || die "etcd is not installed: run 'make -C tests/k8s build' (or 'make -C tests/k8s etcd': Debian's etcd-server)"
if [[ -d "$STATE_DIR/pids" ]] && compgen -G "$STATE_DIR/pids/*.pid" >/dev/null; then
    die "a control plane from $STATE_DIR/pids looks alive: run 'make -C tests/k8s down' first"
fi

rm -rf "$STATE_DIR" && mkdir -p "$STATE_DIR/logs" "$STATE_DIR/pids"
# VGPU_E2E_CERTS_COMMAND: another maker of the same files (a host without openssl: tests/gpu/kubelet/pki.py).
${VGPU_E2E_CERTS_COMMAND:-"$K8S_DIR/scripts/gen-certs.sh"}

write_kubeconfig admin admin
write_kubeconfig controller-manager controller-manager
write_kubeconfig scheduler scheduler
# The extender and kwok act with the admin identity here; the least-privilege RBAC of the
# stack's service accounts is tested on its own (test_stack.py).
cp "$STATE_DIR/admin.kubeconfig" "$STATE_DIR/extender.kubeconfig"

# scheduler_config <file> <packing: none|tightest|weighted> [ignored]
#   none: no extender; tightest (as roles/vgpu_stack ships it): filter-tightest and bind;
#   weighted: filter, prioritize and bind. managedResources ignoredByScheduler is false, as shipped
#   (kube-scheduler also counts the node's sum), or true with "ignored" (only the extender counts).
#   kube-scheduler reaches the extender over HTTPS with its client certificate (mTLS).
scheduler_config() {
    cat >"$1" <<SC
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $STATE_DIR/scheduler.kubeconfig
  qps: ${VGPU_E2E_SCHEDULER_QPS:-50}
  burst: ${VGPU_E2E_SCHEDULER_BURST:-100}
leaderElection:
  leaderElect: false
SC
    [[ "$2" != none ]] || return 0
    local verbs="  filterVerb: filter-tightest"
    [[ "$2" == tightest ]] || verbs=$'  filterVerb: filter\n  prioritizeVerb: prioritize\n  weight: 1'
    local wire="- urlPrefix: http://127.0.0.1:$EXTENDER_PORT"
    [[ "$EXTENDER_TLS" == 0 ]] || wire="- urlPrefix: https://127.0.0.1:$EXTENDER_PORT
  enableHTTPS: true
  tlsConfig:
    certFile: $PKI/scheduler-extender-client.crt
    keyFile: $PKI/scheduler-extender-client.key
    caFile: $PKI/extender-ca.crt"
    cat >>"$1" <<SC
extenders:
$wire
$verbs
  bindVerb: bind
  preemptVerb: preempt
  nodeCacheCapable: true
  managedResources:
  - name: vgpu.io/gpu-memory
    ignoredByScheduler: $([[ "${3:-}" == ignored ]] && echo true || echo false)
SC
}
# The e2e configuration is the one roles/vgpu_stack ships (tightest, counted).
scheduler_config "$STATE_DIR/scheduler-extender.yaml" tightest
scheduler_config "$STATE_DIR/scheduler-extender-weighted.yaml" weighted
scheduler_config "$STATE_DIR/scheduler-extender-ignored.yaml" tightest ignored
scheduler_config "$STATE_DIR/scheduler-plain.yaml" none

cat >"$STATE_DIR/vgpu-config-plain.yaml" <<VC
resource_prefix: vgpu.io
unit_mib: 100
log_format: text
extender:
  address: 127.0.0.1
  port: $EXTENDER_PORT
VC
# As shipped: mTLS, only kube-scheduler's certificate (signed by the extender's own CA) answered.
cat "$STATE_DIR/vgpu-config-plain.yaml" - >"$STATE_DIR/vgpu-config.yaml" <<VC
  tls_cert_file: $PKI/extender.crt
  tls_key_file: $PKI/extender.key
  client_ca_file: $PKI/extender-ca.crt
VC

# etcd ($etcd_bin, above): never a system service; data in RAM, thrown away by down.
etcd_data="$(mktemp -d /dev/shm/vgpu-e2e-etcd.XXXXXX 2>/dev/null || mktemp -d)"
echo "$etcd_data" >"$STATE_DIR/etcd-data-dir"
start_proc etcd "$etcd_bin" --name vgpu-e2e --data-dir "$etcd_data" \
    --listen-client-urls "http://127.0.0.1:$PORT_ETCD" --advertise-client-urls "http://127.0.0.1:$PORT_ETCD" \
    --listen-peer-urls "http://127.0.0.1:$PORT_ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$PORT_ETCD_PEER" \
    --initial-cluster "vgpu-e2e=http://127.0.0.1:$PORT_ETCD_PEER" --listen-metrics-urls "" \
    --quota-backend-bytes 4294967296 --snapshot-count 100000
wait_until etcd 60 curl -sf --max-time 2 "http://127.0.0.1:$PORT_ETCD/health"

# --delete-collection-workers: the bench's clean-up of a run's pods (10 000 to 50 000) is one
# delete-collection, which kube-apiserver works through one pod at a time by default.
start_proc kube-apiserver "$BIN_DIR/kube-apiserver" \
    --delete-collection-workers="$(nproc)" \
    --etcd-servers="http://127.0.0.1:$PORT_ETCD" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
    --client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range=10.96.0.0/16 --authorization-mode=Node,RBAC --allow-privileged=true \
    --requestheader-client-ca-file="$PKI/ca.crt" --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --endpoint-reconciler-type=none --profiling=false
wait_until kube-apiserver 120 api_get /readyz

start_proc kube-controller-manager "$BIN_DIR/kube-controller-manager" \
    --kubeconfig="$STATE_DIR/controller-manager.kubeconfig" --leader-elect=false \
    --secure-port=0 --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --use-service-account-credentials=true --profiling=false
# Pods are only admitted once the service-account controller made the namespace's "default".
wait_until kube-controller-manager 60 api_get /api/v1/namespaces/default/serviceaccounts/default

# Its stages heartbeat a node's status only every 10 to 20 minutes and keep the node alive through
# a Lease, which kwok holds only with --node-lease-duration-seconds: without it the node controller
# marked the nodes NotReady after 40 s, and their Running pods not Ready for good (issue 27).
start_proc kwok "$KWOK_BIN" --kubeconfig="$STATE_DIR/admin.kubeconfig" --config="$KWOK_STAGES" \
    --node-lease-duration-seconds=40 \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --server-address="127.0.0.1:$KWOK_PORT" --node-ip=127.0.0.1 --cidr=10.244.0.0/16
wait_until kwok 60 curl -sf --max-time 2 "http://127.0.0.1:$KWOK_PORT/healthz"

if [[ "${VGPU_E2E_EXTENDER:-1}" == 1 ]]; then
    start_extender
fi
start_scheduler "$STATE_DIR/scheduler-extender.yaml"

cat >"$STATE_DIR/env" <<ENV
KUBECONFIG=$STATE_DIR/admin.kubeconfig
VGPU_E2E_EXTENDER_PORT=$EXTENDER_PORT
VGPU_E2E_APISERVER=https://127.0.0.1:$APISERVER_PORT
ENV
log "control plane up: KUBECONFIG=$STATE_DIR/admin.kubeconfig (logs in $STATE_DIR/logs)"
