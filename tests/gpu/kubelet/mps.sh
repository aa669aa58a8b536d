# shellcheck shell=bash
# MPS through the real kubelet (issue 40 item 2), sourced by run.sh once the stack runs with MPS on
# the node (run.sh sets VGPU_KUBELET_MPS=1 for this scenario; inventory.yml then sets
# vgpu_mps_enabled and a default share of 50 %):
#   VGPU_KUBELET_SCENARIO=mps tests/gpu/kubelet/run.sh
# A 30-unit pod's allocation gets its own MPS daemon from nvidia-mps (50 %, and its 3000 MiB quota
# as the pinned memory limit where the driver supports one); the pod's CUDA client makes the
# daemon start a server. Then, as root in the pod (a container without a user namespace):
#   1. the pod reaches its daemon's control socket (a read-only folder does not stop a connect)
#      and sets its server's share to 100 % and its pinned limit to 97G (INFO: what it answered);
#   2. within three of nvidia-mps's probes (10 s apart) nvidia-mps logs the change, sets it back and
#      shuts that server down;
#   3. a second pod's server runs at the daemon's 50 % (the defaults held); root raising its limit
#      within what the daemon's answer shows (3050M on a 3000M limit: both "2G") is set back at the
#      next probe; raising it to 97G is seen, set back, and the server shut down;
#   4. root in that pod quits its daemon: nvidia-mps starts it again, with 50 % as its default.
# The daemon's answers are read as tests/gpu/mps_tamper.sh read them on the H200 (2026-12-05, on
# the host). First run on the H200 2026-12-05: 21 passed, 0 failed (docs/testing.md).
# Uses run.sh's helpers and variables (k, pass, fail, poll, stop_here, gpu_pod, holds_1200, phase, NS).
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    echo "mps.sh is sourced by run.sh: VGPU_KUBELET_SCENARIO=mps tests/gpu/kubelet/run.sh" >&2
    exit 2
fi

info() { echo "INFO $1" | tee -a "$RESULTS" "$LOG"; }
# mps_control <pod> <command>: the command sent to the pod's MPS daemon from inside the pod, as root,
# through the control client the runtime mounts with the driver's binaries.
mps_control() {
    k exec -n "$NS" "$1" -- sh -c \
        "echo \"\$0\" | \"\$(command -v nvidia-cuda-mps-control || echo /usr/local/nvidia/bin/nvidia-cuda-mps-control)\"" \
        "$2" 2>&1
}
mps_log() { k logs -n kube-system -l app.kubernetes.io/name=nvidia-mps --tail=-1 2>&1; }
# first_server <pod>: the PID of the first server its daemon lists.
first_server() { mps_control "$1" get_server_list | grep -Eo '^[0-9]+' | head -n 1; }
has_server() { [[ -n $(first_server "$1") ]]; }

section "MPS: the pod's own daemon, and a root container that changes its server"
poll 120 sh -c "kubectl get pod -n kube-system -l app.kubernetes.io/name=nvidia-mps -o jsonpath='{.items[0].status.phase}' | grep -q Running" \
    || stop_here "nvidia-mps runs on the node (vgpu_mps_enabled; see cluster.txt)"
gpu_pod mps-a 30 '["/opt/vgpu/vgpu-memory-usage", "1200", "300"]'
holds_1200 mps-a 120
if poll 60 has_server mps-a; then
    server=$(first_server mps-a)
    pass "mps-a's client runs through its allocation's MPS daemon: server $server"
else
    stop_here "mps-a's daemon lists a server (get_server_list from the pod: $(mps_control mps-a get_server_list | tr '\n' ' '))"
fi
share=$(mps_control mps-a "get_active_thread_percentage $server")
limit=$(mps_control mps-a "get_device_pinned_mem_limit $server 0")
info "server $server before: share $share, pinned limit $limit"
if [[ $share == 50* ]]; then
    pass "mps-a's server runs at the daemon's default share of 50 % ($share)"
else
    fail "mps-a's server runs at 50 % (got: $share)"
fi

# 1. root in the pod changes its server
info "set_active_thread_percentage $server 100: $(mps_control mps-a "set_active_thread_percentage $server 100" | tr '\n' ' ')"
info "set_device_pinned_mem_limit $server 0 97G: $(mps_control mps-a "set_device_pinned_mem_limit $server 0 97G" | tr '\n' ' ')"
info "server $server after the change: share $(mps_control mps-a "get_active_thread_percentage $server"), limit $(mps_control mps-a "get_device_pinned_mem_limit $server 0")"

# 2. nvidia-mps sets it back and shuts the server down
if poll 45 sh -c "kubectl logs -n kube-system -l app.kubernetes.io/name=nvidia-mps --tail=-1 | grep -q 'MPS server $server of allocation .* set back and the server shut down'"; then
    pass "nvidia-mps found server $server changed, set it back and shut it down ($(mps_log | grep -m1 "MPS server $server of allocation" | cut -c1-300))"
