# shellcheck shell=bash
# Who reaches a GPU (issue 28 A) and the driver opened by its path (issue 24, case 5), sourced by
# run.sh (reference scenario) and dra.sh after their quota checks; the same pods as
# tests/node/test_node_gpu_access.py, with its scripts (tests/node/gpu_probe.py, dlopen_by_path.py):
#   - a pod without units that sets NVIDIA_VISIBLE_DEVICES=all sees no GPU: no /dev/nvidia*, no
#     driver library, NVML does not load, and on a GPU `nvidia-smi -L` fails in it;
#   - one pod, two containers: the GPU container sees its one GPU (one /dev/nvidiaN, NVML one device,
#     on a GPU `nvidia-smi -L` one line) and runs with LD_PRELOAD=/opt/vgpu/libvgpu.so, under which a
#     shell behaves as without it, and none of the driver's graphics files (issue 38); the sidecar
#     without units, NVIDIA_VISIBLE_DEVICES=all, sees none;
#   - a program that dlopens the real driver by the absolute path `ldconfig -p` lists and allocates
#     3000 MiB under a 1000 MiB quota gets CUDA_ERROR_OUT_OF_MEMORY (libvgpu preloaded hooks dlsym),
#     in the component image (Debian 12) and, on an Ubuntu 24.04 GPU host, in the host's userland.
# Uses run.sh's helpers and variables (k, pass, fail, poll, phase, finished, logrun, NS, IMAGE, FAKE,
# SCHEDULING, ROOT, LOG).
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    echo "access.sh is sourced by run.sh and dra.sh" >&2
    exit 2
fi
PROBE=$(cat "$ROOT/tests/node/gpu_probe.py")
DLOPEN_BY_PATH=$(cat "$ROOT/tests/node/dlopen_by_path.py")

# quota_pod <name> <MiB> <command json> [sidecar|-] [more]: a pod whose container `app` has a quota
# of <MiB> on this scenario's path (units of the device plugin, or a claim of the DRA driver); with
# `sidecar` a second container without units that names every GPU in its env; `more` continues the
# container's spec (and may go on with the pod's volumes: it comes last).
quota_pod() {
    local name=$1 mib=$2 command=$3 more=${5:-} claims="" resources sidecar=""
    if [[ $SCHEDULING == dra ]]; then
        k apply -f - >>"$LOG" 2>&1 <<TEMPLATE
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: $name, namespace: $NS}
spec:
  spec:
    devices:
      requests:
        - name: gpu
          exactly:
            deviceClassName: gpu.vgpu.io
            capacity: {requests: {memory: ${mib}Mi}}
TEMPLATE
        claims="  resourceClaims: [{name: gpu, resourceClaimTemplateName: $name}]"
        resources="{claims: [{name: gpu}]}"
    else
        resources="{limits: {vgpu.io/gpu-memory: $((mib / 100))}}"
    fi
    [[ ${4:-} != sidecar ]] || sidecar="    - {name: sidecar, image: $IMAGE, imagePullPolicy: Never, command: [sleep, \"600\"], env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]}"
    k apply -f - >>"$LOG" 2>&1 <<POD
apiVersion: v1
kind: Pod
metadata: {name: $name, namespace: $NS}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
$claims
  containers:
    - name: app
      image: $IMAGE
      imagePullPolicy: Never
      command: $command
      resources: $resources
$sidecar
$more
POD
}
# probe <pod> <container>: what the container reaches of the GPU (JSON).
probe() { k exec -n "$NS" "$1" -c "$2" -- python3 -c "$PROBE" 2>>"$LOG" | tail -n 1; }
# sees_none <probe json>: no device file, no driver library, NVML does not load.
sees_none() {
    python3 -c 'import json, sys; d = json.loads(sys.argv[1]); sys.exit(bool(d["devices"] or d["driver_libraries"] or isinstance(d["nvml"], int)))' "$1" 2>>"$LOG"
}
# sees_one <probe json>: one GPU device file (and the control file), the driver, NVML one device.
sees_one() {
    python3 -c '
import json, sys
d = json.loads(sys.argv[1])
gpus = [p for p in d["devices"] if p[len("/dev/nvidia"):].isdigit()]
sys.exit(not (len(gpus) == 1 and d["driver_libraries"] and d["nvml"] == 1 and d["ld_preload"] == "/opt/vgpu/libvgpu.so"))' "$1" 2>>"$LOG"
}
running_pod() { [[ $(phase "$1") == Running ]]; }
# smi_lines <pod> <container>: what `nvidia-smi -L` says in the container (a GPU host only).
smi_lines() { k exec -n "$NS" "$1" -c "$2" -- nvidia-smi -L 2>&1; }

section "who reaches a GPU: a pod without units, a sidecar, the driver opened by its path"
k apply -f - >>"$LOG" 2>&1 <<POD
apiVersion: v1
kind: Pod
metadata: {name: no-units, namespace: $NS}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: $IMAGE
      imagePullPolicy: Never
      command: [sleep, "600"]
      env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]
POD
quota_pod pair 3000 '[sleep, "600"]' sidecar
by_path() { python3 -c 'import json, sys; print(json.dumps([sys.argv[1], "-c", sys.argv[2], "3000"]))' "$1" "$DLOPEN_BY_PATH"; }
quota_pod by-path 1000 "$(by_path python3)"
# On a GPU host, the same program in an Ubuntu 24.04 userland: the host's /usr (its C library, loader
# and Python) mounted read-only over the image's, as the PyTorch pod of run.sh does.
ubuntu=""
if [[ $FAKE != 1 && -x /usr/bin/python3 ]] && grep -q 'VERSION_ID="24.04"' /etc/os-release 2>/dev/null; then
    ubuntu="      volumeMounts:
