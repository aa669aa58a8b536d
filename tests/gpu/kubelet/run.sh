#!/usr/bin/env bash
# The reference scenario through a real kubelet on a GPU host (issue 19):  tests/gpu/kubelet/run.sh [LOG_DIR]
#
# On a bare GPU host whose init is not systemd, as processes: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler (with the KubeSchedulerConfiguration the vgpu_stack role
# renders: the extender over mutual TLS), containerd 1.6 with runc and NVIDIA's
# nvidia-container-runtime as its default runtime, the CNI bridge, and kubelet (cgroupfs). The
# collection configures the node with its own roles (node.yml: the kubeadm role's containerd
# template, vgpu_interposer, nvidia_container_runtime, vgpu's scheduler_config; stack.yml:
# vgpu_stack, which imports the real component image and runs the four components as pods). Then:
#   - a 30-unit pod running vgpu-memory-usage 1200: `nvidia-smi` in it shows 1200MiB / 3000MiB and
#     `nvidia-smi -L` one GPU; cgpu-monitor's /metrics has its 1200 MiB under its pod and namespace;
#   - the same with 10 units fails with CUDA_ERROR_OUT_OF_MEMORY;
#   - a 10-unit pod that unsets LD_LIBRARY_PATH and takes 3000 MiB from the driver itself gets
#     cgpu-monitor's GPUMemoryOverQuota Event and is evicted (the quota held against a hostile pod);
#   - who reaches a GPU (access.sh, issue 28 A): a pod without units that sets
#     NVIDIA_VISIBLE_DEVICES=all sees none, nor does a sidecar without units beside a GPU container,
#     which sees its one GPU with libvgpu preloaded; a program that opens the real driver by its
#     path is refused past its quota (issue 24, case 5);
#   - PyTorch with 30 units raises torch.OutOfMemoryError on a 4 GiB tensor (the host's PyTorch,
#     mounted into the pod from the host: a test convenience, as pod images cannot be downloaded);
#   - playbooks/verify_cluster.yml passes;
#   - the runtime in cdi mode with the spec of `nvidia-ctk cdi generate` gives the same pod its GPU.
# The binaries, the images and the Python libraries come unpacked by unpack.sh into $VGPU_KUBELET_WORK
# (default /tmp/vgpu-kubelet) from the carry folders of pack.sh. Everything is stopped at the end.
# VGPU_KUBELET_SCENARIO=multi runs the two-GPU reference of issue 17 (multi.sh) instead of the
# checks above, after the same set-up. VGPU_KUBELET_SCENARIO=dra runs the reference on the DRA path
# (dra.sh): containerd $CONTAINERD_VERSION from the payload (CRI with CDI) instead of Debian's 1.6,
# the stack with vgpu_scheduling: dra, and kube-scheduler as it comes (no extender).
# VGPU_KUBELET_SCENARIO=mps runs the stack with MPS on the node and mps.sh's checks (issue 40: a
# root container that changes its MPS server is set back by nvidia-mps).
# VGPU_KUBELET_ONLY=backstop runs, after the same set-up, only backstop.sh's checks (a rerun of them
# costs less of the device's time).
# VGPU_KUBELET_FAKE=1 runs it without a GPU (emulate.sh): libvgpu's fake driver and a static CDI
# spec stand in for the driver (VGPU_KUBELET_FAKE_GPUS of them, default 2); the checks that need
# NVIDIA's nvidia-smi or PyTorch are skipped.
# Writes LOG_DIR/{run.log,results.txt,playbooks.log,cluster.txt,daemons.log,host.txt}; the last
# line is "N passed, N failed". Default LOG_DIR: $OUT, else /tmp/vgpu-kubelet-logs.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
LOG_DIR=${1:-${OUT:-/tmp/vgpu-kubelet-logs}}
WORK=${VGPU_KUBELET_WORK:-/tmp/vgpu-kubelet}
PAYLOAD=$WORK/payload
FAKE=${VGPU_KUBELET_FAKE:-0}
SCENARIO=${VGPU_KUBELET_SCENARIO:-reference}
[[ $SCENARIO =~ ^(reference|multi|dra|mps)$ ]] || { echo "VGPU_KUBELET_SCENARIO=$SCENARIO: expected reference, multi, dra or mps" >&2; exit 2; }
# mps: MPS on the node (inventory.yml reads VGPU_KUBELET_MPS), then mps.sh's checks.
[[ $SCENARIO != mps || $FAKE != 1 ]] || { echo "VGPU_KUBELET_SCENARIO=mps needs a GPU host: the fake driver has no MPS" >&2; exit 2; }
VGPU_KUBELET_MPS=0
[[ $SCENARIO != mps ]] || VGPU_KUBELET_MPS=1
export VGPU_KUBELET_MPS
SCHEDULING=extender
[[ $SCENARIO != dra ]] || SCHEDULING=dra
FAKE_GPUS=${VGPU_KUBELET_FAKE_GPUS:-2}
[[ $FAKE_GPUS =~ ^([1-9]|1[0-6])$ ]] || { echo "VGPU_KUBELET_FAKE_GPUS=$FAKE_GPUS: expected a number of fake GPUs from 1 to 16" >&2; exit 2; }
NODE=${VGPU_KUBELET_NODE:-vgpu-gpu-host}
# Addresses on the loopback interface: the node's (kubelet rejects 127.0.0.0/8), and the first
# address of the Service range, the `kubernetes` Service, where kube-apiserver listens itself.
# No kube-proxy (it needs iptables, which the host lacks): pods reach the API server there directly.
NODE_IP=${VGPU_KUBELET_NODE_IP:-10.250.0.1}
SERVICE_IP=10.96.0.1
NS=vgpu-test
IMAGE=localhost/vgpu-components:0.1.0
STARTED=$(date +%s)
mkdir -p "$LOG_DIR"
LOG=$LOG_DIR/run.log RESULTS=$LOG_DIR/results.txt PLAYS=$LOG_DIR/playbooks.log HOSTINFO=$LOG_DIR/host.txt
: >"$LOG"
: >"$RESULTS"
: >"$PLAYS"
: >"$HOSTINFO"

