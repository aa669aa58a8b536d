# shellcheck shell=bash
# The reference scenario on the DRA path (issue 15, docs/dra.md), sourced by run.sh once the stack
# runs with vgpu_scheduling: dra:
#   VGPU_KUBELET_SCENARIO=dra tests/gpu/kubelet/run.sh
# run.sh has then started containerd $CONTAINERD_VERSION (its CRI applies the CDI devices kubelet
# passes; Debian 12's 1.6 ignores them) and kube-scheduler without the extender. Checks:
#   - the DRA driver publishes the node's ResourceSlice: each GPU a device with its memory;
#   - a pod whose claim asks for 3000 MiB runs vgpu-memory-usage 1200: kube-scheduler allocated the
#     claim (consumedCapacity 3000Mi), kubelet had the driver prepare it, and inside the pod
#     `nvidia-smi` shows 1200MiB / 3000MiB and `nvidia-smi -L` one GPU (on the fake, which has no
#     nvidia-smi: libvgpu's `manage --stats`); cgpu-monitor's /metrics has its quota and usage;
#   - the same with a 1000 MiB claim fails with CUDA_ERROR_OUT_OF_MEMORY;
#   - a 1000 MiB claim's pod that takes 3000 MiB from the driver itself (LD_LIBRARY_PATH unset) gets
#     cgpu-monitor's GPUMemoryOverQuota Event and is evicted: claim containers are enforced too;
#   - who reaches a GPU (access.sh): a pod without units, a sidecar beside a claim's container, the
#     driver opened by its path, as in the reference scenario;
#   - a claim for more memory than a GPU has stays Pending with kube-scheduler's reason;
#   - deleting the pod unprepares its claim: the claim's CDI specification leaves /var/run/cdi.
# Uses run.sh's helpers and variables (k, pass, fail, poll, phase, finished, quota_checks, oom_check,
# bypass_check, holds_1200, NS, NODE, FAKE, IMAGE, BYPASS).
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    echo "dra.sh is sourced by run.sh: VGPU_KUBELET_SCENARIO=dra tests/gpu/kubelet/run.sh" >&2
    exit 2
fi
DRIVER=gpu.vgpu.io
CDI_DIR=/var/run/cdi

section "the DRA driver's ResourceSlice"
node_slice() {
    k get resourceslices -o json | python3 -c '
import json, sys
node, driver = sys.argv[1], sys.argv[2]
for s in json.load(sys.stdin)["items"]:
    spec = s["spec"]
    if spec.get("nodeName") == node and spec.get("driver") == driver:
        for d in spec.get("devices", []):
            print(d["name"], d["capacity"]["memory"]["value"], d.get("allowMultipleAllocations", False))
        sys.exit(0)
sys.exit(1)' "$NODE" "$DRIVER"
}
if poll 90 node_slice; then
    devices=$(node_slice)
    echo "$devices" >>"$LOG"
    pass "the driver publishes $NODE's ResourceSlice: $(echo "$devices" | tr '\n' ';' | sed 's/;$//')"
else
    stop_here "a ResourceSlice of driver $DRIVER for $NODE within 90 s"
fi
# The largest GPU's memory in MiB, for a claim that fits none.
gpu_mib=$(node_slice | awk '{v = $2; sub(/Mi$/, "", v); if (v + 0 > max) max = v + 0} END {print max + 0}')

# claim_pod <name> <MiB> <command json> [<claim>]: a ResourceClaimTemplate of <MiB> and a pod using
# it; with <claim>, a ResourceClaim of that name (applied again unchanged for a second pod) that the
# pod names itself, as pods sharing one claim do.
claim_pod() {
    local kind=ResourceClaimTemplate object=$1 ref="resourceClaimTemplateName: $1"
    local spec="devices: {requests: [{name: gpu, exactly: {deviceClassName: $DRIVER, capacity: {requests: {memory: $2Mi}}}}]}"
    if [[ -n ${4:-} ]]; then
        kind=ResourceClaim object=$4 ref="resourceClaimName: $4"
    else
        spec="spec: {$spec}"
    fi
    k apply -f - >>"$LOG" 2>&1 <<POD
apiVersion: resource.k8s.io/v1
kind: $kind
metadata: {name: $object, namespace: $NS}
spec: {$spec}
---
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $NS}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  resourceClaims: [{name: gpu, $ref}]
  containers:
    - name: app
      image: $IMAGE
      imagePullPolicy: Never
      command: $3
      resources: {claims: [{name: gpu}]}
POD
}
claim_of() { k get pod -n "$NS" "$1" -o jsonpath='{.status.resourceClaimStatuses[0].resourceClaimName}' 2>/dev/null; }

