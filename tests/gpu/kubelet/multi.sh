# shellcheck shell=bash
# The multi-GPU reference (issue 17), sourced by run.sh once the stack runs:
#   VGPU_KUBELET_SCENARIO=multi tests/gpu/kubelet/run.sh
# Needs two GPUs (nvidia-h200-x2; in the emulation, two fake ones). Request sizes come from the
# GPUs' size as the device plugin publishes it (the node's vgpu.io/gpus annotation): on an H200
# (1437 units of 100 MiB) the issue's 800 units (80 000 MiB) and 200 units; on smaller GPUs the same
# shares (4/7 and 1/7 of a GPU), so that a big pod always takes more than half a GPU:
#   - two big pods land on the two GPUs, one each: the extender's vgpu.io/gpu-uuid annotations
#     differ, and inside each pod the GPU it sees (`nvidia-smi -L`; on the fake, which has no
#     nvidia-smi, the device UUID of libvgpu's `manage --stats --json`) is its annotated one;
#   - two small pods share one GPU (the extender's best-fit packs them; the same checks);
#   - each pod's own quota in it (`nvidia-smi`, and `manage --stats`);
#   - cgpu-monitor's /metrics has each pod's quota under its own GPU's UUID label.
# Uses run.sh's helpers and variables (k, pass, fail, poll, gpu_pod, phase, NS, NODE, FAKE).
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    echo "multi.sh is sourced by run.sh: VGPU_KUBELET_SCENARIO=multi tests/gpu/kubelet/run.sh" >&2
    exit 2
fi

