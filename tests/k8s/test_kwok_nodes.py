"""The simulated nodes stay healthy while the tests run (issue 27).

kwok's stages here heartbeat a node's status only every 10 to 20 minutes and expect kwok to keep
the node's Lease (kube-node-lease) instead. Without the Lease, kube-controller-manager's node
controller saw no heartbeat for its 40 s grace period, marked the node NotReady and every pod on
it not Ready; kwok made the node Ready again but never its Running pods, so a DaemonSet rolled
out onto it stayed at numberReady 0 (the lead's tests/k8s run of 2026-12-02, 13:15 UTC).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.k8s import cluster


def renewed(leases: Any, name: str) -> Any:
    try:
        return leases.read_namespaced_lease(name, "kube-node-lease").spec.renew_time
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_a_simulated_node_keeps_its_lease(core: Any, gpu_nodes: cluster.NodeFactory) -> None:
    selector = ",".join(f"{k}={v}" for k, v in gpu_nodes(1).items())
    (name,) = [n.metadata.name for n in core.list_node(label_selector=selector).items]
    leases: Any = client.CoordinationV1Api(core.api_client)
    first = cluster.wait_for(f"the Lease of {name}", lambda: renewed(leases, name), timeout=60)
    cluster.wait_for(f"the Lease of {name} renewed", lambda: renewed(leases, name) != first or None, timeout=60)
