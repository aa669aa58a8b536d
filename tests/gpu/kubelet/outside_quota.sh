# shellcheck shell=bash
# GPU memory outside any quota, through the real kubelet on the H200 (issue 28 finding 2): sourced by
# run.sh after its bypass section (it uses run.sh's helpers: k, poll, pass, fail, skip, section,
# phase, monitor_metrics, over_quota_message, NS, IMAGE, FAKE, LOG), then `outside_quota_checks`.
#   - a pod that asks for no GPU memory and gets the GPU anyway (privileged, NVIDIA_VISIBLE_DEVICES=all:
#     a privileged pod gets what it names, issue 28 part A) takes 500 MiB: cgpu-monitor holds it to a
#     quota of 0, posts GPUMemoryOverQuota on it ("no GPU-memory quota") and evicts it after the grace;
#   - a process on the host, outside Kubernetes, takes 500 MiB: cgpu-monitor reports it with its PID
#     and command on a GPUMemoryOverQuota Event of the node and in vgpu_host_process_memory_bytes, and
#     says it cannot be evicted; the check then stops the process itself.
# Both take the driver directly (no libvgpu): /opt/vgpu/vgpu-memory-usage with LD_LIBRARY_PATH unset.

# node_over_quota_message <pid>: the message of the monitor's GPUMemoryOverQuota Event on the node
# that names this process, if any.
node_over_quota_message() {
    k get events -n default --field-selector "reason=GPUMemoryOverQuota,involvedObject.kind=Node" \
        -o jsonpath='{range .items[*]}{.message}{"\n"}{end}' 2>/dev/null | grep -m1 "process $1 "
}

outside_quota_checks() {
    section "GPU memory outside any quota: a privileged pod without units, a host process"
    if [[ $FAKE == 1 ]]; then
        skip "GPU memory outside any quota (the fake driver reports no process to the monitor)"
        return
    fi
    k apply -f - >>"$LOG" 2>&1 <<POD
apiVersion: v1
kind: Pod
metadata: {name: privileged-no-units, namespace: $NS}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: $IMAGE
      imagePullPolicy: Never
      command: ["/usr/bin/env", "-u", "LD_LIBRARY_PATH", "-u", "LD_PRELOAD", "/opt/vgpu/vgpu-memory-usage", "500", "600"]
      env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}, {name: NVIDIA_DRIVER_CAPABILITIES, value: "compute,utility"}]
      securityContext: {privileged: true}
      volumeMounts: [{name: vgpu, mountPath: /opt/vgpu, readOnly: true}]
  volumes: [{name: vgpu, hostPath: {path: /opt/vgpu, type: Directory}}]
POD
    local message
    if poll 150 has_over_quota_event privileged-no-units; then
        message=$(over_quota_message privileged-no-units)
        if grep -q "no GPU-memory quota" <<<"$message"; then
            pass "cgpu-monitor reports privileged-no-units, GPU memory without a quota: $message"
        else
            fail "cgpu-monitor's Event on privileged-no-units says it has no GPU-memory quota (got: $message)"
        fi
        if poll 90 sh -c "kubectl get pod -n $NS privileged-no-units 2>&1 | grep -q NotFound"; then
            pass "privileged-no-units is evicted: gone after the monitor's Event"
        else
            fail "privileged-no-units is evicted after the monitor's Event (phase $(phase privileged-no-units))"
        fi
    else
        fail "cgpu-monitor reports privileged-no-units (a pod without units holding GPU memory) with a GPUMemoryOverQuota Event (phase $(phase privileged-no-units); $(k logs -n "$NS" privileged-no-units 2>&1 | head -n 1))"
        monitor_metrics | grep -E '^vgpu_(container_memory_(real|limit)|host_process|gpu_memory_system|quota_violations)' >>"$LOG" 2>&1
        k delete pod -n "$NS" privileged-no-units --wait=false >>"$LOG" 2>&1
    fi

    env -u LD_LIBRARY_PATH -u LD_PRELOAD /opt/vgpu/vgpu-memory-usage 500 300 >>"$LOG" 2>&1 &
    local host_pid=$!
    if poll 150 node_over_quota_message "$host_pid"; then
        message=$(node_over_quota_message "$host_pid")
        if grep -q "cannot be evicted" <<<"$message"; then
            pass "cgpu-monitor reports host process $host_pid on the node, not evictable: $message"
        else
            fail "cgpu-monitor's node Event on process $host_pid says it cannot be evicted (got: $message)"
        fi
        if monitor_metrics | grep -q "^vgpu_host_process_memory_bytes{.*pid=\"$host_pid\""; then
            pass "vgpu_host_process_memory_bytes has process $host_pid"
        else
            fail "vgpu_host_process_memory_bytes has process $host_pid"
        fi
    else
        fail "cgpu-monitor reports host process $host_pid (500 MiB outside Kubernetes) with a GPUMemoryOverQuota Event on the node"
        monitor_metrics | grep -E '^vgpu_(host_process|gpu_memory_system|quota_violations)' >>"$LOG" 2>&1
    fi
    kill "$host_pid" 2>/dev/null
    wait "$host_pid" 2>/dev/null
}