$(for d in /usr/bin /usr/lib /usr/lib64; do [[ -d $d ]] && echo "        - {name: host${d//\//-}, mountPath: $d, readOnly: true}"; done)
  volumes:
$(for d in /usr/bin /usr/lib /usr/lib64; do [[ -d $d ]] && echo "    - {name: host${d//\//-}, hostPath: {path: $d, type: Directory}}"; done)"
    quota_pod by-path-ubuntu 1000 "$(by_path /usr/bin/python3)" - "$ubuntu"
fi

if poll 120 running_pod no-units; then
    seen=$(probe no-units app)
    echo "no-units: $seen" >>"$LOG"
    smi=""
    [[ $FAKE == 1 ]] || smi=$(smi_lines no-units app)
    if sees_none "$seen" && ! grep -q '^GPU ' <<<"$smi"; then
        pass "a pod without units that sets NVIDIA_VISIBLE_DEVICES=all sees no GPU ($seen${smi:+; nvidia-smi -L: $(head -n 1 <<<"$smi")})"
    else
        fail "a pod without units that sets NVIDIA_VISIBLE_DEVICES=all sees no GPU (got: $seen ${smi})"
    fi
else
    fail "the pod without units runs (phase $(phase no-units))"
fi

if poll 150 running_pod pair; then
    gpu=$(probe pair app)
    side=$(probe pair sidecar)
    echo "pair/app: $gpu" >>"$LOG"
    echo "pair/sidecar: $side" >>"$LOG"
    listed=""
    [[ $FAKE == 1 ]] || listed=$(smi_lines pair app)
    if sees_one "$gpu" && { [[ $FAKE == 1 ]] || [[ $(grep -c '^GPU ' <<<"$listed") == 1 ]]; }; then
        pass "the GPU container of a pod sees its one GPU, libvgpu preloaded ($gpu${listed:+; nvidia-smi -L: $listed})"
    else
        fail "the GPU container of a pod sees its one GPU with LD_PRELOAD=/opt/vgpu/libvgpu.so (got: $gpu $listed)"
    fi
    if sees_none "$side"; then
        pass "its sidecar without units, NVIDIA_VISIBLE_DEVICES=all, sees no GPU ($side)"
    else
        fail "its sidecar without units sees no GPU (got: $side)"
    fi
    # Issue 38: none of the driver's graphics files (the runtime's jit-cdi mode hands them all; the
    # role's runc-without-graphics takes them out). What the host has says whether there were any.
    host_graphics=$(python3 "$ROOT/tests/node/gpu_probe.py" 2>>"$LOG" | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["graphics"]))' 2>>"$LOG")
    if python3 -c 'import json, sys; sys.exit(bool(json.loads(sys.argv[1])["graphics"]))' "$gpu" 2>>"$LOG"; then
        pass "the GPU container gets none of the driver's graphics files (the host has ${host_graphics:-?})"
    else
        fail "the GPU container gets none of the driver's graphics files (got: $gpu)"
    fi
    # The container's shell expands \$LD_PRELOAD and \$?; a child's exit status must come through.
    shell_out=$(k exec -n "$NS" pair -c app -- sh -c "echo \"\$LD_PRELOAD\"; ls -d /opt/vgpu; sh -c 'exit 3'; echo \"status \$?\"" \
        2>"$LOG_DIR/preload.err")
    shell_rc=$?
    if [[ $shell_out == $'/opt/vgpu/libvgpu.so\n/opt/vgpu\nstatus 3' && $shell_rc == 0 && ! -s $LOG_DIR/preload.err ]]; then
        pass "a shell, ls and a child's exit status in the GPU container as without LD_PRELOAD=/opt/vgpu/libvgpu.so (nothing on stderr)"
    else
        fail "a shell in the GPU container runs as before under LD_PRELOAD (got '$shell_out', rc $shell_rc, stderr $(head -c 200 "$LOG_DIR/preload.err"))"
    fi
else
    fail "the pod with a GPU container and a sidecar runs (phase $(phase pair))"
fi

# by_path_check <pod> <userland>: the pod running dlopen_by_path.py 3000 under 1000 MiB is refused.
by_path_check() {
    local log
    poll 150 finished "$1"
    log=$(k logs -n "$NS" "$1" 2>&1)
    echo "$1: $log" >>"$LOG"
    if [[ $(phase "$1") == Failed ]] && grep -q CUDA_ERROR_OUT_OF_MEMORY <<<"$log"; then
        pass "a program that opens the real driver by its path ($2) gets CUDA_ERROR_OUT_OF_MEMORY past its 1000 MiB quota ($(tail -n 1 <<<"$log"))"
    else
        fail "a program that opens the real driver by its path ($2) is refused past its quota (phase $(phase "$1"): $log)"
    fi
}
by_path_check by-path "Debian 12, the component image"
if [[ -n $ubuntu ]]; then
    by_path_check by-path-ubuntu "Ubuntu 24.04, the host's /usr"
fi
logrun k delete pod -n "$NS" no-units pair by-path by-path-ubuntu --wait=false --ignore-not-found
