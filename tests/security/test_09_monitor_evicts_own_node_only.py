"""Issue 28 finding 4: cgpu-monitor's ClusterRole granted `create pods/eviction` everywhere, so a
monitor's token (one per GPU node) could evict any pod of the cluster.

What the role deploys, on both scheduling paths, rendered by Ansible itself: no Eviction API right
(an Eviction names only the pod, so no admission policy could tell whose node it is on); the one
verb that removes a pod, `delete`, held by a ValidatingAdmissionPolicy to the pods of the node in
the monitor's pod-bound token. tests/k8s/test_stack.py runs the same objects in the real API
server: another node's pod is refused, its own node's pod is evicted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from role_render import render

MONITOR = "system:serviceaccount:kube-system:cgpu-monitor"
NODE_NAME = "request.userInfo.extra['authentication.kubernetes.io/node-name']"


def monitor_verbs_on_pods(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(resource, verb) on pods and their subresources that the monitor's account is granted."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("ClusterRole", "Role")}
    granted = set()
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if {"kind": "ServiceAccount", "name": "cgpu-monitor", "namespace": "kube-system"} in binding["subjects"]:
            role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
            for rule in role["rules"]:
                granted |= {
                    (resource, verb)
                    for resource in rule["resources"]
                    if resource.split("/")[0] in ("pods", "*")
                    for verb in rule["verbs"]
                }
    return granted


@pytest.mark.parametrize("scheduling", ["extender", "dra"])
def test_the_monitor_can_remove_only_pods_of_its_own_node(tmp_path: Path, scheduling: str) -> None:
    docs = render(tmp_path, {"vgpu_kubernetes_flavour": "kubeadm", "vgpu_scheduling": scheduling})["components.yaml"]
    granted = monitor_verbs_on_pods(docs)
    assert ("pods/eviction", "create") not in granted and ("*", "*") not in granted, granted
    assert ("pods", "deletecollection") not in granted
    assert ("pods", "delete") in granted  # vgpu_enforcement: evict
    bound = {d["spec"]["policyName"] for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    holding = [
        policy
        for policy in docs
        if policy["kind"] == "ValidatingAdmissionPolicy"
        and policy["metadata"]["name"] in bound
        and any(
            "pods" in rule["resources"] and "DELETE" in rule["operations"]
            for rule in policy["spec"]["matchConstraints"]["resourceRules"]
        )
        and any(MONITOR in condition["expression"] for condition in policy["spec"].get("matchConditions", []))
    ]
    assert len(holding) == 1, "no admission policy holds the monitor's deletes to its node"
    (policy,) = holding
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert any(
        f"{NODE_NAME} == [oldObject.spec.?nodeName.orValue('')]" in check["expression"]
        for check in policy["spec"]["validations"]
    )
