#!/usr/bin/env bash
# `make e2e-site`: a site of three fresh Debian 12 nodes (tests/node/node.sh, on a network of their
# own without a way out) provisioned as an operator provisions one: a control plane without a GPU
# (vgpu-site-cp), worker A with two 12 GiB fake GPUs (vgpu-site-a) and worker B with one 24 GiB fake
# GPU of another model (vgpu-site-b). The control plane is the operator's machine: a clean copy of
# this checkout and the offline bundle are on its disk, it reaches the workers over SSH with a key,
# and `make site INVENTORY=tests/node/cluster-inventory.yml` there installs kubeadm's control plane
# and joins the workers, air-gapped. Then:
#   1. the suite tests/site (placement across the nodes), from this machine;
#   2. playbooks/verify_cluster.yml, on the control plane as every playbook of the site;
#   3. a second `make site`, which must report changed=0 on every host.
# VGPU_E2E_DAY2=1 (make e2e-site-day2) goes on with day two (below). KEEP=1 leaves the site up, also after a failure (kubeconfig: build/site/admin.conf;
# `docker exec vgpu-site-cp kubectl ...`); `make e2e-site-down` (run-e2e.sh down) removes it. Every step's log and
# each node's service and pod logs are in build/site/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
state=$root/build/site
export VGPU_FAKE_DRIVER_DIR=${VGPU_FAKE_DRIVER_DIR:-$root/files/libvgpu/build/rel/fake}
BUNDLE=${VGPU_E2E_BUNDLE:-$root/build/bundle}
# kubelet 1.35+ refuses cgroup v1 unless told (kubeadm_allow_cgroup_v1; as tests/node/run-e2e.sh).
VGPU_E2E_CGROUP_V1=true
[[ ! -f /sys/fs/cgroup/cgroup.controllers ]] || VGPU_E2E_CGROUP_V1=false
export VGPU_E2E_CGROUP_V1 VGPU_E2E_SCHEDULING=extender
export ANSIBLE_FORCE_COLOR=0
# Each task's time in the step logs.
export ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks
CP=vgpu-site-cp
# name, address (tests/node/cluster-inventory.yml), and the bundle on its disk (the control plane's).
NODES=("$CP 172.31.251.10 $BUNDLE" "vgpu-site-a 172.31.251.11 -" "vgpu-site-b 172.31.251.12 -")
checkout=/root/vgpu-isolation
mkdir -p "$state"

log() { echo ">> $(date +%T) $*"; }

# node <name> <address> <bundle or -> <up|down|logs>: tests/node/node.sh for one node of the site.
node() {
    local bundle=$3
    [[ $bundle != - ]] || bundle=
    VGPU_E2E_NODE=$1 VGPU_E2E_ADDRESS=$2 VGPU_E2E_BUNDLE=$bundle VGPU_E2E_NETWORK=vgpu-site \
        VGPU_E2E_SUBNET=172.31.251.0/24 VGPU_NODE_STATE_DIR=$state VGPU_NODE_LOGS_DIR=$state/logs/$1 \
        "$root/tests/node/node.sh" "$4"
}

all_nodes() {
    local spec
    for spec in "${NODES[@]}"; do
        # shellcheck disable=SC2086 # the spec is three words
        node $spec "$1"
    done
}

finish() {
    local rc=$?
    if [[ ${KEEP:-0} == 1 ]]; then
        all_nodes logs
        log "the site stays up: docker exec $CP kubectl get nodes (make e2e-site-down removes it)"
    else
        all_nodes down
    fi
    ((rc == 0)) || echo "!! make e2e-site failed (rc $rc); logs in $state" >&2
    exit "$rc"
}

# on_cp <log name> <command...>: run it in the control plane's checkout, as the operator there does.
on_cp() {
    local name="$1" started
    shift
    started=$(date +%s)
    log "$* on $CP (log: $state/$name.log)"
    if ! docker exec -e ANSIBLE_FORCE_COLOR -e ANSIBLE_CALLBACKS_ENABLED -e VGPU_E2E_SCHEDULING \
        -e VGPU_E2E_CGROUP_V1 -w "$checkout" "$CP" "$@" >"$state/$name.log" 2>&1; then
        tail -n 60 "$state/$name.log" >&2
        return 1
    fi
    sed -n '/PLAY RECAP/,$p' "$state/$name.log"
    log "$name took $(($(date +%s) - started)) s"
}

