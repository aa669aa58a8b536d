# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cluster's shape as the inventory gives it: pure rules, each problem a line that says what to do.

playbooks/check.yml runs them on the controller before any host is contacted (``topology_problems``),
and stack.yml runs ``unjoined_problems`` against the API server's node list before the node roles:

- kubeadm's control planes run etcd stacked (one member each): an even number of them tolerates no
  more failures than one fewer, and two stop the cluster when either fails. An external etcd
  (kubeadm_cluster_config's etcd.external) is the operator's own.
- K3s with several servers runs its embedded etcd (the first server's cluster-init): the same rule,
  unless k3s_server_config names an external datastore (datastore-endpoint).
- Several control planes need one address every node reaches whichever of them is down
  (kubeadm_control_plane_endpoint, k3s_server_url); empty, every node joins the first one only.
- A host in neither k8s_control_plane nor gpu_nodes is acted on by no playbook: a host put in the
  wrong group (or none) is provisioned by nothing, silently.
- A GPU node of stack.yml (a cluster built by others) must already be a node of that cluster: the
  stack's node labels and the rollout wait for it otherwise (300 s, then a timeout).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

GROUPS = ("k8s_control_plane", "gpu_nodes")
# A kubespray inventory's groups (playbooks/check.yml maps kube_control_plane and kube_node): its other
# hosts (a separate etcd) are kubespray's, and its cluster keeps its own etcd and API endpoint.
KUBESPRAY_GROUPS = ("kube_control_plane", "kube_node", "etcd", "k8s_cluster", "calico_rr")


def _external_etcd(flavour, settings):
    """Whether the control planes keep no etcd of their own (an external etcd or datastore)."""
    if flavour == "kubeadm":
        etcd = (settings.get("kubeadm_cluster_config") or {}).get("etcd") or {}
        return isinstance(etcd, dict) and bool(etcd.get("external"))
    server = settings.get("k3s_server_config") or {}
    return isinstance(server, dict) and bool(server.get("datastore-endpoint"))


def _quorum(flavour, count, settings):
    if count < 2 or count % 2 or _external_etcd(flavour, settings):
        return None
    if flavour == "kubeadm":
        where = "kubeadm runs a stacked etcd member on each control plane"
        external = "an external etcd (kubeadm_cluster_config: {etcd: {external: ...}})"
    else:
        where = "K3s with several servers runs its embedded etcd, one member on each server"
        external = "an external datastore (k3s_server_config: {datastore-endpoint: ...})"
    return (
        "k8s_control_plane: %d hosts with vgpu_kubernetes_flavour %s; %s, and etcd needs a majority of them: %d "
        "tolerate no more failures than %d%s; use an odd number (%d or %d), or %s"
        % (
            count,
            flavour,
            where,
            count,
            count - 1,
            " (either one failing stops the cluster)" if count == 2 else "",
            count - 1,
            count + 1,
            external,
        )
    )


_ENDPOINT = {
    "kubeadm": ("kubeadm_control_plane_endpoint", "host:port"),
    "k3s": ("k3s_server_url", "https://host:6443"),
}


def _endpoint(flavour, count, settings):
    name, form = _ENDPOINT[flavour]
    if count < 2 or str(settings.get(name) or ""):
        return None
    return (
        "%s: empty with %d control planes, so every node joins the first one and reaches the API through it alone; "
        "set %s to one address every node reaches whichever control plane is down (%s of a load balancer or a "
        "virtual IP in front of all of them)" % (name, count, name, form)
    )


def topology_problems(hosts_by_group, all_hosts, flavour, settings=None):
    """Every problem of the cluster's shape, one line each (empty when there is none).

    ``hosts_by_group`` maps k8s_control_plane and gpu_nodes to their hosts, ``all_hosts`` lists
    every host of the inventory, ``flavour`` is vgpu_kubernetes_flavour, and ``settings`` what the
    first control plane's inventory sets of kubeadm_control_plane_endpoint, kubeadm_cluster_config,
    k3s_server_url and k3s_server_config.
    """
    settings = settings or {}
    problems = []
    grouped: set = set()
    for group in GROUPS + KUBESPRAY_GROUPS:
        grouped.update(hosts_by_group.get(group) or [])
    for host in all_hosts:
        if host not in grouped:
            problems.append(
                "%s: in neither k8s_control_plane nor gpu_nodes, so no playbook acts on it; add it to gpu_nodes "
                "(a GPU node) or k8s_control_plane, or remove it from the inventory" % host
            )
    if flavour in _ENDPOINT and not hosts_by_group.get("kube_control_plane"):
        count = len(hosts_by_group.get("k8s_control_plane") or [])
        problems += [
            problem for problem in (_quorum(flavour, count, settings), _endpoint(flavour, count, settings)) if problem
        ]
    return problems


def unjoined_problems(gpu_nodes, cluster_nodes, where="the cluster"):
    """The GPU nodes of stack.yml that are no node of the running cluster.

    ``gpu_nodes`` maps each host of gpu_nodes to the node name it has in Kubernetes (its hostname,
    lower case), ``cluster_nodes`` lists the names the API server knows.
    """
    known = set(cluster_nodes)
    problems = []
    for host, name in gpu_nodes.items():
        if name not in known:
            problems.append(
                "%s: gpu_nodes host whose node %s is not in %s (known: %s); stack.yml adds the GPU stack to nodes "
                "that already joined: join it first (with the tool that built the cluster), or remove it from "
                "gpu_nodes" % (host, name, where, ", ".join(sorted(known)) or "none")
            )
    return problems