section "a 3000 MiB claim, vgpu-memory-usage 1200"
logrun k create namespace "$NS"
claim_pod dra-3000 3000 '["/opt/vgpu/vgpu-memory-usage", "1200", "900"]'
holds_1200 dra-3000 150
claim=$(claim_of dra-3000)
allocation=$(k get resourceclaim -n "$NS" "$claim" -o jsonpath='{.status.allocation.devices.results[0]}' 2>>"$LOG")
echo "claim $claim: $allocation" >>"$LOG"
if python3 -c '
import json, sys
r = json.loads(sys.argv[1])
sys.exit(not (r["driver"] == sys.argv[2] and r["pool"] == sys.argv[3] and r["consumedCapacity"]["memory"] == "3000Mi"))' \
    "$allocation" "$DRIVER" "$NODE" 2>>"$LOG"; then
    pass "kube-scheduler allocated claim $claim: 3000Mi of $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["device"])' "$allocation") on $NODE"
else
    fail "claim $claim is allocated with consumedCapacity memory 3000Mi on $NODE (got: $allocation)"
fi
claim_uid=$(k get resourceclaim -n "$NS" "$claim" -o jsonpath='{.metadata.uid}' 2>>"$LOG")
spec_file=$CDI_DIR/vgpu.io-claim_$claim_uid.json
check "the driver prepared the claim: its CDI specification $spec_file" test -s "$spec_file"
quota_checks dra-3000 "the claim's quota"

section "the same with a 1000 MiB claim"
claim_pod dra-1000 1000 '["/opt/vgpu/vgpu-memory-usage", "1200", "30"]'
oom_check dra-1000 150

section "a 1000 MiB claim's pod that bypasses libvgpu"
claim_pod dra-bypass 1000 "$BYPASS"
bypass_check dra-bypass "its claim's 1000 MiB"

# shellcheck source=tests/gpu/kubelet/access.sh
source "$HERE/access.sh"

section "a claim larger than any GPU"
too_big=$((gpu_mib + 1000))
claim_pod dra-too-big "$too_big" '["/bin/true"]'
unschedulable() {
    k get pod -n "$NS" dra-too-big -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}' 2>/dev/null \
        | grep -q 'cannot allocate all claims'
}
if poll 60 unschedulable && [[ $(phase dra-too-big) == Pending ]]; then
    pass "a ${too_big} MiB claim stays Pending: $(k get pod -n "$NS" dra-too-big -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')"
else
    fail "a ${too_big} MiB claim stays Pending with kube-scheduler's 'cannot allocate all claims' (phase $(phase dra-too-big))"
fi

section "one claim named by two pods (issue 40): the second is not bound to it"
# Two pods naming the ResourceClaim "shared" itself, vgpu-memory-usage 200 each (the context takes
# about 518 MiB of the claim's 1000).
shared_pod() { claim_pod "$1" 1000 '["/opt/vgpu/vgpu-memory-usage", "200", "300"]' shared; }
shared_pod shared-a
if poll 150 sh -c "kubectl logs -n $NS shared-a 2>/dev/null | grep -q 'allocated 200 MiB'"; then
    pass "shared-a runs on ResourceClaim shared ($(k logs -n "$NS" shared-a | head -n 1))"
else
    fail "shared-a runs on ResourceClaim shared (phase $(phase shared-a))"
fi
shared_pod shared-b
turned_away() {
    k get events -n "$NS" --field-selector involvedObject.name=shared-b -o jsonpath='{range .items[*]}{.message}{"\n"}{end}' 2>/dev/null \
        | grep -m1 'cannot be reserved for the pods'
}
if poll 90 turned_away && [[ $(phase shared-b) == Pending ]] \
    && [[ $(k get resourceclaim -n "$NS" shared -o jsonpath='{.status.reservedFor[*].name}' 2>>"$LOG") == shared-a ]]; then
    pass "shared-b, naming shared-a's claim, stays Pending and unreserved: $(turned_away | cut -c1-240)"
else
    fail "shared-b, naming shared-a's claim, is turned away by vgpu-claim-one-consumer (phase $(phase shared-b); events: $(k get events -n "$NS" --field-selector involvedObject.name=shared-b -o jsonpath='{.items[*].message}' 2>&1 | cut -c1-300))"
fi
logrun k delete pod -n "$NS" shared-a shared-b --wait=false

section "unprepare"
logrun k delete pod -n "$NS" dra-3000 --wait=true --timeout=60s
if poll 60 sh -c "! test -e $spec_file"; then
    pass "deleting dra-3000 unprepared its claim: $spec_file is gone"
else
    fail "deleting dra-3000 unprepares its claim ($spec_file still there)"
fi
