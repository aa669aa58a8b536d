#!/usr/bin/env bash
# `make e2e-node`: a fresh Debian 12 node (tests/node/node.sh) with fake GPUs provisions itself as an
# operator's GPU machine would: a clean copy of this checkout on it, the offline bundle of `make
# bundle` on its disk (no network), and `make site INVENTORY=tests/node/site-inventory.yml` run on
# the node, nothing else; site.yml's own verification runs its sample pod. Then:
#   1. the suite tests/node against the real cluster;
#   2. playbooks/verify_cluster.yml (from this machine, as every later playbook);
#   3. a second `make site` on the node, which must report changed=0 (with VGPU_E2E_DAY2=1, `make
#      e2e-node-day2`: and upgrade.yml with nothing new, changed=0);
#   4. uninstall.yml (the stack; the cluster stays) and its rerun (changed=0); with VGPU_E2E_DAY2=1,
#      stack.yml then puts the GPU stack back onto the cluster that is left (as onto one kubespray
#      or k3s-ansible built), and its rerun changes nothing;
#   5. uninstall.yml with vgpu_uninstall_cluster removes the stack and the cluster; its rerun
#      changes nothing, and nothing may be left.
# VGPU_E2E_SCHEDULING=dra (`make e2e-node-dra`): the node gets vgpu_scheduling dra (the bundle's
# containerd-cdi, the DRA driver) and the suite is tests/node/test_node_dra.py (claims).
# VGPU_E2E_UPGRADE_FROM=<git revision> (`make e2e-node-upgrade`): the node is provisioned by that
# release instead (its checkout, its component image in a copy of the bundle, its inventory with the
# settings below under that release's names), then this tree's upgrade.yml runs with that inventory
# unchanged: old names read with a deprecation, the settings kept, changed=0 on the second run,
# verify_cluster.yml passes; then the cluster is removed as in step 5.
# KEEP=1 stops after step 3 and leaves the cluster up, also after a failure (kubeconfig:
# build/node/admin.conf);
# `make e2e-node-down` removes it. Logs of every step and of the node are in build/node/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
state=$root/build/node
inventory=$here/inventory.yml
export VGPU_E2E_BUNDLE=${VGPU_E2E_BUNDLE:-$root/build/bundle}
export VGPU_FAKE_DRIVER_DIR=${VGPU_FAKE_DRIVER_DIR:-$root/files/libvgpu/build/rel/fake}
# kubelet 1.35+ refuses cgroup v1 unless told (kubeadm_allow_cgroup_v1).
VGPU_E2E_CGROUP_V1=true
[[ ! -f /sys/fs/cgroup/cgroup.controllers ]] || VGPU_E2E_CGROUP_V1=false
export VGPU_E2E_CGROUP_V1
export ANSIBLE_FORCE_COLOR=0
export VGPU_E2E_SCHEDULING=${VGPU_E2E_SCHEDULING:-extender}
# Each task's time in the step logs: how the CI budget is watched.
export ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks
NODE=${VGPU_E2E_NODE:-vgpu-e2e-node}
mkdir -p "$state"

log() { echo ">> $(date +%T) $*"; }