# The harness's process helpers (tests/k8s/scripts/lib.sh), with this run's folders and ports.
export VGPU_CACHE_DIR=$WORK/cache VGPU_K8S_STATE_DIR=$WORK/state VGPU_K8S_NODE_NAME=$NODE
export VGPU_E2E_APISERVER_PORT=443 VGPU_E2E_ETCD_PORT=2379 VGPU_E2E_ETCD_PEER_PORT=2380 VGPU_E2E_SCHEDULER_PORT=10259
# shellcheck source=/dev/null
source "$ROOT/tests/k8s/scripts/lib.sh"
export PATH=$BIN_DIR:$WORK/bin:/usr/local/nvidia/bin:$PATH KUBECONFIG=$STATE_DIR/admin.kubeconfig
export PYTHONPATH=$PAYLOAD/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export ANSIBLE_CONFIG=$ROOT/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$WORK/collections ANSIBLE_NOCOLOR=1
export ANSIBLE_LOCAL_TEMP=$WORK/ansible-tmp ANSIBLE_REMOTE_TEMP=$WORK/ansible-tmp
export VGPU_KUBELET_STATE=$STATE_DIR VGPU_KUBELET_NODE=$NODE VGPU_KUBELET_SCHEDULING=$SCHEDULING
export VGPU_KUBELET_IMAGE_TARBALL=$PAYLOAD/images/vgpu-components-0.1.0.tar
VGPU_KUBELET_RUNTIME_MODE=auto
[[ $FAKE == 1 ]] && VGPU_KUBELET_RUNTIME_MODE=cdi
export VGPU_KUBELET_RUNTIME_MODE
# The host's driver version (580.159.04 on the H200 host), as an operator states it: the roles turn
# features on by its branch (the MPS pinned memory limit from 495). The fake driver has none: 470.
VGPU_KUBELET_DRIVER_VERSION=470.256.02
if [[ $FAKE != 1 ]] && [[ -r /proc/driver/nvidia/version ]]; then
    # "... Kernel Module  470.256.02  ..." or "... Open Kernel Module for x86_64  580.159.04  ...": the
    # first version number standing alone
    VGPU_KUBELET_DRIVER_VERSION=$(grep -o -m1 -E '[[:space:]][0-9]{3}\.[0-9]+(\.[0-9]+)?[[:space:]]' /proc/driver/nvidia/version \
        | tr -d ' \t')
fi
VGPU_KUBELET_DRIVER_BRANCH=${VGPU_KUBELET_DRIVER_VERSION%%.*}
export VGPU_KUBELET_DRIVER_VERSION VGPU_KUBELET_DRIVER_BRANCH

