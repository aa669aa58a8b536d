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
# VGPU_E2E_DAY2=1 (make e2e-site-day2) goes on with day two (below): a fresh worker C joins, worker A
# leaves. KEEP=1 leaves the site up, also after a failure (kubeconfig: build/site/admin.conf;
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
# Day two's new worker: one 12 GiB fake GPU, up only from day two on.
NEW_NODE="vgpu-site-c 172.31.251.13 -"
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
    local spec specs=("${NODES[@]}")
    ! docker inspect "${NEW_NODE%% *}" >/dev/null 2>&1 || specs+=("$NEW_NODE")
    for spec in "${specs[@]}"; do
        # shellcheck disable=SC2086 # the spec is three words
        node $spec "$1"
    done
}

# fake_gpus <hosts>: the fake GPUs tests/node/cluster-gpus.yml gives those workers.
fake_gpus() {
    log "fake GPUs on $1 (tests/node/cluster-gpus.yml)"
    ansible-playbook -i "$root/tests/node/cluster-gpus.yml" "$root/tests/node/fake_gpu.yml" --limit "$1" \
        >>"$state/fake-gpu.log" 2>&1 || { tail -n 60 "$state/fake-gpu.log" >&2; exit 1; }
}

# give_access <name> <address>: the operator's access to a node: the control plane root's key in
# its authorized_keys, its host key in the control plane's known_hosts.
give_access() {
    docker exec "$1" sh -c "install -d -m 0700 /root/.ssh && echo '$key' >>/root/.ssh/authorized_keys"
    docker exec "$CP" sh -c "ssh-keyscan -t ed25519 $2 >>/root/.ssh/known_hosts 2>/dev/null"
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
        # Each change under the task that made it (a loop's items sit lines below their TASK line).
        awk '/^TASK \[/ { task = $0 } /^changed:/ { print task; print }' "$state/$1.log" >&2
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

rm -f "$state/fake-gpu.log"
fake_gpus vgpu-site-a,vgpu-site-b

# The operator's access over SSH with a key of the control plane's root.
docker exec "$CP" sh -c "install -d -m 0700 /root/.ssh && ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519"
key=$(docker exec "$CP" cat /root/.ssh/id_ed25519.pub)
for spec in "${NODES[@]}"; do
    read -r name address _ <<<"$spec"
    give_access "$name" "$address"
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

# Day two (make e2e-site-day2), as docs/operations.md tells the operator. A Deployment's two GPU
# pods run on worker A (the tightest GPUs). A fresh worker C is added to the inventory and joins with
# `make site --limit` to it; then worker A leaves: drained, its stack and membership uninstalled with
# uninstall.yml --limit, its Node deleted, taken out of the inventory, and its pods start again on
# the other workers. After each step a run of the whole inventory changes nothing and
# verify_cluster.yml passes.
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
# day2_nodes: the node of each Running day-two pod, a line each.
day2_nodes() {
    kc get pods -n day2 -l app=day2 --field-selector status.phase=Running \
        -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}'
}
# two_on <node>, two_off <node>: both day-two pods Running, on that node / elsewhere.
two_on() { [[ $(day2_nodes | grep -cx "$1") == 2 ]]; }
two_off() {
    local nodes
    nodes=$(day2_nodes)
    [[ $(grep -c . <<<"$nodes") == 2 ]] && ! grep -qx "$1" <<<"$nodes"
}
advertises() {
    [[ $(kc get node "$1" -o jsonpath='{.status.allocatable.vgpu\.io/gpu-memory}') == "$2" ]]
}
# whole_site <log name>: make site on the whole inventory changes nothing; verify_cluster.yml passes.
whole_site() {
    on_cp "site-$1" make site INVENTORY=tests/node/cluster-inventory.yml
    unchanged "site-$1"
    playbook_on_cp "verify-$1" playbooks/verify_cluster.yml
}
inventory=$checkout/tests/node/cluster-inventory.yml
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
until_true "the day-two pods Running on vgpu-site-a (the tightest)" 120 two_on vgpu-site-a

# Issue 40 item 4: the stack's admission policy refuses a privileged and a hostPath pod in the tenant
# namespace day2, with its message; the system namespace's pods still run.
refused_in_day2() { # <name> <overrides>: the pod is refused by vgpu-tenant-pods
    local out
    if out=$(kc run "$1" -n day2 --image localhost/vgpu-components:0.1.0 --image-pull-policy Never \
        --restart Never --dry-run=server --overrides "$2" -- true 2>&1); then
        echo "!! the pod $1 was admitted in the tenant namespace day2" >&2
        return 1
    fi
    [[ $out == *"vgpu-tenant-pods refuses pod $1"* ]] || { echo "!! $1 refused, but not by vgpu-tenant-pods: $out" >&2; return 1; }
    log "day two: $1 refused in day2: ${out:0:160}"
}
refused_in_day2 privileged '{"spec": {"containers": [{"name": "privileged", "image": "localhost/vgpu-components:0.1.0",
  "securityContext": {"privileged": true}}]}}'
refused_in_day2 host-path '{"spec": {"volumes": [{"name": "gpus", "hostPath": {"path": "/dev/null"}}],
  "containers": [{"name": "host-path", "image": "localhost/vgpu-components:0.1.0",
  "volumeMounts": [{"name": "gpus", "mountPath": "/var/run/nvidia-container-devices/all"}]}]}}'
