# shellcheck shell=bash
# cgpu-monitor's backstop against a tenant who knows its rules (issue 38), through the real kubelet
# on the H200: sourced by run.sh after outside_quota.sh (it uses run.sh's helpers: k, poll, pass,
# fail, skip, section, phase, in_time, gpu_pod, monitor_metrics, over_quota_message, has_over_quota_event,
# NS, IMAGE, FAKE, LOG), then `backstop_checks`.
#   - a pod with terminationGracePeriodSeconds of a year whose PID 1 ignores SIGTERM takes 3000 MiB
#     past libvgpu on a 1000 MiB quota: it is gone, and its memory with it, within the bound
#     (vgpu_enforcement_grace_seconds 30, then at most one check, then
#     vgpu_enforcement_termination_grace_seconds 5 rounded up to a check, then kubelet's kill);
#   - a fork-orphan pod (three rounds of: allocate 600 MiB, fork a child that keeps the driver's
#     file descriptors, exit) past libvgpu on a 1000 MiB quota: NVML lists the memory under PIDs
#     that have exited; cgpu-monitor charges it to the pod whose children hold the GPU and evicts
#     that pod, named in its Event. With libvgpu, the same pod is refused at the call or evicted;
#   - an innocent pod (libvgpu, 500 MiB on 1000) that runs throughout, and into whose container a
#     process with the PID of one of the exited processes is moved: it is never blamed (no Event,
#     still Running).
# Both hostile pods take the driver directly (no libvgpu): /opt/vgpu/vgpu-memory-usage with
# LD_LIBRARY_PATH and LD_PRELOAD unset.
#
# vgpu-memory-usage MIB SECONDS --fork-orphan allocates MIB, forks a child that keeps the driver's
# file descriptors and sleeps SECONDS, and exits the parent. The fork-orphan checks are skipped
# when the binary does not know the mode.

BACKSTOP_GRACE=${VGPU_BACKSTOP_GRACE:-30}       # vgpu_enforcement_grace_seconds (the default)
BACKSTOP_TERMINATION=${VGPU_BACKSTOP_TERMINATION:-5}  # vgpu_enforcement_termination_grace_seconds
BACKSTOP_CHECK=${VGPU_BACKSTOP_CHECK:-5}        # monitor.check_interval_s
# The bound: acted on within the grace and one check, deleted at once one capped grace (a check) later,
# then kubelet's kill (1 s) and its confirmation; 10 s for the scheduling of this script's polls.
BACKSTOP_BOUND=$((BACKSTOP_GRACE + BACKSTOP_CHECK + BACKSTOP_TERMINATION + BACKSTOP_CHECK + 10))
DIRECT='/usr/bin/env -u LD_LIBRARY_PATH -u LD_PRELOAD /opt/vgpu/vgpu-memory-usage'  # past libvgpu

