# Shared settings and process helpers for the local control plane; sourced by the scripts, which
# use the exported settings (and pass them on to the tests they start).
# Only loopback addresses are used. Every port can be moved with an environment variable.
# shellcheck shell=bash
K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_ROOT="$(cd "$K8S_DIR/../.." && pwd)"
export REPO_ROOT
# shellcheck source=/dev/null
source "$K8S_DIR/../../files/bundle/versions.env"
export CACHE_DIR="${VGPU_CACHE_DIR:-$HOME/.cache/vgpu-isolation}/k8s"
# VGPU_K8S_BIN_DIR: another release's control plane (docs/benchmarks.md measures a candidate so).
export BIN_DIR="${VGPU_K8S_BIN_DIR:-$CACHE_DIR/$K8S_VERSION}"
export KWOK_BIN="$CACHE_DIR/kwok-$KWOK_VERSION/kwok"
export KWOK_STAGES="$CACHE_DIR/kwok-$KWOK_VERSION/stages.yaml"
export STATE_DIR="${VGPU_K8S_STATE_DIR:-$REPO_ROOT/build/k8s}"
export VENV="${VENV:-$REPO_ROOT/.venv}"
case "$VENV" in /*) ;; *) VENV="$REPO_ROOT/$VENV" ;; esac
export COMPONENTS_SRC="${VGPU_COMPONENTS_SRC:-$REPO_ROOT/files/components/src}"
# Below 32768, outside Linux's default range of ephemeral ports, so no client socket holds them.
# (No ETCD_* names: etcd reads every ETCD_* environment variable as a flag.)
export PORT_ETCD="${VGPU_E2E_ETCD_PORT:-23790}"
export PORT_ETCD_PEER="${VGPU_E2E_ETCD_PEER_PORT:-23800}"
export APISERVER_PORT="${VGPU_E2E_APISERVER_PORT:-16443}"
export SCHEDULER_PORT="${VGPU_E2E_SCHEDULER_PORT:-20259}"
export EXTENDER_PORT="${VGPU_E2E_EXTENDER_PORT:-29766}"
export KWOK_PORT="${VGPU_E2E_KWOK_PORT:-20247}"
export PKI="$STATE_DIR/pki"
# 1 (default): kube-scheduler reaches the extender over mTLS, as shipped; 0: plain HTTP on loopback.
export EXTENDER_TLS="${VGPU_E2E_EXTENDER_TLS:-1}"

log() { echo ">> $*"; }
die() { echo "!! $*" >&2; exit 1; }

# The start time of a process (field 22 of /proc/<pid>/stat) tells a live process of ours
# from an unrelated one that reused its pid.
proc_start_time() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null; }

# start_proc <name> <command...>: run in the background, log to logs/<name>.log, record the pid.
start_proc() {
    local name="$1"; shift
    mkdir -p "$STATE_DIR/logs" "$STATE_DIR/pids"
    if proc_alive "$name"; then die "$name is already running (pid $(cut -d' ' -f1 "$STATE_DIR/pids/$name.pid"))"; fi
    nohup "$@" >>"$STATE_DIR/logs/$name.log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid $(proc_start_time "$pid")" >"$STATE_DIR/pids/$name.pid"
    log "started $name (pid $pid)"
}

proc_alive() {
    local file="$STATE_DIR/pids/$1.pid" pid start
    [[ -f "$file" ]] || return 1
    read -r pid start <"$file"
    [[ -n "$pid" && "$(proc_start_time "$pid")" == "$start" ]]
}

# stop_proc <name>: SIGTERM, up to 10 s of grace, then SIGKILL. Only the recorded pid is touched.
stop_proc() {
    local name="$1" file="$STATE_DIR/pids/$1.pid" pid start i
    [[ -f "$file" ]] || return 0
    read -r pid start <"$file"
    if proc_alive "$name"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            proc_alive "$name" || break
            sleep 0.1
        done
        if proc_alive "$name"; then
            echo "!! $name (pid $pid) ignored SIGTERM for 10 s; sending SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
        log "stopped $name (pid $pid)"
    fi
    rm -f "$file"
}

# wait_until <name> <seconds> <command...>: poll once a second; fail early if <name> died.
wait_until() {
    local name="$1" timeout="$2" i; shift 2
    for ((i = 0; i < timeout; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        if ! proc_alive "$name"; then
            tail -n 40 "$STATE_DIR/logs/$name.log" >&2 || true
            die "$name exited during start-up (log: $STATE_DIR/logs/$name.log)"
        fi
        sleep 1
    done
    tail -n 40 "$STATE_DIR/logs/$name.log" >&2 || true
    die "$name not ready after $timeout s (log: $STATE_DIR/logs/$name.log)"
}

# write_kubeconfig <name> <cert name>: $STATE_DIR/<name>.kubeconfig for the identity of $PKI/<cert name>.crt.
write_kubeconfig() {
    cat >"$STATE_DIR/$1.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: vgpu-e2e
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: vgpu-e2e
  context: {cluster: vgpu-e2e, user: $2}
current-context: vgpu-e2e
KC
}

# An authenticated GET against the API server with the admin certificate.
api_get() {
    curl -sf --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        "https://127.0.0.1:$APISERVER_PORT$1"
}

# A request to the extender as kube-scheduler makes it: HTTPS with kube-scheduler's client
# certificate for the extender (mTLS), or plain HTTP when the extender was started plain.
extender_curl() {
    if [[ -f "$STATE_DIR/extender-plain" ]]; then
        curl -sf --max-time 5 "http://127.0.0.1:$EXTENDER_PORT$1"
    else
        curl -sf --max-time 5 --cacert "$PKI/extender-ca.crt" --cert "$PKI/scheduler-extender-client.crt" \
            --key "$PKI/scheduler-extender-client.key" "https://127.0.0.1:$EXTENDER_PORT$1"
    fi
}

# start_extender [plain]: the extender with mTLS (as roles/vgpu_stack runs it), or plain HTTP on
# 127.0.0.1 for a scheduler configuration without tlsConfig (also with VGPU_E2E_EXTENDER_TLS=0).
start_extender() {
    [[ -f "$COMPONENTS_SRC/vgpu_components/extender.py" || -d "$COMPONENTS_SRC/vgpu_components/extender" ]] \
        || die "the extender is not in $COMPONENTS_SRC (vgpu_components.extender is missing)"
    # VGPU_E2E_EXTENDER_CONFIG: another config file (e.g. with the role's certificates);
    # VGPU_E2E_EXTENDER_TLS_DIR: the folder of its CA and of a client certificate it accepts
    # (roles/vgpu_stack's layout). Otherwise the harness's own mTLS, or plain HTTP.
    local config="$STATE_DIR/vgpu-config.yaml"
    rm -f "$STATE_DIR/extender-plain"
    if [[ -n "${VGPU_E2E_EXTENDER_CONFIG:-}" ]]; then
        config="$VGPU_E2E_EXTENDER_CONFIG"
    elif [[ "${1:-}" == plain || "$EXTENDER_TLS" == 0 ]]; then
        config="$STATE_DIR/vgpu-config-plain.yaml"
        touch "$STATE_DIR/extender-plain"
    fi
    # VGPU_E2E_EXTENDER_PROFILE=FILE: every thread under cProfile, written to FILE at stop
    # (bench/profile_extender.py; VGPU_E2E_EXTENDER_PROFILE_MODE=cpu: CPU time instead of wall-clock,
    # threads: no profiler, each thread's CPU seconds; VGPU_E2E_EXTENDER_SWITCH=S: GIL switch interval).
    local run=(-m vgpu_components.extender)
    if [[ -n "${VGPU_E2E_EXTENDER_PROFILE:-}" ]]; then
        run=("$REPO_ROOT/bench/profile_extender.py" "$VGPU_E2E_EXTENDER_PROFILE")
        [[ -z "${VGPU_E2E_EXTENDER_PROFILE_MODE:-}" ]] || run+=("--$VGPU_E2E_EXTENDER_PROFILE_MODE")
        [[ -z "${VGPU_E2E_EXTENDER_SWITCH:-}" ]] || run+=("--switch=$VGPU_E2E_EXTENDER_SWITCH")
        run+=(--)
    fi
    start_proc extender env PYTHONPATH="$COMPONENTS_SRC" NODE_NAME=control-plane \
        "$VENV/bin/python" "${run[@]}" \
        --config "$config" --kubeconfig "${VGPU_E2E_EXTENDER_KUBECONFIG:-$STATE_DIR/extender.kubeconfig}"
    # /readyz: nodes and pods are listed, so the model is complete before the scheduler asks.
    if [[ -n "${VGPU_E2E_EXTENDER_TLS_DIR:-}" ]]; then
        local tls="$VGPU_E2E_EXTENDER_TLS_DIR"
        wait_until extender 60 curl -sf --max-time 2 --cacert "$tls/ca.crt" --cert "$tls/client.crt" \
            --key "$tls/client.key" "https://127.0.0.1:$EXTENDER_PORT/readyz"
    else
        wait_until extender 60 extender_curl /readyz
    fi
}

# start_scheduler [config]: kube-scheduler with our extender (default) or another config file.
# Its /metrics is open on loopback (the bench reads its cycle times); VGPU_E2E_SCHEDULER_PPROF=1
# opens its /debug/pprof too (profiling a bench).
start_scheduler() {
    local config="${1:-$STATE_DIR/scheduler-extender.yaml}" open=/healthz,/readyz,/livez,/metrics
    [[ ${VGPU_E2E_SCHEDULER_PPROF:-0} != 1 ]] || open+=',/debug/pprof/*'
    start_proc kube-scheduler "$BIN_DIR/kube-scheduler" --config="$config" \
        --authentication-kubeconfig="$STATE_DIR/scheduler.kubeconfig" \
        --authorization-kubeconfig="$STATE_DIR/scheduler.kubeconfig" \
        --authorization-always-allow-paths="$open" \
        --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT"
    wait_until kube-scheduler 60 curl -skf --max-time 2 "https://127.0.0.1:$SCHEDULER_PORT/readyz"
}
