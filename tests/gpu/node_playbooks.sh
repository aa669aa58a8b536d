#!/usr/bin/env bash
# The node part of site.yml (flavour none) and verify.yml against the GPU host itself, as an
# operator runs them on an edge node: tests/gpu/node_playbooks.sh [LOG_DIR]
# ansible-playbook must be on PATH. The host keeps its own driver (vgpu_driver_policy=minimum);
# a host without a package mirror skips the mirror probe. site.yml runs twice: the second run
# must report changed=0. Further arguments go to ansible-playbook. Last line: "N passed, N failed".
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LOG_DIR=${1:-${OUT:-/tmp/vgpu-gpu-logs}}
shift $(($# > 0 ? 1 : 0))
mkdir -p "$LOG_DIR"
collections=$(mktemp -d)
mkdir -p "$collections/ansible_collections/vgpu"
ln -s "$ROOT" "$collections/ansible_collections/vgpu/isolation"
export ANSIBLE_COLLECTIONS_PATH=$collections ANSIBLE_CONFIG=$ROOT/ansible.cfg ANSIBLE_NOCOLOR=1
args=(-i "$ROOT/inventory/hosts.yml" -e vgpu_kubernetes_flavour=none -e vgpu_driver_policy=minimum
    -e preflight_check_network=false "$@")
passed=0 failed=0
result() { if [ "$1" = 0 ]; then echo "PASS $2"; passed=$((passed + 1)); else echo "FAIL $2"; failed=$((failed + 1)); fi; }

ansible-playbook "${args[@]}" "$ROOT/playbooks/site.yml" >"$LOG_DIR/site.log" 2>&1
result $? "site.yml (flavour none) provisions the GPU host"
ansible-playbook "${args[@]}" "$ROOT/playbooks/site.yml" >"$LOG_DIR/site-rerun.log" 2>&1
rc=$?
grep -q "changed=0 .*failed=0" "$LOG_DIR/site-rerun.log" && [ "$rc" = 0 ]
result $? "a second site.yml run reports changed=0"
ansible-playbook "${args[@]}" -v "$ROOT/playbooks/verify.yml" >"$LOG_DIR/verify.log" 2>&1
result $? "verify.yml: gpu_facts and vgpu_verify pass on the GPU host"
grep -E "PLAY RECAP" -A2 "$LOG_DIR/site.log" "$LOG_DIR/site-rerun.log" "$LOG_DIR/verify.log"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