else
    fail "nvidia-mps sets server $server back within three probes (its log: $(mps_log | tail -n 5 | tr '\n' ' ' | cut -c1-600))"
fi
gone() { ! mps_control mps-a get_server_list | grep -qx "$server"; }
if poll 30 gone; then
    pass "server $server is gone from its daemon's list"
else
    fail "server $server is shut down (get_server_list: $(mps_control mps-a get_server_list | tr '\n' ' '))"
fi
info "mps-a after its server's shutdown: phase $(phase mps-a); $(k logs -n "$NS" mps-a 2>&1 | tail -n 2 | tr '\n' ' ')"

# 3. a new client gets the daemon's defaults
gpu_pod mps-b 30 '["/opt/vgpu/vgpu-memory-usage", "1200", "300"]'
holds_1200 mps-b 120
if poll 60 has_server mps-b; then
    second=$(first_server mps-b)
    share=$(mps_control mps-b "get_active_thread_percentage $second")
    info "mps-b's server $second: share $share, pinned limit $(mps_control mps-b "get_device_pinned_mem_limit $second 0")"
    if [[ $share == 50* ]]; then
        pass "mps-b's server runs at the daemon's 50 % after mps-a's change ($share)"
    else
        fail "mps-b's server runs at 50 % after mps-a's change (got: $share)"
    fi
else
    fail "mps-b's daemon lists a server (get_server_list: $(mps_control mps-b get_server_list | tr '\n' ' '))"
fi

# 3a. root raises its server's limit within what the daemon's answer shows (3050M, answered as the
#     quota's 3000M is, "2G" on driver 580): no answer shows it, so nvidia-mps sets the request's
#     limit again at each probe; the daemon's log (in nvidia-mps's) shows that command after root's
if [[ ${second:-} ]] && [[ $(mps_control mps-b "get_device_pinned_mem_limit $second 0") =~ ^[0-9] ]]; then
    info "server $second's pinned limit of 3000 MiB is answered as $(mps_control mps-b "get_device_pinned_mem_limit $second 0")"
    info "set_device_pinned_mem_limit $second 0 3050M: $(mps_control mps-b "set_device_pinned_mem_limit $second 0 3050M" | tr '\n' ' '); answered now as $(mps_control mps-b "get_device_pinned_mem_limit $second 0")"
    set_again() { mps_log | sed -n "/Cmd:set_device_pinned_mem_limit $second 0 3050M/,\$p" | grep -q "Cmd:set_device_pinned_mem_limit $second 0 3000M"; }
    if poll 45 set_again; then
        pass "nvidia-mps set server $second's limit to 3000M again after root's 3050M, which no answer shows"
    else
        fail "nvidia-mps sets server $second's limit again at its next probe (the daemon's log after root's 3050M: $(mps_log | grep -A3 "Cmd:set_device_pinned_mem_limit $second 0 3050M" | tr '\n' ' ' | cut -c1-400))"
    fi
fi

# 3b. root changes only its server's pinned memory limit (the limit is set where the driver branch
#     has one, 495 and later): nvidia-mps reads each server's limit, sets it back, shuts it down
if [[ ${second:-} ]] && [[ $(mps_control mps-b "get_device_pinned_mem_limit $second 0") =~ ^[0-9] ]]; then
    info "set_device_pinned_mem_limit $second 0 97G: $(mps_control mps-b "set_device_pinned_mem_limit $second 0 97G" | tr '\n' ' ')"
    if poll 45 sh -c "kubectl logs -n kube-system -l app.kubernetes.io/name=nvidia-mps --tail=-1 | grep -q 'MPS server $second of allocation .*pinned memory limit.* set back and the server shut down'"; then
        pass "nvidia-mps found server $second's pinned limit changed, set it back and shut it down ($(mps_log | grep -m1 "MPS server $second of allocation" | cut -c1-300))"
    else
        fail "nvidia-mps sets server $second's pinned limit back (its log: $(mps_log | tail -n 5 | tr '\n' ' ' | cut -c1-600))"
    fi
else
    skip "a server's pinned limit changed alone: no pinned limit on this daemon (driver branch ${VGPU_KUBELET_DRIVER_BRANCH:-?})"
fi

# 4. root quits its daemon: nvidia-mps starts it again with its defaults
info "quit from mps-b: $(mps_control mps-b quit | tr '\n' ' ')"
restarted() { [[ $(mps_control mps-b get_default_active_thread_percentage) == 50* ]]; }
if poll 60 sh -c "kubectl logs -n kube-system -l app.kubernetes.io/name=nvidia-mps --tail=-1 | grep -q 'restarting it'" && poll 60 restarted; then
    pass "nvidia-mps starts mps-b's daemon again after root quit it, at 50 % ($(mps_control mps-b get_default_active_thread_percentage))"
else
    fail "nvidia-mps starts mps-b's daemon again at 50 % (default now: $(mps_control mps-b get_default_active_thread_percentage | tr '\n' ' '); its log: $(mps_log | tail -n 3 | tr '\n' ' ' | cut -c1-400))"
fi