# playbook_on_cp <log name> <playbook> [args...]: a playbook of the checkout through the site
# virtualenv and collections that `make site` built there.
playbook_on_cp() {
    local name="$1"
    shift
    on_cp "$name" env ANSIBLE_CONFIG="$checkout/ansible.cfg" ANSIBLE_COLLECTIONS_PATH="$checkout/.collections" \
        .venv-site/bin/ansible-playbook -i tests/node/cluster-inventory.yml "$@"
}

# unchanged <log name>: the run's recap reports changed=0 for every host.
unchanged() {
    if grep -E '^\S+ +: .*changed=[1-9]' "$state/$1.log"; then
        grep -B1 -E '^changed:' "$state/$1.log" | grep -E '^TASK|^changed' >&2 || true
        echo "!! $1 changed something; a rerun must change nothing" >&2
        return 1
    fi
}

if [[ ${1:-} == down ]]; then
    all_nodes down
    exit 0
fi
all_nodes down >/dev/null
trap finish EXIT
trap 'exit 130' INT TERM
started=$(date +%s)
all_nodes up

log "the workers' fake GPUs (tests/node/cluster-gpus.yml)"
ansible-playbook -i "$root/tests/node/cluster-gpus.yml" "$root/tests/node/fake_gpu.yml" >"$state/fake-gpu.log" 2>&1 \
    || { tail -n 60 "$state/fake-gpu.log" >&2; exit 1; }

# The operator's access: a key of the control plane's root in every node's authorized_keys, and the
# nodes' host keys in its known_hosts.
docker exec "$CP" sh -c "install -d -m 0700 /root/.ssh && ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519"
key=$(docker exec "$CP" cat /root/.ssh/id_ed25519.pub)
for spec in "${NODES[@]}"; do
    read -r name address _ <<<"$spec"
    docker exec "$name" sh -c "install -d -m 0700 /root/.ssh && echo '$key' >>/root/.ssh/authorized_keys"
    docker exec "$CP" sh -c "ssh-keyscan -t ed25519 $address >>/root/.ssh/known_hosts 2>/dev/null"
done

# What a clean clone of this working tree holds (uncommitted changes too), a git repository.
(cd "$root" && tests/harness/copy-tree.sh "$state/checkout")
git -C "$state/checkout" init --quiet
docker cp "$state/checkout" "$CP:$checkout"
on_cp site make site INVENTORY=tests/node/cluster-inventory.yml

docker exec "$CP" cat /etc/kubernetes/admin.conf >"$state/admin.conf"
chmod 0600 "$state/admin.conf"

log "the e2e site suite (tests/site)"
suite_started=$(date +%s)
(cd "$root" && PYTHONPATH="$root" VGPU_E2E_NODE="$CP" timeout 1800 pytest -p no:cacheprovider -q tests/site)
log "the suite took $(($(date +%s) - suite_started)) s"
playbook_on_cp verify-cluster playbooks/verify_cluster.yml
on_cp site-again make site INVENTORY=tests/node/cluster-inventory.yml
unchanged site-again
[[ ${VGPU_E2E_DAY2:-0} == 1 ]] || { log "make e2e-site: passed in $(($(date +%s) - started)) s"; exit 0; }

