"""The tenant pod policy (issue 40 item 4) as roles/vgpu_stack renders it, by Ansible itself.

What the policy refuses is checked against the real API server in tests/k8s/test_tenant_pods.py;
here: that it is rendered by default with its binding, which namespaces its binding exempts, that
the switch takes it out, and that every message says what to do.
"""

import pytest
from role_render import render

CASES = {
    "defaults": {"vgpu_kubernetes_flavour": "kubeadm"},
    "own-namespace": {
        "vgpu_kubernetes_flavour": "k3s",
        "vgpu_stack_namespace": "gpu-system",
        "vgpu_resource_prefix": "acme.dev",
        "vgpu_tenant_pod_policy_exempt_namespaces": ["kube-system", "ml-trusted", "kube-system"],
    },
    "off": {
        "vgpu_kubernetes_flavour": "kubeadm",
        "vgpu_tenant_pod_policy": False,
        "vgpu_tenant_pod_policy_off_reason": "Kyverno refuses them",
    },
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    return {case: render(tmp_path_factory.mktemp(case), extra)["components.yaml"] for case, extra in CASES.items()}


def named(docs, kind, name="vgpu-tenant-pods"):
    return [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]


def exempt(docs):
    (binding,) = named(docs, "ValidatingAdmissionPolicyBinding")
    (expression,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert (expression["key"], expression["operator"]) == ("kubernetes.io/metadata.name", "NotIn")
    return expression["values"]


def test_the_policy_is_rendered_by_default_and_its_binding_denies(rendered):
    (policy,) = named(rendered["defaults"], "ValidatingAdmissionPolicy")
    (binding,) = named(rendered["defaults"], "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == "vgpu-tenant-pods"
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    rules = {
        (tuple(r["operations"]), tuple(r["resources"])) for r in policy["spec"]["matchConstraints"]["resourceRules"]
    }
    assert rules == {(("CREATE",), ("pods",)), (("UPDATE",), ("pods/ephemeralcontainers",))}
    assert exempt(rendered["defaults"]) == ["kube-system"]


def test_the_stack_s_own_namespace_is_always_exempt_besides_the_operator_s_list(rendered):
    assert exempt(rendered["own-namespace"]) == ["gpu-system", "kube-system", "ml-trusted"]


def test_every_refusal_names_what_was_refused_and_what_to_do(rendered):
    (policy,) = named(rendered["own-namespace"], "ValidatingAdmissionPolicy")
    validations = policy["spec"]["validations"]
    assert len(validations) == 4
    for validation in validations:
        message = validation["messageExpression"]
        assert validation["reason"] == "Forbidden"
        assert "'vgpu-tenant-pods refuses ' + variables.pod" in message, message
        assert "acme.dev/gpu-memory" in message and "vgpu_tenant_pod_policy_exempt_namespaces" in message, message
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    for kind in ("object.spec.containers", "object.spec.?initContainers", "object.spec.?ephemeralContainers"):
        for check in ("privileged", "sysAdmin", "deviceList"):
            assert kind in variables[check], (check, variables[check])
    assert "has(v.hostPath)" in variables["hostPaths"]
    assert "'SYS_ADMIN'" in variables["sysAdmin"] and "'ALL'" in variables["sysAdmin"]


def test_the_switch_takes_the_policy_out(rendered):
    assert named(rendered["off"], "ValidatingAdmissionPolicy") == []
    assert named(rendered["off"], "ValidatingAdmissionPolicyBinding") == []
