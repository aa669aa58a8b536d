#!/usr/bin/env bash
# run.sh on this GPU-less machine, in a Docker container that stands in for the GPU host:
#   tests/gpu/kubelet/emulate.sh
# VGPU_KUBELET_SCENARIO (reference or multi) and VGPU_KUBELET_FAKE_GPUS (the fake GPUs, default 2)
# go to run.sh: VGPU_KUBELET_SCENARIO=multi tests/gpu/kubelet/emulate.sh is the two-GPU reference.
# The container, like the GPU host: root without CAP_SYS_RESOURCE, PID 1 not systemd (node-init.sh
# mounts its private cgroup hierarchies read-write, then sleeps), no network beyond loopback, no
# containerd, runc or iptables, python3 with Jinja2, PyYAML, packaging and requests, gcc and make.
# Unlike it: Debian 12 (Python 3.11, so pack.sh packs the Python libraries for 3.11), cgroup v1 on
# this machine, and no GPU: libvgpu's fake driver with a static CDI spec (run.sh's VGPU_KUBELET_FAKE).
# run.sh uses its Python stand-ins for curl and openssl here (VGPU_KUBELET_PYTHON_TOOLS), so that
# they are tried before a GPU host without those commands needs them.
# It gets what a device call gets: a copy of the working tree (tracked and untracked-not-ignored
# files) with the carry folders, and runs the same calls (unpack.sh, then run.sh). Logs go to
# build/gpu-kubelet-emulation/out. kubelet sets vm.overcommit_memory, kernel.panic and
# kernel.panic_on_oops, which are this machine's: they are recorded first and put back at the end.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
NAME=${VGPU_KUBELET_EMULATION:-vgpu-gpu-kubelet-emulation}
STATE=$ROOT/build/gpu-kubelet-emulation
PACKAGES="python3-jinja2 python3-yaml python3-packaging python3-requests python3-urllib3 python3-certifi
    python3-six python3-dateutil gcc make libc6-dev binutils xz-utils openssl curl libseccomp2"
TUNABLES="vm/overcommit_memory kernel/panic kernel/panic_on_oops"
log() { echo ">> $*"; }

cleanup() {
    docker rm --force --volumes "$NAME" >/dev/null 2>&1 || true
    docker volume rm --force "$NAME-containerd" "$NAME-kubelet" "$NAME-tmp" >/dev/null 2>&1 || true
    if [[ -s $STATE/host-sysctls ]]; then
        while read -r key value; do echo "$value" >"/proc/sys/$key"; done <"$STATE/host-sysctls"
        rm -f "$STATE/host-sysctls"
    fi
}
trap cleanup EXIT

"$ROOT/tests/harness/build-node-image.sh"
image=localhost/vgpu-gpu-host-emulation:$(echo "$PACKAGES $(docker image inspect -f '{{.Id}}' localhost/vgpu-node:debian12)" | sha256sum | cut -c1-12)
if ! docker image inspect "$image" >/dev/null 2>&1; then
    log "building $image (the node image and what the GPU host has installed)"
    docker rm --force "$NAME-build" >/dev/null 2>&1 || true
    docker run --name "$NAME-build" localhost/vgpu-node:debian12 sh -c \
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${PACKAGES//$'\n'/ } >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*"
    docker commit --change 'CMD ["sleep", "infinity"]' "$NAME-build" "$image" >/dev/null
    docker rm "$NAME-build" >/dev/null
fi

log "packing (Python libraries for the container's CPython 3.11)"
rm -rf "$STATE/tree" "$STATE/out"
mkdir -p "$STATE/tree" "$STATE/out"
VGPU_KUBELET_PYTHON=3.11 VGPU_KUBELET_CARRY=$STATE/carry "$HERE/pack.sh" | tee "$STATE/pack.log"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -c) | tar -C "$STATE/tree" -x
calls=0
for dir in "$STATE"/carry-*; do
    cp -a "$dir" "$STATE/tree/.gpu-kubelet-${dir##*-}"
    calls=$((calls + 1))
done

cleanup
mkdir -p "$STATE"
for key in $TUNABLES; do echo "$key $(cat "/proc/sys/$key")"; done >"$STATE/host-sysctls"
docker run --detach --name "$NAME" --hostname "$NAME" --network none \
    --cap-add ALL --cap-drop SYS_RESOURCE \
    --security-opt seccomp=unconfined --security-opt apparmor=unconfined --security-opt systempaths=unconfined \
    --device-cgroup-rule 'a *:* rwm' --cgroupns private \
    --volume "$ROOT/tests/node/node-init.sh:/usr/local/sbin/vgpu-node-init:ro" \
    --tmpfs /run --volume "$NAME-tmp:/tmp" --volume /lib/modules:/lib/modules:ro --device /dev/kmsg \
    --volume "$NAME-containerd:/var/lib/containerd" --volume "$NAME-kubelet:/var/lib/kubelet" \
    --volume "$STATE/tree:/repo" --volume "$STATE/out:/out" --workdir /repo \
    "$image" /usr/local/sbin/vgpu-node-init sleep infinity >/dev/null

rc=0
for i in $(seq 1 "$calls"); do
    if ((i < calls)); then
        log "call $i: tests/gpu/kubelet/unpack.sh .gpu-kubelet-$i"
        docker exec "$NAME" tests/gpu/kubelet/unpack.sh ".gpu-kubelet-$i" || { rc=1; break; }
    else
        log "call $i: tests/gpu/kubelet/unpack.sh .gpu-kubelet-$i && tests/gpu/kubelet/run.sh"
        docker exec -e OUT=/out -e VGPU_KUBELET_FAKE=1 -e VGPU_KUBELET_PYTHON_TOOLS=1 \
            -e "VGPU_KUBELET_SCENARIO=${VGPU_KUBELET_SCENARIO:-reference}" -e "VGPU_KUBELET_FAKE_GPUS=${VGPU_KUBELET_FAKE_GPUS:-2}" "$NAME" \
            sh -c "tests/gpu/kubelet/unpack.sh .gpu-kubelet-$i && timeout 600 tests/gpu/kubelet/run.sh" || rc=1
    fi
done
log "logs in $STATE/out"
exit "$rc"