# Day two (make e2e-site-day2), as docs/operations.md tells the operator: worker A leaves (drained,
# its stack and membership uninstalled with uninstall.yml --limit, its Node deleted) and its GPU
# pods move to worker B; then it comes back with site.yml --limit to it, and a rerun of the whole
# inventory changes nothing.
kc() { docker exec -i "$CP" kubectl --kubeconfig /etc/kubernetes/admin.conf "$@"; }
# until_true <what> <tries> <command...>: the command until it succeeds, every 2 s.
until_true() {
    local what=$1 tries=$2
    shift 2
    for _ in $(seq "$tries"); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 2
    done
    echo "!! $what: not after $((tries * 2)) s" >&2
    return 1
}
pods_on() { [[ $(kc get pods -n day2 -l app=day2 --field-selector "spec.nodeName=$1,status.phase=Running" -o name | wc -l) == 2 ]]; }
kc create namespace day2
kc apply -n day2 -f - <<'DEPLOYMENT'
{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "day2"},
 "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "day2"}},
  "template": {"metadata": {"labels": {"app": "day2"}},
   "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "app",
     "image": "localhost/vgpu-components:0.1.0", "imagePullPolicy": "Never",
     "command": ["/opt/vgpu/vgpu-memory-usage", "500", "86400"],
     "resources": {"limits": {"vgpu.io/gpu-memory": 20}}}]}}}}
DEPLOYMENT
until_true "the day-two pods Running on vgpu-site-a (the tightest)" 120 pods_on vgpu-site-a
log "day two: vgpu-site-a leaves"
kc drain vgpu-site-a --ignore-daemonsets --delete-emptydir-data --timeout=300s >"$state/drain.log" 2>&1
on_cp remove-a make uninstall INVENTORY=tests/node/cluster-inventory.yml \
    ARGS="--limit vgpu-site-a -e vgpu_uninstall_cluster=true"
kc delete node vgpu-site-a
until_true "the day-two pods Running on vgpu-site-b" 120 pods_on vgpu-site-b
# (verify_cluster.yml is not run here: the inventory still names vgpu-site-a, which it would miss.)
# Back with a run limited to it, as docs/operations.md says: the first control-plane host, outside
# the limit, still joins it, labels it and gives it its components.
log "day two: vgpu-site-a comes back (make site --limit vgpu-site-a)"
on_cp add-a make site INVENTORY=tests/node/cluster-inventory.yml ARGS="--limit vgpu-site-a"
until_true "vgpu-site-a advertising GPU memory again" 90 \
    sh -c "docker exec $CP kubectl --kubeconfig /etc/kubernetes/admin.conf get node vgpu-site-a \
        -o jsonpath='{.status.allocatable.vgpu\.io/gpu-memory}' | grep -qx 244"
on_cp site-after-day2 make site INVENTORY=tests/node/cluster-inventory.yml
unchanged site-after-day2
playbook_on_cp verify-after-day2 playbooks/verify_cluster.yml

# A fault: containerd and kubelet restarted on worker B, under a running GPU pod. The pod keeps its
# quota and use (libvgpu's own report inside it), and the device plugin registers again: a new
# GPU pod that must run on B starts there.
stats_of() { kc exec -n day2 "$1" -- /opt/vgpu/manage --stats --json; }
on_b=$(kc get pods -n day2 -l app=day2 --field-selector spec.nodeName=vgpu-site-b -o jsonpath='{.items[0].metadata.name}')
before=$(stats_of "$on_b")
log "day two: containerd and kubelet restarted on vgpu-site-b (under $on_b)"
docker exec vgpu-site-b systemctl restart containerd kubelet
kc run after-restart -n day2 --image localhost/vgpu-components:0.1.0 --image-pull-policy Never --restart Never \
    --overrides '{"spec": {"nodeSelector": {"kubernetes.io/hostname": "vgpu-site-b"}, "containers": [{"name": "after-restart",
      "image": "localhost/vgpu-components:0.1.0", "imagePullPolicy": "Never",
      "command": ["/opt/vgpu/vgpu-memory-usage", "500", "0"], "resources": {"limits": {"vgpu.io/gpu-memory": 20}}}]}}'
until_true "a new GPU pod run to completion on vgpu-site-b after the restart" 150 \
    sh -c "docker exec $CP kubectl --kubeconfig /etc/kubernetes/admin.conf get pod -n day2 after-restart \
        -o jsonpath='{.status.phase}' | grep -qx Succeeded"
after=$(stats_of "$on_b")
[[ "$before" == "$after" ]] || { echo "!! $on_b's quota or use changed across the restart: $before -> $after" >&2; exit 1; }
log "day two: $on_b kept its quota and use across the restart: $after"
log "make e2e-site-day2: passed in $(($(date +%s) - started)) s"