finish() {
    local rc=$?
    if [[ ${KEEP:-0} == 1 ]]; then
        "$here/node.sh" logs
        log "the node stays up: KUBECONFIG=$state/admin.conf kubectl get nodes (make e2e-node-down removes it)"
    else
        "$here/node.sh" down
    fi
    ((rc == 0)) || echo "!! make e2e-node failed (rc $rc); logs in $state" >&2
    exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

# play <log name> <playbook> [ansible-playbook args...]: run it, keep its output, say how long.
play() {
    local name="$1" playbook="$2" started
    shift 2
    started=$(date +%s)
    log "ansible-playbook $playbook $* (log: $state/$name.log)"
    if ! ansible-playbook -i "$inventory" "$playbook" "$@" >"$state/$name.log" 2>&1; then
        tail -n 60 "$state/$name.log" >&2
        return 1
    fi
    sed -n '/PLAY RECAP/,$p' "$state/$name.log"
    log "$name took $(($(date +%s) - started)) s"
}

# site_on_node <log name>: `make site` in the node's copy of the checkout, as the operator runs it.
site_on_node() {
    local name="$1" started
    started=$(date +%s)
    log "make site on $NODE (log: $state/$name.log)"
    if ! docker exec -e ANSIBLE_FORCE_COLOR -e ANSIBLE_CALLBACKS_ENABLED -e VGPU_E2E_SCHEDULING -e VGPU_E2E_CGROUP_V1 \
        -w "$checkout" "$NODE" make site INVENTORY=tests/node/site-inventory.yml >"$state/$name.log" 2>&1; then
        tail -n 60 "$state/$name.log" >&2
        return 1
    fi
    sed -n '/PLAY RECAP/,$p' "$state/$name.log"
    log "$name took $(($(date +%s) - started)) s"
}

# unchanged <log name>: the run's recap reports changed=0 for every host.
unchanged() {
    if grep -E '^\S+ +: .*changed=[1-9]' "$state/$1.log"; then
        grep -B1 -E '^changed:' "$state/$1.log" | grep -E '^TASK|^changed' >&2 || true
        echo "!! $1 changed something; a rerun must change nothing" >&2
        return 1
    fi
}

# upgrade_from_release: this tree's upgrade.yml on the site the earlier release provisioned, with
# that release's inventory as it is (make e2e-node-upgrade), then the cluster removed.
upgrade_from_release() {
    inventory=$state/previous/checkout/tests/node/inventory.yml
    play upgrade "$root/playbooks/upgrade.yml"
    local name
    for name in vgpu_stack_enforcement_grace_seconds vgpu_stack_log_format vgpu_stack_reserved_mib; do
        grep -q "$name.*deprecated\|deprecated.*$name" "$state/upgrade.log" \
            || { echo "!! upgrade.yml gave no deprecation for $name" >&2; return 1; }
    done
    play upgrade-again "$root/playbooks/upgrade.yml"
    unchanged upgrade-again
    # The settings set under the old names reach the components.
    local config
    config=$(docker exec "$NODE" kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system get configmap vgpu-config -o jsonpath='{.data.config\.yaml}')
    for setting in 'grace_seconds: 45' 'log_format: text' 'reserved_mib: 256'; do
        grep -qx " *$setting" <<<"$config" || { echo "!! the components' config lacks '$setting':" >&2; echo "$config" >&2; return 1; }
    done
    play verify-cluster "$root/playbooks/verify_cluster.yml"
    play uninstall-cluster "$root/playbooks/uninstall.yml" -e vgpu_uninstall_cluster=true
    "$here/check-uninstalled.sh" cluster
    log "make e2e-node-upgrade: $upgrade_from upgraded, passed"
}

upgrade_from=${VGPU_E2E_UPGRADE_FROM:-}
provisioner=$root
if [[ -n $upgrade_from ]]; then
    "$here/previous-release.sh" "$upgrade_from" "$state/previous"
    provisioner=$state/previous/checkout
fi
# The node's disk holds the provisioning release's bundle (this tree's, unless upgrading).
node_bundle=$VGPU_E2E_BUNDLE
[[ -z $upgrade_from ]] || node_bundle=$state/previous/bundle
VGPU_E2E_BUNDLE=$node_bundle "$here/node.sh" down >/dev/null
VGPU_E2E_BUNDLE=$node_bundle "$here/node.sh" up
play fake-gpu "$here/fake_gpu.yml"
# What a clean clone of this working tree (or the earlier release) holds, uncommitted changes too, a
# git repository as the operator's clone is; the node's `make site` builds its own virtualenv and
# collection from it.
checkout=/root/vgpu-isolation
(cd "$provisioner" && "$root/tests/harness/copy-tree.sh" "$state/checkout")
git -C "$state/checkout" init --quiet
docker cp "$state/checkout" "$NODE:$checkout"
site_on_node site

address=$("$here/node.sh" address)
docker exec "$NODE" cat /etc/kubernetes/admin.conf \
    | sed -E "s#server: https://[^ ]+#server: https://$address:6443#" >"$state/admin.conf"
chmod 0600 "$state/admin.conf"

if [[ -n $upgrade_from ]]; then
    upgrade_from_release
    exit 0
fi

log "the e2e node suite ($VGPU_E2E_SCHEDULING path)"
(cd "$root" && PYTHONPATH="$root" VGPU_E2E_NODE="$NODE" timeout 1800 pytest -p no:cacheprovider -q tests/node)
play verify-cluster "$root/playbooks/verify_cluster.yml"
site_on_node site-again
unchanged site-again
# The day-two playbooks on this real cluster (make e2e-node-day2): not in `make test`, whose 60
# minutes cold they would overrun (upgrade.yml, stack.yml and its rerun: about 14 minutes).
day2=${VGPU_E2E_DAY2:-0}
if [[ $day2 == 1 ]]; then
    play upgrade "$root/playbooks/upgrade.yml"
    unchanged upgrade
fi
[[ ${KEEP:-0} == 1 ]] && exit 0

# The stack goes (and, day two, comes back onto the existing cluster with stack.yml), then goes
# with the cluster; each second run must change nothing.
play uninstall "$root/playbooks/uninstall.yml"
play uninstall-again "$root/playbooks/uninstall.yml"
unchanged uninstall-again
"$here/check-uninstalled.sh" stack
if [[ $day2 == 1 ]]; then
    play stack "$root/playbooks/stack.yml"
    play stack-again "$root/playbooks/stack.yml"
    unchanged stack-again
fi
play uninstall-cluster "$root/playbooks/uninstall.yml" -e vgpu_uninstall_cluster=true
play uninstall-cluster-again "$root/playbooks/uninstall.yml" -e vgpu_uninstall_cluster=true
unchanged uninstall-cluster-again
"$here/check-uninstalled.sh" cluster
log "make e2e-node: passed"
