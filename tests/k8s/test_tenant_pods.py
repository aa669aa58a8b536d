"""The tenant pod policy (issue 40 item 4) against the real API server.

A pod reaches every GPU of its node past any GPU-memory quota through its own spec: a privileged
container, an added SYS_ADMIN, or a /dev/null mount at /var/run/nvidia-container-devices/all (a
hostPath volume), where NVIDIA's runtime reads which GPUs a container gets. roles/vgpu_stack applies
the ValidatingAdmissionPolicy `vgpu-tenant-pods`, which refuses such pods outside the exempt
namespaces, with a message that says what was refused and what to do. The pods are created as
server-side dry runs: admission runs, nothing is stored (no node runs them here).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from tests.k8s import cluster
from tests.k8s.test_stack import EXEMPT_NS, remove_components, run_playbook

DEVICE_LIST = "/var/run/nvidia-container-devices/all"


@pytest.fixture(scope="module")
def policy_stack(tmp_path_factory: pytest.TempPathFactory, core: Any) -> Iterator[Path]:
    """The role applied with its defaults, an operator's exempt namespace among them."""
    work = tmp_path_factory.mktemp("tenant-pods")

    def absent() -> bool:  # a previous run's namespace may still be terminating
        return not [n for n in core.list_namespace().items if n.metadata.name == EXEMPT_NS]

    cluster.wait_for(f"the namespace {EXEMPT_NS} of a previous run gone", absent, timeout=120)
    core.create_namespace({"metadata": {"name": EXEMPT_NS}})
    try:
        run_playbook(work)
        cluster.wait_for("the policy in force", lambda: bool(refusal(core, "default", DOORS["privileged"])), timeout=60)
        yield work
    finally:
        remove_components()
        core.delete_namespace(EXEMPT_NS)


def pod(name: str, **container: Any) -> dict[str, Any]:
    """A pod of one container `app` (with `container`'s fields), asking for no GPU."""
    volumes = container.pop("volumes", None)
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "localhost/vgpu-e2e:none", **container}]}
    if volumes:
        spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def refusal(core: Any, namespace: str, body: dict[str, Any]) -> str:
    """The API server's message refusing `body` in `namespace` (a dry run), or '' when it admits it."""
    try:
        core.create_namespaced_pod(namespace, body, dry_run="All")
    except ApiException as exc:
        assert exc.status == 403, exc
        return str(json.loads(exc.body or "{}")["message"])
    return ""


HOST_DEVICE_LIST = {"volumes": [{"name": "gpus", "hostPath": {"path": "/dev/null"}}]}
DOORS = {
    "privileged": pod("priv", securityContext={"privileged": True}),
    "sys-admin": pod("sysadmin", securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}),
    "all-capabilities": pod("allcaps", securityContext={"capabilities": {"add": ["all"]}}),
    "host-path": pod("hostpath", volumeMounts=[{"name": "gpus", "mountPath": DEVICE_LIST}], **HOST_DEVICE_LIST),
    "device-list-mount": pod(
        "emptydir",
        volumeMounts=[{"name": "gpus", "mountPath": DEVICE_LIST}],
        volumes=[{"name": "gpus", "emptyDir": {}}],
    ),
    "device-list-env": pod("env", env=[{"name": "X", "value": DEVICE_LIST}]),
}
# What each refusal must name: the door, and the pod's own offending part.
NAMED = {
    "privileged": ["privileged container(s) app"],
    "sys-admin": ["container(s) app add the capability SYS_ADMIN or ALL"],
    "all-capabilities": ["container(s) app add the capability SYS_ADMIN or ALL"],
    "host-path": ["hostPath volume(s) gpus (/dev/null)"],
    "device-list-mount": ["container(s) app name /var/run/nvidia-container-devices"],
    "device-list-env": ["container(s) app name /var/run/nvidia-container-devices"],
}


@pytest.mark.parametrize("door", DOORS)
def test_a_tenant_pod_that_reaches_every_gpu_is_refused_with_what_to_do(
    policy_stack: Path, core: Any, namespace: str, door: str
) -> None:
    message = refusal(core, namespace, DOORS[door])
    assert message, f"the {door} pod was admitted in the tenant namespace {namespace}"
    assert "vgpu-tenant-pods refuses pod" in message and f"in namespace {namespace}" in message, message
    for part in NAMED[door]:
        assert part in message, message
    assert "vgpu.io/gpu-memory" in message and "vgpu_tenant_pod_policy_exempt_namespaces" in message, message


def test_an_init_container_and_an_ephemeral_container_are_checked_too(
    policy_stack: Path, core: Any, namespace: str
) -> None:
    body = pod("init")
    body["spec"]["initContainers"] = [
        {"name": "setup", "image": "localhost/vgpu-e2e:none", "securityContext": {"privileged": True}}
    ]
    assert "privileged container(s) setup" in refusal(core, namespace, body)

    core.create_namespaced_pod(namespace, pod("plain"))
    debug = {"name": "debug", "image": "localhost/vgpu-e2e:none", "securityContext": {"privileged": True}}
    try:
        core.patch_namespaced_pod_ephemeralcontainers("plain", namespace, {"spec": {"ephemeralContainers": [debug]}})
    except ApiException as exc:
        assert exc.status == 403, exc
        assert "privileged container(s) debug" in json.loads(exc.body or "{}")["message"]
    else:
        pytest.fail("a privileged ephemeral container was added to a tenant pod")


def test_a_plain_gpu_pod_is_admitted(policy_stack: Path, core: Any, namespace: str) -> None:
    assert refusal(core, namespace, cluster.pod_body("gpu", 1000, {})) == ""
    bind_port = pod("port", securityContext={"capabilities": {"add": ["NET_BIND_SERVICE"]}})
    assert refusal(core, namespace, bind_port) == ""


@pytest.mark.parametrize("exempt", ["kube-system", EXEMPT_NS])
def test_the_same_pods_are_admitted_in_an_exempt_namespace(policy_stack: Path, core: Any, exempt: str) -> None:
    for door, body in DOORS.items():
        assert refusal(core, exempt, body) == "", f"the {door} pod was refused in the exempt namespace {exempt}"


def test_the_off_switch_removes_the_policy_and_the_default_brings_it_back(
    policy_stack: Path, core: Any, namespace: str
) -> None:
    """vgpu_tenant_pod_policy: false (with its reason) deletes the policy and its binding; the role's
    next run with the default applies them again."""
    reason = "Kyverno refuses these pods on this site"
    output = run_playbook(policy_stack, {"vgpu_tenant_pod_policy": False, "vgpu_tenant_pod_policy_off_reason": reason})
    assert reason in output, output[output.find("tenant pod policy") :][:3000]
    try:
        cluster.wait_for(
            "the privileged pod admitted with the switch off",
            lambda: refusal(core, namespace, DOORS["privileged"]) == "",
            timeout=60,
        )
    finally:
        run_playbook(policy_stack)
    # The API server loads the policy again within a moment.
    cluster.wait_for(
        "the privileged pod refused again with the default",
        lambda: bool(refusal(core, namespace, DOORS["privileged"])),
        60,
    )
