#!/usr/bin/env bash
# What uninstall.yml must leave on the e2e node, checked from outside it:
#   check-uninstalled.sh stack     after uninstall.yml: the cluster runs on without the stack
#   check-uninstalled.sh cluster   after uninstall.yml -e vgpu_uninstall_cluster=true
set -euo pipefail
NODE=${VGPU_E2E_NODE:-vgpu-e2e-node}
problems=()

on_node() { docker exec "$NODE" "$@"; }
absent() {
    local path
    for path in "$@"; do
        on_node test ! -e "$path" || problems+=("$path is still on the node")
    done
}
kubectl() { on_node kubectl --kubeconfig /etc/kubernetes/admin.conf "$@"; }

case "${1:-}" in
    stack)
        absent /opt/vgpu /opt/vgpu-releases /etc/vgpu /var/lib/vgpu /etc/kubernetes/vgpu-scheduler-config.yaml
        # The Kubernetes modules' client stays with the cluster: a driver change drains nodes with it.
        on_node test -x /opt/vgpu-python/bin/python \
            || problems+=("the Kubernetes client /opt/vgpu-python went with the stack; it must stay with the cluster")
        left=$(kubectl get daemonset,deployment,serviceaccount,configmap -n kube-system -o name \
            | grep -E 'nvidia-|cgpu-|gpushare-|vgpu-' || true)
        [[ -z $left ]] || problems+=("components still in kube-system: $left")
        labels=$(kubectl get node "$NODE" -o jsonpath='{.metadata.labels}{.metadata.annotations}')
        [[ $labels != *vgpu.io/* ]] || problems+=("the node still has vgpu.io labels or annotations: $labels")
        taints=$(kubectl get node "$NODE" -o jsonpath='{.spec.taints}')
        [[ $taints != *vgpu.io/* ]] || problems+=("the node still has the GPU nodes' taint: $taints")
        kubectl get mutatingadmissionpolicy vgpu-gpu-node-toleration >/dev/null 2>&1 \
            && problems+=("the GPU nodes' toleration policy is still there")
        kubectl get validatingadmissionpolicy vgpu-tenant-pods >/dev/null 2>&1 \
            && problems+=("the tenant pod policy is still there")
        on_node grep -q -- '--config=' /etc/kubernetes/manifests/kube-scheduler.yaml \
            && problems+=("kube-scheduler still runs with the extender's configuration")
        kubectl get --raw /readyz >/dev/null || problems+=("the cluster does not answer after the stack left")
        ;;
    cluster)
        absent /usr/bin/kubelet /usr/bin/kubeadm /usr/bin/kubectl /etc/kubernetes/manifests \
            /etc/kubernetes/admin.conf /etc/containerd/config.toml /etc/cni/net.d/10-vgpu-bridge.conflist \
            /opt/vgpu /etc/vgpu /var/lib/vgpu /opt/vgpu-python \
            /usr/bin/flanneld /etc/systemd/system/flanneld.service /etc/kube-flannel /run/flannel \
            /etc/systemd/system/vgpu-flanneld-token.service /etc/systemd/system/vgpu-flanneld-token.timer \
            /usr/local/libexec/vgpu-flanneld-token
        on_node systemctl is-active --quiet kubelet && problems+=("kubelet still runs")
        on_node systemctl is-active --quiet flanneld && problems+=("flanneld still runs")
        for dev in flannel.1 cni0; do
            on_node ip link show "$dev" >/dev/null 2>&1 && problems+=("the network device $dev is still there")
        done
        on_node sh -c 'iptables-save | grep -q FLANNEL' && problems+=("flanneld's iptables chains are still there")
        ;;
    *) echo "usage: $0 stack|cluster" >&2; exit 2 ;;
esac

if ((${#problems[@]})); then
    printf '!! after uninstall (%s):\n' "$1" >&2
    printf '   - %s\n' "${problems[@]}" >&2
    exit 1
fi
echo ">> nothing of the ${1} is left on $NODE"