section "two GPUs: request sizes from the GPUs' size"
gpus_annotation() { k get node "$NODE" -o jsonpath='{.metadata.annotations.vgpu\.io/gpus}' 2>/dev/null; }
annotated_node() { [[ -n $(gpus_annotation) ]]; }
poll 60 annotated_node
gpus_json=$(gpus_annotation)
echo "vgpu.io/gpus: $gpus_json" >>"$LOG"
read -r gpu_count unit_mib per_gpu < <(python3 -c '
import json, sys
d = json.loads(sys.argv[1] or "{}")
gpus = [g for g in d.get("gpus", []) if g.get("healthy")]
print(len(gpus), d.get("unit_mib", 0), min((g["units"] for g in gpus), default=0))' "$gpus_json" 2>>"$LOG")
if [[ ${gpu_count:-0} -ge 2 ]]; then
    pass "the device plugin publishes $gpu_count healthy GPUs of $per_gpu units of $unit_mib MiB"
else
    stop_here "the node's vgpu.io/gpus annotation lists two healthy GPUs (got ${gpu_count:-0}; see run.log)"
fi
# Big: 4/7 of a GPU, at most the issue's 800 units, and always more than half. Small: 1/7, at most 200.
big=$((per_gpu * 4 / 7 < 800 ? per_gpu * 4 / 7 : 800))
((big * 2 > per_gpu)) || big=$((per_gpu / 2 + 1))
small=$((per_gpu / 7 < 200 ? per_gpu / 7 : 200))
# What each pod allocates and holds: half the small quota (on an H200, 10 000 MiB).
hold=$((small * unit_mib / 2))
say "big pods: $big units ($((big * unit_mib)) MiB), small pods: $small units ($((small * unit_mib)) MiB), each holding $hold MiB"

logrun k create namespace "$NS"
# running <pod>: the pod holds its memory.
running() { k logs -n "$NS" "$1" 2>/dev/null | grep -q "allocated $hold MiB"; }
annotated() { k get pod -n "$NS" "$1" -o jsonpath='{.metadata.annotations.vgpu\.io/gpu-uuid}' 2>/dev/null; }
# seen <pod>: the UUID of the GPU the pod's processes see.
seen() {
    local out
    if [[ $FAKE == 1 ]]; then
        out=$(k exec -n "$NS" "$1" -- /opt/vgpu/manage --stats --json 2>&1)
        echo "$out" >>"$LOG"
        python3 -c 'import json, sys; print(" ".join(d["uuid"] or "null" for d in json.loads(sys.argv[1])["devices"]))' "$out" 2>>"$LOG"
    else
        out=$(k exec -n "$NS" "$1" -- nvidia-smi -L 2>&1)
        echo "$out" >>"$LOG"
        grep -o 'GPU-[0-9a-f-]*' <<<"$out" | tr '\n' ' ' | sed 's/ $//'
    fi
}
# quota_ok <pod> <units>: the pod's own quota, from libvgpu and (on a GPU) from nvidia-smi.
quota_ok() {
    local pod=$1 mib=$(($2 * unit_mib)) stats smi
    stats=$(k exec -n "$NS" "$pod" -- /opt/vgpu/manage --stats --json 2>>"$LOG")
    echo "$stats" >>"$LOG"
    if python3 -c 'import json,sys; d=json.loads(sys.argv[1])["devices"]; sys.exit(not (len(d) == 1 and d[0]["limit_bytes"]>>20 == int(sys.argv[2]) and d[0]["used_bytes"]>>20 == int(sys.argv[3])))' \
        "$stats" "$mib" "$hold" 2>>"$LOG"; then
        pass "manage --stats in $pod: quota $mib MiB, $hold MiB used"
    else
        fail "manage --stats in $pod shows one GPU, quota $mib MiB and $hold MiB used"
    fi
    [[ $FAKE == 1 ]] && return
    smi=$(k exec -n "$NS" "$pod" -- nvidia-smi 2>&1)
    echo "$smi" >>"$LOG"
    local shown
    shown=$(grep -o '[0-9]*MiB / *[0-9]*MiB' <<<"$smi" | head -n 1)
    if [[ $(grep -c 'MiB / *[0-9]*MiB' <<<"$smi") == 1 ]] && grep -q "MiB / *${mib}MiB" <<<"$shown"; then
        pass "kubectl exec $pod -- nvidia-smi shows its own quota: $shown"
    else
        fail "kubectl exec $pod -- nvidia-smi shows one GPU with its quota ${mib}MiB (got: $shown)"
    fi
}
# place <pod> <pod>: both run; prints their annotated GPUs and checks each sees its own.
declare -A uuid_of
place() {
    local pod got
    for pod in "$@"; do
        if poll 120 running "$pod"; then
            pass "$pod runs and holds $hold MiB ($(k logs -n "$NS" "$pod" | head -n 1))"
        else
            fail "$pod runs and allocates $hold MiB (phase $(phase "$pod"))"
        fi
        uuid_of[$pod]=$(annotated "$pod")
        got=$(seen "$pod")
        if [[ -n ${uuid_of[$pod]} && $got == "${uuid_of[$pod]}" ]]; then
            pass "$pod sees one GPU, the one the extender annotated ($got)"
        else
            fail "$pod sees one GPU, the one the extender annotated (annotation '${uuid_of[$pod]}', seen '$got')"
        fi
    done
}

section "two big pods: one on each GPU"
gpu_pod big-0 "$big" "[\"/opt/vgpu/vgpu-memory-usage\", \"$hold\", \"900\"]"
gpu_pod big-1 "$big" "[\"/opt/vgpu/vgpu-memory-usage\", \"$hold\", \"900\"]"
place big-0 big-1
if [[ -n ${uuid_of[big-0]} && -n ${uuid_of[big-1]} && ${uuid_of[big-0]} != "${uuid_of[big-1]}" ]]; then
    pass "big-0 and big-1 ($big units each, more than half a GPU) are on different GPUs"
else
    fail "big-0 and big-1 are on different GPUs (${uuid_of[big-0]:-none}, ${uuid_of[big-1]:-none})"
fi

section "two small pods: one GPU shared"
# One after the other: the second is placed while the first holds its units.
gpu_pod small-0 "$small" "[\"/opt/vgpu/vgpu-memory-usage\", \"$hold\", \"900\"]"
poll 120 running small-0
gpu_pod small-1 "$small" "[\"/opt/vgpu/vgpu-memory-usage\", \"$hold\", \"900\"]"
place small-0 small-1
if [[ -n ${uuid_of[small-0]} && ${uuid_of[small-0]} == "${uuid_of[small-1]}" ]]; then
    pass "small-0 and small-1 ($small units each) share one GPU (${uuid_of[small-0]})"
else
    fail "small-0 and small-1 share one GPU (${uuid_of[small-0]:-none}, ${uuid_of[small-1]:-none})"
fi

section "each pod's own quota"
for pod in big-0 big-1 small-0 small-1; do
    units=$big
    [[ $pod == small-* ]] && units=$small
    quota_ok "$pod" "$units"
done

section "cgpu-monitor: each pod on its own GPU"
monitor_ip=$(k get pod -n kube-system -l app.kubernetes.io/name=cgpu-monitor -o jsonpath='{.items[0].status.podIP}')
# quota lines: pod UUID bytes, for the test's namespace.
quotas() {
    curl -sf --max-time 5 "http://$monitor_ip:9395/metrics" | python3 -c '
import re, sys
for line in sys.stdin:
    if line.startswith("vgpu_container_memory_quota_bytes{"):
        labels = dict(re.findall(r"(\w+)=\"([^\"]*)\"", line))
        if labels.get("namespace") == sys.argv[1]:
            print(labels.get("pod"), labels.get("UUID"), int(float(line.split()[-1])))' "$NS"
}
all_listed() { [[ $(quotas | cut -d' ' -f1 | sort -u | grep -c -E '^(big|small)-[01]$') == 4 ]]; }
poll 60 all_listed
listed=$(quotas)
echo "$listed" >>"$LOG"
for pod in big-0 big-1 small-0 small-1; do
    units=$big
    [[ $pod == small-* ]] && units=$small
    want="$pod ${uuid_of[$pod]:-none} $((units * unit_mib * 1048576))"
    if grep -qxF "$want" <<<"$listed"; then
        pass "cgpu-monitor's /metrics: $pod's quota $((units * unit_mib)) MiB under UUID ${uuid_of[$pod]}"
    else
        fail "cgpu-monitor's /metrics has $pod's quota under its GPU ($want; got: $(grep "^$pod " <<<"$listed" | tr '\n' ';'))"
    fi
done