passed=0 failed=0
say() { echo "$*" | tee -a "$LOG"; }
section() { say ""; say "==== $* ($(($(date +%s) - STARTED)) s)"; }
pass() { echo "PASS $1" | tee -a "$RESULTS" "$LOG"; passed=$((passed + 1)); }
fail() { echo "FAIL $1" | tee -a "$RESULTS" "$LOG"; failed=$((failed + 1)); }
skip() { echo "SKIP $1" | tee -a "$RESULTS" "$LOG"; }
logrun() { echo "\$ $*" >>"$LOG"; "$@" >>"$LOG" 2>&1; }
check() { # name, command...: PASS when the command succeeds (its output goes to the log)
    local name=$1
    shift
    if logrun "$@"; then pass "$name"; else fail "$name"; fi
}
# stop_here <reason>: a step the rest depends on failed.
stop_here() {
    fail "$1"
    say "!! stopping: the remaining checks depend on this step"
    exit 1
}
k() { kubectl --request-timeout=30s "$@"; }
# poll <seconds> <command...>: until the command succeeds.
poll() {
    local deadline=$(($(date +%s) + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        (($(date +%s) < deadline)) || return 1
        sleep 2
    done
}
playbook() { # name, playbook, args...: ansible-playbook through the carried ansible-core
    local name=$1 book=$2
    shift 2
    say "-- ansible-playbook $book $*"
    echo "==== $name: $book $*" >>"$PLAYS"
    python3 "$PAYLOAD/site/bin/ansible-playbook" -i "$HERE/inventory.yml" "$book" "$@" >>"$PLAYS" 2>&1
    local rc=$?
    sed -n '/PLAY RECAP/,$p' "$PLAYS" | tail -n 3 | tee -a "$LOG"
    return $rc
}

finish() {
    local rc=$?
    section "logs and teardown"
    {
        k get nodes -o wide
        k get pods -A -o wide
        k get events -A --sort-by=.lastTimestamp | tail -n 80
        k describe node "$NODE" | tail -n 40
        k describe pods -n "$NS"
        k describe pods -n kube-system -l app.kubernetes.io/part-of=vgpu-isolation | tail -n 150
        for pod in $(k get pods -n kube-system -o name 2>/dev/null); do
            echo "== logs of $pod"
            k logs -n kube-system "$pod" --all-containers --tail=60
        done
        ctr -n k8s.io images ls -q
    } >"$LOG_DIR/cluster.txt" 2>&1
    # Pods first (kubelet would restart them), then their containers, then the daemons. Every
    # process of a container (--all): nvidia-mps runs with the host's PID namespace, so its MPS
    # daemons outlived their container's first process and served the next run on a warm machine.
    stop_proc kubelet
    if [[ -S /run/containerd/containerd.sock ]]; then
        for task in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do ctr -n k8s.io tasks kill --all -s SIGKILL "$task" >/dev/null 2>&1; done
        sleep 2
        for task in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do ctr -n k8s.io tasks delete "$task" >/dev/null 2>&1; done
    fi
    for name in containerd kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_proc "$name"; done
    for name in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet; do
        echo "==== $name (last 150 lines)"
        tail -n 150 "$STATE_DIR/logs/$name.log" 2>/dev/null
    done >"$LOG_DIR/daemons.log"
    say "took $(($(date +%s) - STARTED)) s"
    say "$passed passed, $failed failed"
    ((rc == 0 && failed == 0)) || exit 1
}
trap finish EXIT
trap 'exit 130' INT TERM
# The device machine stops a command at 600 s: later sections are skipped after this many seconds,
# so that the logs are written and the daemons stopped in time.
DEADLINE=${VGPU_KUBELET_DEADLINE:-480}
in_time() { (($(date +%s) - STARTED < DEADLINE)); }

# --------------------------------------------------------------------------------- the payload
section "payload (unpack.sh) and the host"
for f in k8s/k8s-multicall bin/containerd bin/containerd-shim-runc-v2 bin/ctr bin/runc bin/etcd bin/nvidia-ctk \
    bin/nvidia-container-runtime bin/nvidia-cdi-hook cni/bridge cni/host-local cni/loopback \
    images/vgpu-components-0.1.0.tar images/pause.tar site/bin/ansible-playbook \
    collections/ansible_collections/community/crypto/MANIFEST.json \
    collections/ansible_collections/kubernetes/core/MANIFEST.json; do
    [[ -e $PAYLOAD/$f ]] || stop_here "the payload lacks $f: run the carry calls (unpack.sh) first"
done
if [[ $SCENARIO == dra ]]; then
    for f in containerd2/containerd containerd2/containerd-shim-runc-v2 containerd2/ctr; do
        [[ -e $PAYLOAD/$f ]] || stop_here "the payload lacks $f: pack with VGPU_KUBELET_SCENARIO=dra"
    done
fi
if (cd "$PAYLOAD/images" && sha256sum -c --quiet SHA256SUMS) >>"$LOG" 2>&1; then
    pass "the component image tarball is the one pack.sh packed (sha256 $(cut -c1-16 "$PAYLOAD/images/SHA256SUMS" | head -1)...)"
else
    stop_here "the component image tarball differs from the one pack.sh packed"
fi
{
    echo "== uname"; uname -a
    echo "== os"; grep PRETTY /etc/os-release
    echo "== cgroup"; stat -fc %T /sys/fs/cgroup
    echo "== PID 1"; cat /proc/1/comm
    echo "== python3"; command -v python3; python3 --version
    echo "== nvidia-smi"; command -v nvidia-smi && nvidia-smi -L
    echo "== driver libraries in the loader cache"; ldconfig -p | grep -E 'libcuda\.so|libnvidia-ml\.so'
    echo "== LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    echo "== /usr/local/nvidia"; find /usr/local/nvidia -maxdepth 2 2>&1 | head -n 60
    echo "== existing toolkit and runtimes"; command -v nvidia-ctk containerd runc iptables ip
} >>"$HOSTINFO" 2>&1

# ------------------------------------------------------------------------ install (no packages)
section "install the carried binaries"
containerd_dir=$PAYLOAD/bin
[[ $SCENARIO != dra ]] || containerd_dir=$PAYLOAD/containerd2
install -m 0755 "$containerd_dir"/{containerd,containerd-shim-runc-v2,ctr} /usr/bin/
install -m 0755 "$PAYLOAD/bin/runc" /usr/sbin/runc
install -m 0755 "$PAYLOAD"/bin/{nvidia-ctk,nvidia-container-runtime,nvidia-cdi-hook} /usr/bin/
install -d /usr/lib/cni "$BIN_DIR" "$WORK/bin" "$WORK/collections/ansible_collections/vgpu"
install -m 0755 "$PAYLOAD"/cni/* /usr/lib/cni/
install -m 0755 "$PAYLOAD/bin/etcd" "$WORK/bin/"
install -m 0755 "$PAYLOAD/k8s/k8s-multicall" "$BIN_DIR/"
for name in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do ln -sf k8s-multicall "$BIN_DIR/$name"; done
ln -sfn "$ROOT" "$WORK/collections/ansible_collections/vgpu/isolation"
ln -sfn "$PAYLOAD/collections/ansible_collections/community" "$WORK/collections/ansible_collections/community"
ln -sfn "$PAYLOAD/collections/ansible_collections/kubernetes" "$WORK/collections/ansible_collections/kubernetes"
# The Kubernetes modules (kubernetes.core) run with <vgpu_kubernetes_client_venv>/bin/python: here a
# virtualenv (no pip: nothing is installed) whose .pth file adds the carried client and the
# libraries of the host's python3, which is itself a virtualenv on the H200 (PyTorch's): a link to
# it, or a virtualenv of it, loses its site-packages, and the client's dependencies with them.
rm -rf "$WORK/kubernetes-python"
python3 -m venv --without-pip --system-site-packages "$WORK/kubernetes-python"
host_sites=$(python3 -c 'import sys; print("\n".join(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))')
"$WORK/kubernetes-python/bin/python" -c 'import site; print(site.getsitepackages()[0])' \
    | { read -r site_dir; printf '%s\n' "$PAYLOAD/site" "$host_sites" >"$site_dir/vgpu-kubelet-payload.pth"; }
env -u PYTHONPATH "$WORK/kubernetes-python/bin/python" -c 'import kubernetes, kubernetes.dynamic' \
    || { echo "!! the carried Kubernetes client does not import in $WORK/kubernetes-python" >&2; exit 1; }
export VGPU_KUBELET_K8S_PYTHON=$WORK/kubernetes-python
# Hosts without curl or the openssl command: the Python stand-ins (VGPU_KUBELET_PYTHON_TOOLS=1 forces
# them, as emulate.sh does, so that they are tried before a GPU host needs them).
python_tools=${VGPU_KUBELET_PYTHON_TOOLS:-0}
if [[ $python_tools == 1 ]] || ! command -v curl >/dev/null; then
    printf '#!/bin/sh\nexec python3 %s "$@"\n' "$HERE/httpget.py" >"$WORK/bin/curl"
    chmod 0755 "$WORK/bin/curl"
    say "curl: the Python stand-in (httpget.py)"
fi
# What the toolkit package's postinst does (files/bundle/package-debs.sh): the default configuration.
logrun nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place
check "the carried binaries run here (containerd, runc with this host's libseccomp, nvidia-ctk, kubelet, etcd)" \
    sh -c 'containerd --version && runc --version && nvidia-ctk --version && kubelet --version && etcd --version'

if [[ $FAKE == 1 ]]; then
    section "fake GPU driver (emulation)"
    logrun make -C "$ROOT/files/libvgpu" OUT=build/emulation fake-driver || stop_here "the fake driver builds"
    VGPU_FAKE_DRIVER_DIR=$ROOT/files/libvgpu/build/emulation/fake playbook fake-gpu "$ROOT/tests/node/fake_gpu.yml" \
        -e "{\"fake_gpu_count\": $FAKE_GPUS}" \
        || stop_here "tests/node/fake_gpu.yml installs the fake driver and its CDI spec"
else
    section "the driver"
    # jit-cdi finds the driver's libraries through the loader cache. A driver installed in a
    # folder of its own (here /usr/local/nvidia) is found through LD_LIBRARY_PATH by programs, not
    # by the cache: register its folder, as a driver installation's ld.so.conf.d entry does.
    if ! ldconfig -p | grep -q 'libcuda\.so\.1 '; then
        dir=""
        for d in ${LD_LIBRARY_PATH//:/ } /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu; do
            [[ -e $d/libcuda.so.1 ]] && { dir=$d; break; }
        done
        if [[ -n $dir ]]; then
            echo "$dir" >/etc/ld.so.conf.d/000-vgpu-kubelet-nvidia-driver.conf
            ldconfig
            say "the driver's folder $dir was not in the loader cache: added (/etc/ld.so.conf.d)"
        fi
    fi
    check "nvidia-smi lists the GPU on the host" nvidia-smi -L
    # The issue's CDI step: a spec of the real driver, devices named by index and by UUID.
    if logrun nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml --device-name-strategy=index \
        --device-name-strategy=uuid && grep -q 'nvidia-smi' /etc/cdi/nvidia.yaml \
        && grep -q "name: $(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -n 1)" /etc/cdi/nvidia.yaml; then
        pass "nvidia-ctk cdi generate writes a spec of the real driver: the GPU by UUID, nvidia-smi among its mounts"
    else
        fail "nvidia-ctk cdi generate writes a spec of the real driver"
    fi
    { echo "== /etc/cdi/nvidia.yaml"; cat /etc/cdi/nvidia.yaml; } >>"$HOSTINFO" 2>&1
fi

# -------------------------------------------------------------------------- addresses and PKI
section "addresses and certificates"
check "the node's and the kubernetes Service's addresses on lo" python3 "$HERE/netaddr.py" lo "$NODE_IP/32" "$SERVICE_IP/32"
rm -rf "$STATE_DIR" && mkdir -p "$STATE_DIR/logs" "$STATE_DIR/pids"
if [[ $python_tools == 1 ]] || ! command -v openssl >/dev/null; then
    say "certificates: pki.py (no openssl command here, or VGPU_KUBELET_PYTHON_TOOLS=1)"
    logrun env PKI="$PKI" python3 "$HERE/pki.py" || stop_here "certificates (pki.py)"
else
    logrun "$ROOT/tests/k8s/scripts/gen-certs.sh" || stop_here "certificates (tests/k8s/scripts/gen-certs.sh)"
fi
for identity in admin controller-manager scheduler kubelet; do write_kubeconfig "$identity" "$identity"; done

# ------------------------------------------------------------------- the collection, before the daemons
section "node.yml: containerd's template, vgpu_interposer, nvidia_container_runtime, the scheduler configuration"
if playbook node "$HERE/node.yml"; then
    pass "node.yml: the collection configures containerd, builds libvgpu into /opt/vgpu, sets the runtime's mode, writes the scheduler configuration"
else
    stop_here "node.yml (see playbooks.log)"
fi
logrun cat /etc/containerd/config.toml /etc/nvidia-container-runtime/config.toml
[[ $SCHEDULING == dra ]] || logrun cat /etc/kubernetes/vgpu-scheduler-config.yaml
newest=$(objdump -T /opt/vgpu/libcuda.so.1 /opt/vgpu/libnvidia-ml.so.1 /opt/vgpu/vgpu-memory-usage 2>>"$LOG" \
    | grep -o 'GLIBC_2\.[0-9]*' | sed 's/GLIBC_2\.//' | sort -n | tail -n 1)
if [[ -n $newest ]] && ((newest <= 34)); then
    pass "libvgpu built here needs nothing newer than GLIBC_2.$newest (pods may have an older C library than the host)"
else
    fail "libvgpu built here needs GLIBC_2.${newest:-?}: pods with an older C library cannot load it"
fi

# --------------------------------------------------------------------------------- the daemons
section "control plane, containerd and kubelet as processes"
# A fresh cluster each run: a second scenario on the same machine found the first one's pods
# (mps-a "configured", already Failed) in the etcd data kept from it.
rm -rf "$WORK/etcd"
start_proc etcd etcd --name vgpu-gpu --data-dir "$WORK/etcd" \
    --listen-client-urls "http://127.0.0.1:$PORT_ETCD" --advertise-client-urls "http://127.0.0.1:$PORT_ETCD" \
    --listen-peer-urls "http://127.0.0.1:$PORT_ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$PORT_ETCD_PEER" \
    --initial-cluster "vgpu-gpu=http://127.0.0.1:$PORT_ETCD_PEER" --listen-metrics-urls ""
wait_until etcd 60 curl -sf --max-time 2 "http://127.0.0.1:$PORT_ETCD/health"
start_proc kube-apiserver kube-apiserver --etcd-servers="http://127.0.0.1:$PORT_ETCD" \
    --bind-address=0.0.0.0 --advertise-address="$NODE_IP" --secure-port="$APISERVER_PORT" \
    --client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --kubelet-client-certificate="$PKI/admin.crt" --kubelet-client-key="$PKI/admin.key" \
    --kubelet-preferred-address-types=InternalIP \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range=10.96.0.0/16 --authorization-mode=Node,RBAC --allow-privileged=true \
    --enable-admission-plugins=NodeRestriction --endpoint-reconciler-type=none --profiling=false
wait_until kube-apiserver 120 api_get /readyz
start_proc kube-controller-manager kube-controller-manager --kubeconfig="$STATE_DIR/controller-manager.kubeconfig" \
    --leader-elect=false --secure-port=0 --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --use-service-account-credentials=true --profiling=false
wait_until kube-controller-manager 60 api_get /api/v1/namespaces/default/serviceaccounts/default
# kube-scheduler reads the role's KubeSchedulerConfiguration (clientConnection: scheduler.kubeconfig);
# on the DRA path it runs as it comes, as the kubeadm role leaves it there.
if [[ $SCHEDULING == dra ]]; then
    cat >"$STATE_DIR/scheduler-plain.yaml" <<SC
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: $STATE_DIR/scheduler.kubeconfig}
leaderElection: {leaderElect: false}
SC
    start_scheduler "$STATE_DIR/scheduler-plain.yaml"
else
    start_scheduler /etc/kubernetes/vgpu-scheduler-config.yaml
fi
pass "etcd, kube-apiserver, kube-controller-manager and kube-scheduler (the role's configuration) run"

start_proc containerd env PATH="$PATH" containerd --config /etc/containerd/config.toml
wait_until containerd 60 ctr version
check "the pause image is imported into containerd" ctr -n k8s.io images import "$PAYLOAD/images/pause.tar"
cgroup_v1=$([[ -f /sys/fs/cgroup/cgroup.controllers ]] && echo false || echo true)
cat >"$STATE_DIR/kubelet.yaml" <<KUBELET
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# No systemd here: cgroupfs, as containerd's runc (kubeadm_cgroup_driver: cgroupfs).
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
failSwapOn: false
$([[ $cgroup_v1 == true ]] && echo "failCgroupV1: false")
# A test host's disk may be nearly full: no evictions or image garbage collection of the
# imported images during the run.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
KUBELET
start_proc kubelet kubelet --config="$STATE_DIR/kubelet.yaml" --kubeconfig="$STATE_DIR/kubelet.kubeconfig" \
    --hostname-override="$NODE" --node-ip="$NODE_IP" --v=2
if poll 120 sh -c "kubectl get node $NODE -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"; then
    pass "containerd and kubelet run; node $NODE is Ready"
else
    stop_here "node $NODE Ready within 120 s"
fi
# What kubeadm init's mark-control-plane phase does (without its taint: one node runs everything);
# the extender's DaemonSet runs on control-plane nodes only.
check "node $NODE is labelled as a control-plane node" kubectl label node "$NODE" node-role.kubernetes.io/control-plane=

# ---------------------------------------------------------------------------- the stack as pods
section "stack.yml: vgpu_stack imports the component image and runs the components"
if playbook stack "$HERE/stack.yml"; then
    pass "stack.yml: vgpu_stack ($SCHEDULING path) imports the real image and its pods run"
else
    stop_here "stack.yml (see playbooks.log and cluster.txt)"
fi
# kubelet reports the device plugin's resource in the node's status a little after the plugin's pod
# is ready: wait for it (the emulation once read it before).
advertised() { k get node "$NODE" -o jsonpath='{.status.allocatable.vgpu\.io/gpu-memory}' 2>/dev/null; }
has_units() { [[ -n $(advertised) ]]; }
if [[ $SCHEDULING == extender ]]; then
    poll 60 has_units
    units=$(advertised)
    say "allocatable vgpu.io/gpu-memory on $NODE: ${units:-none}"
    if [[ ${units:-0} -ge 30 ]]; then
        pass "the device plugin registered with kubelet: $units units of 100 MiB"
    else
        fail "the node advertises vgpu.io/gpu-memory (got '${units:-}')"
    fi
fi

# ----------------------------------------------------------------------------------- workloads
# gpu_pod <name> <units> <command json> [extra spec yaml]: a pod that asks for GPU memory only
# (its grace period POD_GRACE seconds, default 1).
gpu_pod() {
    k apply -f - >>"$LOG" 2>&1 <<POD
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $NS}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: ${POD_GRACE:-1}
  containers:
    - name: app
      image: $IMAGE
      imagePullPolicy: Never
      command: $3
      resources: {limits: {vgpu.io/gpu-memory: $2}}
${4:-}
POD
}
phase() { k get pod -n "$NS" "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }
finished() { [[ $(phase "$1") =~ ^(Succeeded|Failed)$ ]]; }
# monitor_metrics_ok <pod>: cgpu-monitor's /metrics has the pod's 3000 MiB quota and 1200 MiB used
# under its pod and namespace labels, e.g.
# vgpu_container_memory_used_bytes{namespace="vgpu-test",pod="ref-30",...} 1.2582912e+09
monitor_metrics() {
    local ip
    ip=$(k get pod -n kube-system -l app.kubernetes.io/name=cgpu-monitor -o jsonpath='{.items[0].status.podIP}')
    curl -sf --max-time 5 "http://$ip:9395/metrics"
}
monitor_metrics_ok() {
    monitor_metrics | python3 -c '
import sys
pod, ns = sys.argv[1], sys.argv[2]
want = {"vgpu_container_memory_used_bytes": 1200 * 2**20, "vgpu_container_memory_quota_bytes": 3000 * 2**20}
seen = {}
for line in sys.stdin:
    name = line.split("{", 1)[0]
    if name in want and f"pod=\"{pod}\"" in line and f"namespace=\"{ns}\"" in line:
        seen[name] = float(line.split()[-1])
        print(line.strip())
sys.exit(0 if seen == want else 1)' "$1" "$NS"
}
# holds_1200 <pod> <seconds>: the pod, running vgpu-memory-usage 1200, reports its 1200 MiB in time.
holds_1200() {
    if poll "$2" sh -c "kubectl logs -n $NS $1 2>/dev/null | grep -q 'allocated 1200 MiB'"; then
        pass "$1 runs and holds 1200 MiB ($(k logs -n "$NS" "$1" | head -n 1))"
    else
        fail "$1 runs and allocates 1200 MiB (phase $(phase "$1"))"
    fi
}
# oom_check <pod> <seconds>: the pod ends Failed within the time, CUDA_ERROR_OUT_OF_MEMORY in its log.
oom_check() {
    local pod=$1 log
    poll "$2" finished "$pod"
    log=$(k logs -n "$NS" "$pod" 2>&1)
    echo "$log" >>"$LOG"
    if [[ $(phase "$pod") == Failed ]] && grep -q CUDA_ERROR_OUT_OF_MEMORY <<<"$log"; then
        pass "$pod fails with CUDA_ERROR_OUT_OF_MEMORY ($(grep -m1 CUDA_ERROR_OUT_OF_MEMORY <<<"$log"))"
    else
        fail "$pod fails with CUDA_ERROR_OUT_OF_MEMORY (phase $(phase "$pod"))"
    fi
}
# The bypass: a process that loads the driver itself instead of libvgpu and takes 3000 MiB.
BYPASS='["/usr/bin/env", "-u", "LD_LIBRARY_PATH", "-u", "LD_PRELOAD", "/opt/vgpu/vgpu-memory-usage", "3000", "600"]'
# over_quota_message <pod>: the message of cgpu-monitor's GPUMemoryOverQuota Event on the pod, if any.
over_quota_message() {
    k get events -n "$NS" --field-selector "reason=GPUMemoryOverQuota,involvedObject.name=$1" \
        -o jsonpath='{.items[0].message}' 2>/dev/null
}
has_over_quota_event() { over_quota_message "$1" | grep -q .; }
# bypass_check <pod> <whose quota>: the pod, made by the caller with a 1000 MiB quota and the command
# $BYPASS, gets cgpu-monitor's GPUMemoryOverQuota Event (NVML's per-process memory against its quota)
# and is evicted after the grace period (vgpu_enforcement: evict, 30 s). The fake driver, behind the
# monitor's dropped capabilities, names no process: skipped there.
bypass_check() {
    local pod=$1 whose=$2 message
    if [[ $FAKE == 1 ]]; then
        skip "$pod bypasses libvgpu (the fake driver reports no process to the monitor)"
        return
    fi
    if poll 150 has_over_quota_event "$pod"; then
        message=$(over_quota_message "$pod")
        pass "cgpu-monitor reports $pod, 3000 MiB past libvgpu under $whose: $message"
    else
        fail "cgpu-monitor reports $pod (3000 MiB past libvgpu under $whose) with a GPUMemoryOverQuota Event (phase $(phase "$pod"); $(k logs -n "$NS" "$pod" 2>&1 | head -n 1))"
        {   # what the enforcement saw: NVML's processes, their cgroups, the monitor's ground-truth metrics
            echo "== the GPU's processes (host)"
            nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
            for pid in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); do
                echo "== /proc/$pid/cgroup"; cat "/proc/$pid/cgroup"
            done
            echo "== cgpu-monitor's ground truth"
            monitor_metrics | grep -E '^vgpu_(container_memory_(real|limit)|container_over|gpu_memory_unaccounted|quota_violations)'
        } >>"$LOG" 2>&1
        return
    fi
    if poll 90 sh -c "kubectl get pod -n $NS $pod 2>&1 | grep -q NotFound"; then
        pass "$pod is evicted: gone after the monitor's Event ($(grep -o 'evicting the pod' <<<"$message"))"
    else
        fail "$pod is evicted after the monitor's Event (phase $(phase "$pod"))"
    fi
}
# quota_checks <pod> <whose quota>: the reference pod's 3000 MiB quota with 1200 MiB held, as libvgpu's
# `manage --stats` in it and cgpu-monitor's /metrics see it, and on a GPU `nvidia-smi` (x MiB / quota)
# and `nvidia-smi -L` (one GPU).
# region_checks <pod>: the pod gets its region file alone, not the device plugin's host folder, and
# what it writes past the file's size is cut back at a poll while libvgpu goes on (issue 40).
region_checks() {
    local pod=$1 region=/var/run/vgpu/vgpu.region size grown mounts
    mounts=$(k exec -n "$NS" "$pod" -- cat /proc/self/mountinfo 2>>"$LOG" | awk '$5 ~ "^(/var)?/run/vgpu" {print $5}')
    echo "$pod's mounts under /var/run/vgpu: $mounts" >>"$LOG"
    if [[ $mounts == "$region" || $mounts == "${region#/var}" ]]; then  # /var/run is a link to /run
        pass "$pod has its region file alone mounted ($region), not the plugin's folder"
    else
        fail "$pod has its region file alone mounted under /var/run/vgpu (got: $(echo "$mounts" | tr '\n' ' '))"
    fi
    size=$(k exec -n "$NS" "$pod" -- stat -c %s "$region" 2>>"$LOG")
    grown=$(k exec -n "$NS" "$pod" -- sh -c "head -c 67108864 /dev/zero >>$region && stat -c %s $region" 2>>"$LOG")
    echo "$region: $size bytes, $grown right after appending 64 MiB" >>"$LOG"
    cut_back() { [[ $(k exec -n "$NS" "$pod" -- stat -c %s "$region" 2>/dev/null) == "$size" ]]; }
    # The append grew the file (read in the same exec: the plugin's poll may cut it back before
    # another exec looks, as on the H200 2026-12-05), then the poll gave it its size back.
    if [[ -n $size && $grown =~ ^[0-9]+$ ]] && ((grown > size)) && poll 120 cut_back \
        && k exec -n "$NS" "$pod" -- /opt/vgpu/manage --stats --json 2>>"$LOG" \
        | python3 -c 'import json,sys; d=json.load(sys.stdin)["devices"][0]; sys.exit(d["used_bytes"]>>20 != 1200)' 2>>"$LOG"; then
        pass "64 MiB appended to $pod's region file ($size bytes) were cut back by the device plugin's poll; libvgpu still counts 1200 MiB"
    else
        fail "64 MiB appended to $pod's region file are cut back to $size bytes within 120 s with libvgpu's count intact (now $(k exec -n "$NS" "$pod" -- stat -c %s "$region" 2>&1))"
    fi
}
quota_checks() {
    local pod=$1 whose=$2 stats smi listed
    stats=$(k exec -n "$NS" "$pod" -- /opt/vgpu/manage --stats --json 2>>"$LOG")
    echo "$stats" >>"$LOG"
    if python3 -c 'import json,sys; d=json.loads(sys.argv[1])["devices"][0]; sys.exit(not (d["limit_bytes"]>>20 == 3000 and d["used_bytes"]>>20 == 1200))' "$stats" 2>>"$LOG"; then
        pass "manage --stats in $pod: quota 3000 MiB, 1200 MiB used ($whose)"
    else
        fail "manage --stats in $pod shows quota 3000 MiB and 1200 MiB used"
    fi
    if poll 60 monitor_metrics_ok "$pod"; then
        pass "cgpu-monitor's /metrics has $pod: $(monitor_metrics_ok "$pod" | tr '\n' ' ' | cut -c1-240)"
    else
        monitor_metrics | grep -E '^vgpu_container' >>"$LOG"
        fail "cgpu-monitor's /metrics shows $pod's quota 3000 MiB and 1200 MiB used under its pod and namespace labels"
    fi
    if [[ $FAKE == 1 ]]; then
        skip "nvidia-smi in $pod (the fake driver has no nvidia-smi)"
        return
    fi
    smi=$(k exec -n "$NS" "$pod" -- nvidia-smi 2>&1)
    echo "$smi" >>"$LOG"
    if grep -q '1200MiB / *3000MiB' <<<"$smi"; then
        pass "kubectl exec $pod -- nvidia-smi shows 1200MiB / 3000MiB"
    else
        fail "kubectl exec $pod -- nvidia-smi shows 1200MiB / 3000MiB (got: $(grep -o '[0-9]*MiB / *[0-9]*MiB' <<<"$smi" | head -n 1))"
    fi
    listed=$(k exec -n "$NS" "$pod" -- nvidia-smi -L 2>&1)
    echo "$listed" >>"$LOG"
    if [[ $(grep -c '^GPU ' <<<"$listed") == 1 ]]; then
        pass "nvidia-smi -L in $pod lists one GPU ($listed)"
    else
        fail "nvidia-smi -L in $pod lists one GPU (got: $listed)"
    fi
}

if [[ $SCENARIO == multi ]]; then
    # shellcheck source=tests/gpu/kubelet/multi.sh
    source "$HERE/multi.sh"
    exit 0
elif [[ $SCENARIO == dra ]]; then
    # shellcheck source=tests/gpu/kubelet/dra.sh
    source "$HERE/dra.sh"
    exit 0
elif [[ $SCENARIO == mps ]]; then
    logrun k create namespace "$NS"
    # shellcheck source=tests/gpu/kubelet/mps.sh
    source "$HERE/mps.sh"
    exit 0
fi

logrun k create namespace "$NS"
if [[ ${VGPU_KUBELET_ONLY:-} == backstop ]]; then # a rerun of the backstop alone, the cluster set up as always
    # shellcheck source=tests/gpu/kubelet/backstop.sh
    VGPU_BACKSTOP_GRACE=10 source "$HERE/backstop.sh"
    backstop_checks
    exit 0 # finish (the EXIT trap) writes the logs and stops the daemons
fi
section "the reference pod: 30 units, vgpu-memory-usage 1200"
gpu_pod ref-30 30 '["/opt/vgpu/vgpu-memory-usage", "1200", "900"]'
holds_1200 ref-30 120
gpu=$(k get pod -n "$NS" ref-30 -o jsonpath='{.metadata.annotations.vgpu\.io/gpu-uuid}')
if [[ -n $gpu ]]; then
    pass "kube-scheduler placed ref-30 through the extender (vgpu.io/gpu-uuid $gpu)"
else
    fail "ref-30 carries the extender's vgpu.io/gpu-uuid annotation"
fi
quota_checks ref-30 "the device plugin's quota"
region_checks ref-30

section "the same pod with 10 units"
gpu_pod ref-10 10 '["/opt/vgpu/vgpu-memory-usage", "1200", "30"]'
oom_check ref-10 120

section "launches that grow what the driver reserves (issue 37), 30 units"
# a kernel of 64 KiB local memory a thread (16632 MiB on an H200; the fake driver's 16384 threads
# need 256 KiB to pass 3000 MiB), a 4500 MiB device heap and a kernel that calls malloc: refused at
# the call; a kernel of 4 KiB (792 MiB) runs.
local_kib=64
[[ $FAKE == 1 ]] && local_kib=256
gpu_pod launch-local 30 "[\"/opt/vgpu/vgpu-memory-usage\", \"100\", \"30\", \"--local\", \"$local_kib\"]"
gpu_pod launch-heap 30 '["/opt/vgpu/vgpu-memory-usage", "100", "30", "--heap", "4500"]'
gpu_pod launch-fits 30 '["/opt/vgpu/vgpu-memory-usage", "100", "5", "--local", "4"]'
oom_check launch-local 120
oom_check launch-heap 120
poll 120 finished launch-fits
if [[ $(phase launch-fits) == Succeeded ]] && k logs -n "$NS" launch-fits | grep -q "4 KiB local memory a thread: CUDA_SUCCESS"; then
    pass "launch-fits: a kernel of 4 KiB local memory a thread runs under 30 units ($(k logs -n "$NS" launch-fits | grep -m1 launching))"
else
    fail "launch-fits runs its 4 KiB kernel (phase $(phase launch-fits); $(k logs -n "$NS" launch-fits 2>&1 | tr '\n' ' ' | cut -c1-200))"
fi

section "a 10-unit pod that bypasses libvgpu"
gpu_pod ref-bypass 10 "$BYPASS"
bypass_check ref-bypass "the device plugin's 1000 MiB quota"

# shellcheck source=tests/gpu/kubelet/access.sh
source "$HERE/access.sh"

# shellcheck source=tests/gpu/kubelet/outside_quota.sh
source "$HERE/outside_quota.sh"
outside_quota_checks

# shellcheck source=tests/gpu/kubelet/backstop.sh
VGPU_BACKSTOP_GRACE=10 source "$HERE/backstop.sh"  # inventory.yml: vgpu_enforcement_grace_seconds 10
backstop_checks

section "PyTorch with 30 units, a 4 GiB tensor"
if [[ $FAKE == 1 ]]; then
    skip "PyTorch (no PyTorch and no GPU in the emulation)"
elif ! in_time; then
    skip "PyTorch: not enough of the 10-minute limit left"
else
    # The host's PyTorch in a pod: the pod image has no PyTorch and cannot download one, so the
    # host's /usr (its Python 3.12 and C library) and the Python environment of torch are mounted
    # read-only; the GPU, libvgpu and the quota come from the device plugin and the runtime as for
    # any pod. VGPU_KUBELET_TORCH_RW=1 mounts them writable (for the runtime's CDI hooks, should one
    # need to create a link in a mounted folder).
    read -r torch_python torch_prefix torch_base < <(python3 -c 'import sys, torch; print(sys.executable, sys.prefix, sys.base_prefix)')
    ro=$([[ ${VGPU_KUBELET_TORCH_RW:-0} == 1 ]] && echo false || echo true)
    mounts="" volumes="" i=0
    for dir in /usr/bin /usr/lib /usr/lib64 $(printf '%s\n' "$torch_prefix" "$torch_base" | grep -v '^/usr' | sort -u); do
        [[ -d $dir ]] || continue
        mounts+="      - {name: host$i, mountPath: $dir, readOnly: $ro}"$'\n'
        volumes+="    - {name: host$i, hostPath: {path: $dir, type: Directory}}"$'\n'
        i=$((i + 1))
    done
    script='import torch
print("torch", torch.__version__, "sees", torch.cuda.device_count(), "GPU:", torch.cuda.get_device_name(0))
free, total = torch.cuda.mem_get_info()
print(f"cudaMemGetInfo: free {free >> 20} MiB, total {total >> 20} MiB")
small = torch.ones(256 << 18, device="cuda")
print("a 256 MiB tensor works:", float(small.sum()))
try:
    torch.empty(1 << 30, dtype=torch.float32, device="cuda")
    print("a 4 GiB tensor was allocated: no quota")
except torch.OutOfMemoryError as exc:
    print("raised", type(exc).__module__ + "." + type(exc).__name__, "(torch.OutOfMemoryError):", str(exc).splitlines()[0])'
    gpu_pod torch-30 30 "[\"$torch_python\", \"-c\", $(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$script")]" \
        "      env: [{name: PYTHONUNBUFFERED, value: \"1\"}]
      volumeMounts:
${mounts}  volumes:
${volumes}"
    poll 180 finished torch-30
    torch_log=$(k logs -n "$NS" torch-30 2>&1)
    echo "$torch_log" >>"$LOG"
    if grep -q '(torch.OutOfMemoryError)' <<<"$torch_log" && grep -q 'total 3000 MiB' <<<"$torch_log"; then
        pass "PyTorch with 30 units sees 3000 MiB and raises torch.OutOfMemoryError on a 4 GiB tensor"
    else
        fail "PyTorch with 30 units raises torch.OutOfMemoryError on a 4 GiB tensor (phase $(phase torch-30): $(tail -n 2 <<<"$torch_log" | tr '\n' ' '))"
    fi
fi

section "playbooks/verify_cluster.yml"
# Its sample pod reads nvidia-smi, or libvgpu's own report where the container has none (the fake).
if playbook verify-cluster "$ROOT/playbooks/verify_cluster.yml" -v; then
    pass "playbooks/verify_cluster.yml passes against this cluster ($(grep -m1 -o 'The cluster shares its GPUs as configured' "$PLAYS"))"
else
    fail "playbooks/verify_cluster.yml passes (see playbooks.log)"
fi

section "the runtime in cdi mode, with the spec of nvidia-ctk cdi generate"
if ! in_time; then
    skip "cdi mode: not enough of the 10-minute limit left"
# The runtime reads its configuration at every container start: no restart needed. (The emulation
# runs cdi mode throughout, with the fake's static spec: the same steps, which then change nothing.)
elif VGPU_KUBELET_RUNTIME_MODE=cdi playbook runtime-cdi "$HERE/node.yml" --tags nvidia_container_runtime; then
    logrun grep -n 'mode = ' /etc/nvidia-container-runtime/config.toml
    gpu_pod ref-30-cdi 30 '["/opt/vgpu/vgpu-memory-usage", "1200", "120"]'
    poll 120 sh -c "kubectl logs -n $NS ref-30-cdi 2>/dev/null | grep -q 'allocated 1200 MiB'"
    if [[ $FAKE == 1 ]]; then
        stats=$(k exec -n "$NS" ref-30-cdi -- /opt/vgpu/manage --stats --json 2>>"$LOG")
        if python3 -c 'import json,sys; d=json.loads(sys.argv[1])["devices"][0]; sys.exit(not (d["limit_bytes"]>>20 == 3000 and d["used_bytes"]>>20 == 1200))' "$stats" 2>>"$LOG"; then
            pass "mode cdi set by the role: a new 30-unit pod gets its GPU from the CDI spec (manage --stats: 1200 of 3000 MiB)"
        else
            fail "mode cdi set by the role: a new 30-unit pod runs under its quota (phase $(phase ref-30-cdi))"
        fi
    else
        smi=$(k exec -n "$NS" ref-30-cdi -- nvidia-smi 2>&1)
        echo "$smi" >>"$LOG"
        if grep -q '1200MiB / *3000MiB' <<<"$smi"; then
            pass "mode cdi (nvidia-ctk cdi generate's spec): nvidia-smi in a 30-unit pod shows 1200MiB / 3000MiB"
        else
            fail "mode cdi: nvidia-smi in a 30-unit pod shows 1200MiB / 3000MiB (phase $(phase ref-30-cdi))"
        fi
    fi
else
    fail "the nvidia_container_runtime role sets mode cdi"
fi
