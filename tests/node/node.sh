#!/usr/bin/env bash
# The e2e node: a Debian 12 systemd container from the node image (tests/harness/build-node-image.sh)
# that hosts containerd and a real kubelet, on a Docker network without a way out (--internal), so
# that the air-gapped path is the only one: nothing can be downloaded during the run.
#
#   tests/node/node.sh up     start the node (idempotent)
#   tests/node/node.sh down   remove the node and its volumes; its network once no node is left on it
#   tests/node/node.sh logs   copy the node's service logs into build/node/logs
#
# One script for every node container, named by the environment: VGPU_E2E_NODE (the container and
# host name), VGPU_E2E_NETWORK and VGPU_E2E_SUBNET (its network), VGPU_E2E_ADDRESS (a fixed address
# in it, else Docker's choice), VGPU_E2E_BUNDLE (empty: no bundle on this node's disk),
# VGPU_NODE_STATE_DIR and VGPU_NODE_LOGS_DIR. The defaults are the single e2e node's; the
# three-node e2e site (tests/site/run-e2e.sh) starts three nodes on a network of their own.
#
# --privileged fails on hosts whose root lacks CAP_SYS_RESOURCE (ours), so the node gets what a
# kubelet and containerd need one by one (docs/testing.md, "The e2e node"):
#   every capability but CAP_SYS_RESOURCE  runc creates namespaces, mounts, device nodes, cgroups
#   seccomp and AppArmor unconfined        containerd's own profiles apply to the pods inside
#   /proc/sys writable (systempaths)       kubelet sets vm.overcommit_memory, kernel.panic and
#                                          kernel.panic_on_oops; these are the host's (not
#                                          namespaced), so `up` records them and `down` puts them back
#   all devices in the devices cgroup      runc may give pods the devices they are allowed (v1)
#   a private cgroup namespace whose       kubelet and systemd create the pods' cgroups, and
#   hierarchies node-init.sh mounts        agree where they are (the container's cgroup is
#   read-write                             their root, as a host's is)
#   /run, /run/lock, /tmp as tmpfs         systemd in a container
#   /lib/modules read-only, /dev/kmsg      kubelet's kernel checks and OOM watcher
#   volumes for /var/lib/containerd and    overlayfs cannot stack on the container's own overlay
#   /var/lib/kubelet
# and the offline bundle ($VGPU_E2E_BUNDLE) read-only at /srv/vgpu-bundle: the disk of an air-gapped
# site, which the node's own `make site` installs from (tests/node/site-inventory.yml). The kernel
# settings are the host's: the first node up on a network records them, and they go back when the
# last one of that network goes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
NODE=${VGPU_E2E_NODE:-vgpu-e2e-node}
NETWORK=${VGPU_E2E_NETWORK:-vgpu-e2e}
SUBNET=${VGPU_E2E_SUBNET:-172.31.250.0/24}
ADDRESS=${VGPU_E2E_ADDRESS:-}
IMAGE=localhost/vgpu-node:debian12
STATE=${VGPU_NODE_STATE_DIR:-$root/build/node}
LOGS=${VGPU_NODE_LOGS_DIR:-$STATE/logs}
# Set and empty: a node without the bundle (a worker of the e2e site: the control plane has it).
BUNDLE=${VGPU_E2E_BUNDLE-$root/build/bundle}
# The kernel settings kubelet sets (pkg/kubelet/cm: setupKernelTunables).
KERNEL_TUNABLES="vm/overcommit_memory kernel/panic kernel/panic_on_oops"

log() { echo ">> $*"; }

up() {
    if docker container inspect "$NODE" >/dev/null 2>&1; then
        log "$NODE is already up"
        return 0
    fi
    mkdir -p "$STATE"
    [[ -s $STATE/host-sysctls ]] || for key in $KERNEL_TUNABLES; do
        echo "$key $(cat "/proc/sys/$key")"
    done >"$STATE/host-sysctls"
    docker network inspect "$NETWORK" >/dev/null 2>&1 \
        || docker network create --internal --subnet "$SUBNET" "$NETWORK" >/dev/null
    local optional=()
    [[ -z $ADDRESS ]] || optional+=(--ip "$ADDRESS")
    [[ -z $BUNDLE ]] || optional+=(--volume "$(realpath "$BUNDLE"):/srv/vgpu-bundle:ro")
    docker run --detach --name "$NODE" --hostname "$NODE" --network "$NETWORK" "${optional[@]}" \
        --cap-add ALL --cap-drop SYS_RESOURCE \
        --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
        --security-opt systempaths=unconfined \
        --device-cgroup-rule 'a *:* rwm' \
        --cgroupns private --volume "$here/node-init.sh:/usr/local/sbin/vgpu-e2e-node-init:ro" \
        --tmpfs /run --tmpfs /run/lock --tmpfs /tmp \
        --volume /lib/modules:/lib/modules:ro --device /dev/kmsg \
        --volume "$NODE-containerd:/var/lib/containerd" --volume "$NODE-kubelet:/var/lib/kubelet" \
        "$IMAGE" /usr/local/sbin/vgpu-e2e-node-init >/dev/null
    for _ in $(seq 1 60); do
        state=$(docker exec "$NODE" systemctl is-system-running 2>/dev/null || true)
        case "$state" in
            running | degraded) log "$NODE is up ($state) at $(address)"; return 0 ;;
        esac
        sleep 1
    done
    echo "!! systemd in $NODE did not start within 60 s" >&2
    docker logs "$NODE" 2>&1 | tail -n 20 >&2
    return 1
}

address() {
    docker container inspect -f "{{ (index .NetworkSettings.Networks \"$NETWORK\").IPAddress }}" "$NODE"
}

logs() {
    docker container inspect "$NODE" >/dev/null 2>&1 || return 0
    mkdir -p "$LOGS"
    for unit in kubelet containerd; do
        docker exec "$NODE" journalctl --no-pager -u "$unit" >"$LOGS/$unit.log" 2>&1 || true
    done
    docker exec "$NODE" sh -c 'crictl ps -a; echo; crictl pods' >"$LOGS/crictl.txt" 2>&1 || true
    docker exec "$NODE" sh -c 'for f in /var/log/pods/*/*/*.log; do echo "== $f"; tail -n 100 "$f"; done' \
        >"$LOGS/pods.log" 2>&1 || true
    log "$NODE's logs in $LOGS"
}

down() {
    logs || true
    docker rm --force --volumes "$NODE" >/dev/null 2>&1 || true
    docker volume rm --force "$NODE-containerd" "$NODE-kubelet" >/dev/null 2>&1 || true
    log "$NODE removed"
    # The network, the admin kubeconfig and the host's kernel settings go with the last node.
    if docker network inspect "$NETWORK" >/dev/null 2>&1 \
        && [[ -n $(docker network inspect -f '{{ range .Containers }}{{ .Name }} {{ end }}' "$NETWORK") ]]; then
        return 0
    fi
    docker network rm "$NETWORK" >/dev/null 2>&1 || true
    rm -f "$STATE/admin.conf"
    if [[ -s $STATE/host-sysctls ]]; then
        while read -r key value; do echo "$value" >"/proc/sys/$key"; done <"$STATE/host-sysctls"
        rm -f "$STATE/host-sysctls"
    fi
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    logs) logs ;;
    address) address ;;
    *) echo "usage: $0 up|down|logs|address" >&2; exit 2 ;;
esac