# backstop_pod <name> <units> <grace seconds> <shell script>: a pod asking for GPU memory only, its
# PID 1 a shell running the script (run.sh's gpu_pod).
backstop_pod() {
    POD_GRACE=$3 gpu_pod "$1" "$2" "[\"/bin/sh\", \"-c\", $(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$4")]"
}
# (no pipe: under run.sh's pipefail, kubectl's failing status would be the pipe's)
pod_gone() { [[ $(k get pod -n "$NS" "$1" 2>&1) == *NotFound* ]]; }
logs_say() { k logs -n "$NS" "$1" 2>/dev/null | grep -q "$2"; }
# gpu_pids: the PIDs NVML lists with memory on the GPU (compute and graphics), one per line.
gpu_pids() { # (nvidia-smi 580 has no --query-graphics-apps: its error goes to stdout; digits only)
    { nvidia-smi --query-compute-apps=pid --format=csv,noheader
        nvidia-smi --query-graphics-apps=pid --format=csv,noheader; } 2>/dev/null | tr -d ' ' | grep -E '^[0-9]+$'
}
# exited_gpu_pid: a PID NVML lists whose process has exited (the fork orphans' parents).
exited_gpu_pid() {
    local pid
    for pid in $(gpu_pids | sort -u); do
        [[ -d /proc/$pid ]] || { echo "$pid"; return 0; }
    done
    return 1
}
# pod_cgroup_pid <pod>: a host PID of a process in the pod's container (its cgroup names the pod's UID).
pod_cgroup_pid() {
    local uid pid dir
    uid=$(k get pod -n "$NS" "$1" -o jsonpath='{.metadata.uid}')
    [[ -n $uid ]] || return 1
    for dir in /proc/[0-9]*; do
        pid=${dir#/proc/}
        if grep -qE "pod(${uid}|${uid//-/_})" "$dir/cgroup" 2>/dev/null; then
            echo "$pid"
            return 0
        fi
    done
    return 1
}
# gpu_holders: what the monitor judges by, for a failure's log: the PIDs NVML lists, and every
# process holding a GPU device file with its command, its device files and its cgroup.
gpu_holders() {
    local dir fds
    echo "NVML lists: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ';')"
    for dir in /proc/[0-9]*; do
        fds=$(find "$dir/fd" -maxdepth 1 -lname '/dev/nvidia*' -printf '%l ' 2>/dev/null) || continue
        [[ -n $fds ]] || continue
        echo "holder ${dir#/proc/} ($(tr '\0' ' ' <"$dir/cmdline" | cut -c1-80)): $fds; $(tail -n 1 "$dir/cgroup")"
    done
}
# take_pid <pid>: start `sleep` on the host with this PID (through ns_last_pid; other processes of
# the host may take it first, so a few tries) and print its PID; fails when it could not be had.
take_pid() {
    local want=$1 got _
    for _ in $(seq 1 20); do
        echo $((want - 1)) >/proc/sys/kernel/ns_last_pid 2>/dev/null || return 1
        sleep 600 >/dev/null 2>&1 &  # not on the caller's $(...) pipe
        got=$!
        if [[ $got == "$want" ]]; then
            echo "$got"
            return 0
        fi
        kill "$got" 2>/dev/null
        wait "$got" 2>/dev/null
    done
    return 1
}
# join_cgroups <pid> <pid of the container>: move the first process into every cgroup of the second
# (cgroup v2: one line; v1: a line per hierarchy), as a process of that container.
join_cgroups() {
    local pid=$1 into=$2 joined=0 line controllers path dir
    while IFS= read -r line; do
        controllers=$(cut -d: -f2 <<<"$line")
        path=$(cut -d: -f3- <<<"$line")
        if [[ -z $controllers ]]; then dir=/sys/fs/cgroup$path
        else dir=/sys/fs/cgroup/${controllers#name=}$path; fi
        if echo "$pid" >"$dir/cgroup.procs" 2>/dev/null; then joined=$((joined + 1)); fi
    done <"/proc/$into/cgroup"
    ((joined > 0))
}

backstop_checks() {
    section "the backstop (issue 38): a pod that outwaits its eviction, fork orphans, a reused PID"
    if [[ $FAKE == 1 ]]; then
        skip "the backstop (the fake driver reports no process to the monitor)"
        return
    fi
    if ! in_time; then
        skip "the backstop: not enough of the 10-minute limit left"
        return
    fi
    local fork_orphan=1
    if ! grep -qa -- '--fork-orphan' /opt/vgpu/vgpu-memory-usage; then
        fork_orphan=0  # the mode these checks depend on is not in this build of vgpu-memory-usage
    fi
    # The innocent pod first: honest, under libvgpu, all along.
    backstop_pod innocent 10 1 'exec /opt/vgpu/vgpu-memory-usage 300 600'
    if ((fork_orphan)); then
        backstop_pod forker 10 1 "for i in 1 2 3; do $DIRECT 600 3600 --fork-orphan; done; sleep 3600"
        reuse_a_dead_pid # at once: the monitor evicts forker, and its orphans with it, after the grace
    fi
    # A year's grace, and a PID 1 that ignores SIGTERM (as do its children: the ignored disposition
    # is inherited), 3000 MiB on a 1000 MiB quota past libvgpu.
    backstop_pod holdout 10 31536000 "trap '' TERM; $DIRECT 3000 3600; sleep 3600"
    holdout_check
    if ((fork_orphan)); then
        fork_orphan_checks
    else
        skip "fork orphans: /opt/vgpu/vgpu-memory-usage has no --fork-orphan mode yet (issue 38, libvgpu's part)"
    fi
    innocent_check
    for pod in holdout forker forker-libvgpu innocent; do
        k delete pod -n "$NS" "$pod" --grace-period=0 --force --wait=false >>"$LOG" 2>&1
    done
}

holdout_check() {
    if ! poll 120 logs_say holdout "allocated 3000 MiB"; then
        fail "holdout takes 3000 MiB past libvgpu (phase $(phase holdout); $(k logs -n "$NS" holdout 2>&1 | head -n 1))"
        return
    fi
    local over gone message
    over=$(date +%s)
    if poll "$((BACKSTOP_BOUND + 30))" pod_gone holdout; then
        gone=$(($(date +%s) - over))
        message=$(over_quota_message holdout)
        if ((gone <= BACKSTOP_BOUND)); then
            pass "holdout (a year's grace, SIGTERM ignored, 3000 MiB on 1000) is gone $gone s after it went over (bound $BACKSTOP_BOUND s): $message"
        else
            fail "holdout is gone within $BACKSTOP_BOUND s of going over (took $gone s)"
        fi
        if k get events -n "$NS" --field-selector involvedObject.name=holdout -o jsonpath='{.items[*].message}' 2>/dev/null |
            grep -q "grace period of $BACKSTOP_TERMINATION s (its own: 31536000 s)"; then
            pass "cgpu-monitor capped holdout's grace period at $BACKSTOP_TERMINATION s (its own: a year)"
        else
            fail "cgpu-monitor's Event on holdout says it capped the grace period at $BACKSTOP_TERMINATION s"
        fi
        if poll 20 sh -c "! nvidia-smi --query-compute-apps=used_memory --format=csv,noheader | grep -qE '^ *30[0-9][0-9] MiB'"; then
            pass "holdout's 3000 MiB are free again on the GPU"
        else
            fail "holdout's 3000 MiB are free again on the GPU ($(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' '))"
        fi
    else
        fail "holdout (a year's grace, SIGTERM ignored) is gone within $BACKSTOP_BOUND s of going over (phase $(phase holdout); deletionTimestamp $(k get pod -n "$NS" holdout -o jsonpath='{.metadata.deletionTimestamp}'))"
        k get events -n "$NS" --field-selector involvedObject.name=holdout >>"$LOG" 2>&1
    fi
}

# reuse_a_dead_pid: a PID that NVML lists for an exited process of forker is given to a process
# of the innocent pod (sets $sleeper, killed by fork_orphan_checks).
reuse_a_dead_pid() {
    local dead innocent_pid
    if ! poll 120 exited_gpu_pid; then
        fail "NVML lists the memory of forker's exited processes under their PIDs ($(gpu_pids | tr '\n' ' '); $(k logs -n "$NS" forker 2>&1 | tail -n 2 | tr '\n' ' '))"
    else
        dead=$(exited_gpu_pid)
        # A process of the innocent pod with the exited PID: sleep on the host, moved into its cgroup.
        innocent_pid=$(pod_cgroup_pid innocent)
        if [[ -n $innocent_pid ]] && sleeper=$(take_pid "$dead") && join_cgroups "$sleeper" "$innocent_pid"; then
            pass "PID $dead, listed by NVML for a process of forker that exited, now names a process of the innocent pod"
        else
            skip "a process of the innocent pod with the exited PID $dead (the PID was taken first, or no cgroup to join)"
        fi
    fi
}

fork_orphan_checks() {
    local message
    if poll 150 has_over_quota_event forker; then
        message=$(over_quota_message forker)
        if grep -q "listed under processes that exited" <<<"$message"; then
            pass "cgpu-monitor charges forker with its exited processes' memory, held by its children: $message"
        else
            fail "cgpu-monitor's Event on forker names the memory of its exited processes (got: $message)"
        fi
        if poll 90 pod_gone forker; then
            pass "forker (fork orphans past libvgpu) is evicted"
        else
            fail "forker is evicted after the monitor's Event (phase $(phase forker))"
        fi
    else
        fail "cgpu-monitor reports forker (3 x 600 MiB fork orphans on a 1000 MiB quota) with a GPUMemoryOverQuota Event"
        monitor_metrics | grep -E '^vgpu_(container_memory_(real|limit)|host_process|gpu_memory_unattributed|quota_violations)' >>"$LOG" 2>&1
        gpu_holders >>"$LOG" 2>&1
    fi
    [[ -z ${sleeper:-} ]] || kill "$sleeper" 2>/dev/null
    # With libvgpu: refused at the call (issue 38, libvgpu's part) or evicted by the monitor. After
    # forker, so that the monitor can tell whose children hold the orphans' memory: with two pods
    # of fork orphans at once it names both in its GPUMemoryUnattributed Event and charges neither.
    # 700 MiB rounds on 3000 (a context is 518): the third does not fit beside the first two's memory
    # shellcheck disable=SC2016 # the pod's shell expands $i
    backstop_pod forker-libvgpu 30 1 'for i in 1 2 3; do /opt/vgpu/vgpu-memory-usage 700 3600 --fork-orphan || echo "round $i refused"; done; sleep 3600'
    if poll 60 sh -c "kubectl logs -n $NS forker-libvgpu 2>/dev/null | grep -q 'round 3 refused'"; then
        pass "forker-libvgpu: a fork orphan's memory counts in its container, the next round is refused at the call ($(k logs -n "$NS" forker-libvgpu 2>&1 | grep -m1 -E 'failed|refused'))"
    elif pod_gone forker-libvgpu || has_over_quota_event forker-libvgpu; then
        pass "forker-libvgpu is evicted by cgpu-monitor: $(over_quota_message forker-libvgpu)"
    else
        fail "forker-libvgpu (3 x 600 MiB fork orphans under libvgpu on 1000 MiB) is refused at the call or evicted ($(k logs -n "$NS" forker-libvgpu 2>&1 | tr '\n' ' ' | cut -c1-200))"
    fi
}

innocent_check() {
    if has_over_quota_event innocent; then
        fail "the innocent pod is never blamed (got: $(over_quota_message innocent))"
    elif [[ $(phase innocent) == Running ]]; then
        pass "the innocent pod is untouched: Running, no GPUMemoryOverQuota Event"
    else
        fail "the innocent pod is untouched (phase $(phase innocent))"
    fi
}