not_running=$(kc get pods -n kube-system --no-headers | awk '$3 != "Running" && $3 != "Completed"')
[[ -z $not_running ]] || { echo "!! kube-system pods not running under the policy: $not_running" >&2; exit 1; }

# Issue 40 item 5: worker A's flanneld token names its own Node only, before A leaves.
server=$(kc config view --minify -o jsonpath='{.clusters[0].cluster.server}')
token_a=$(docker exec vgpu-site-a cat /etc/kube-flannel/token)
as_a() { docker exec "$CP" kubectl --server "$server" --certificate-authority /etc/kubernetes/pki/ca.crt --token "$token_a" "$@"; }
as_a get node vgpu-site-a >/dev/null || { echo "!! vgpu-site-a's flanneld token does not work on its node" >&2; exit 1; }
# A PATCH of the status alone, as flanneld sends it (kubectl patch --subresource=status reads the
# status first, which flanneld's role does not grant, and RBAC refused that read before admission).
status_patch_as_a() { # <node>: the API server's answer, then its HTTP status on the last line
    docker exec "$CP" curl -sS --cacert /etc/kubernetes/pki/ca.crt -X PATCH -H "Authorization: Bearer $token_a" \
        -H 'Content-Type: application/merge-patch+json' --data '{"metadata": {"annotations": {"e2e.vgpu.io/x": "y"}}}' \
        -w '\n%{http_code}' "$server/api/v1/nodes/$1/status"
}
out=$(status_patch_as_a "$CP")
if [[ ${out##*$'\n'} != 403 ]]; then
    echo "!! vgpu-site-a's flanneld token changed another node's status (HTTP ${out##*$'\n'}): $out" >&2
    exit 1
fi
[[ $out == *"flanneld may change only the status of its own node vgpu-site-a"* ]] \
    || { echo "!! another node's status refused, but not by vgpu-flanneld-own-node: $out" >&2; exit 1; }

read -r new_name new_address _ <<<"$NEW_NODE"
log "day two: $new_name joins (added to the inventory's gpu_nodes, make site --limit $new_name)"
# shellcheck disable=SC2086 # the spec is three words
node $NEW_NODE up
fake_gpus "$new_name"
give_access "$new_name" "$new_address"
# The inventory's last group is gpu_nodes' hosts: the operator's edit is an append.
docker exec "$CP" sh -c "printf '        %s:\n          ansible_host: %s\n' $new_name $new_address >>$inventory"
on_cp add-c make site INVENTORY=tests/node/cluster-inventory.yml ARGS="--limit $new_name"
until_true "$new_name advertising its GPU's memory (122 units)" 90 advertises "$new_name" 122
whole_site with-c

log "day two: vgpu-site-a leaves"
kc drain vgpu-site-a --ignore-daemonsets --delete-emptydir-data --timeout=300s >"$state/drain.log" 2>&1
on_cp remove-a make uninstall INVENTORY=tests/node/cluster-inventory.yml \
    ARGS="--limit vgpu-site-a -e vgpu_uninstall_cluster=true"
# The uninstall deleted vgpu-site-a's Node (the role), and with it the validity of its flanneld token.
if kc get node vgpu-site-a >/dev/null 2>&1; then
    echo "!! uninstall.yml --limit vgpu-site-a left its Node object" >&2
    exit 1
fi
if out=$(as_a get nodes 2>&1); then
    echo "!! the removed worker's flanneld token still works" >&2
    exit 1
fi
log "day two: the removed worker's flanneld token is refused: ${out:0:160}"
docker exec "$CP" sed -i '/^        vgpu-site-a:$/,+1d' "$inventory"
until_true "the day-two pods Running on the other workers" 120 two_off vgpu-site-a
whole_site without-a

# A fault: containerd and kubelet restarted on the worker under the day-two pods. They keep their
# quota and use (libvgpu's own report inside them), and the device plugin registers again: a new
# GPU pod that must run on that worker starts there.
stats_of() { kc exec -n day2 "$1" -- /opt/vgpu/manage --stats --json; }
pod=$(kc get pods -n day2 -l app=day2 -o jsonpath='{.items[0].metadata.name}')
worker=$(kc get pod -n day2 "$pod" -o jsonpath='{.spec.nodeName}')
before=$(stats_of "$pod")
log "day two: containerd and kubelet restarted on $worker (under $pod)"
docker exec "$worker" systemctl restart containerd kubelet
kc run after-restart -n day2 --image localhost/vgpu-components:0.1.0 --image-pull-policy Never --restart Never \
    --overrides '{"spec": {"nodeSelector": {"kubernetes.io/hostname": "'"$worker"'"}, "containers": [{"name": "after-restart",
      "image": "localhost/vgpu-components:0.1.0", "imagePullPolicy": "Never",
      "command": ["/opt/vgpu/vgpu-memory-usage", "500", "0"], "resources": {"limits": {"vgpu.io/gpu-memory": 20}}}]}}'
succeeded() { [[ $(kc get pod -n day2 "$1" -o jsonpath='{.status.phase}') == Succeeded ]]; }
until_true "a new GPU pod run to completion on $worker after the restart" 150 succeeded after-restart
after=$(stats_of "$pod")
[[ "$before" == "$after" ]] || { echo "!! $pod's quota or use changed across the restart: $before -> $after" >&2; exit 1; }
log "day two: $pod kept its quota and use across the restart: $after"
log "make e2e-site-day2: passed in $(($(date +%s) - started)) s"
