"""flanneld's token (issue 40 item 5) against the real API server.

flanneld runs on every kubeadm node (kubeadm_cni flannel) as the ServiceAccount kube-system/flanneld,
which may patch the status of any Node. Before, every node held the same never-expiring token of a
Secret: one compromised node could rewrite every other node's annotations. Now each node's token is
bound to its own Node object and lasts 24 h; the node renews it with itself
(roles/kubeadm/files/vgpu-flanneld-token, run here with the real kubectl); the admission policy
vgpu-flanneld-own-node holds it to its own Node; and the token stops working when its Node is
deleted (uninstall.yml --limit <node>). The objects are the role's own file,
roles/kubeadm/files/flanneld-rbac.yaml, created as `kubectl apply` would.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, utils
from kubernetes.client.rest import ApiException

from tests.k8s import cluster

NS = "kube-system"
RBAC = cluster.REPO_ROOT / "roles" / "kubeadm" / "files" / "flanneld-rbac.yaml"
SCRIPT = cluster.REPO_ROOT / "roles" / "kubeadm" / "files" / "vgpu-flanneld-token"
DAY = 24 * 3600


def remove_flanneld_objects(core: Any) -> None:
    api = cluster.api_client()
    rbac, admission = client.RbacAuthorizationV1Api(api), client.AdmissionregistrationV1Api(api)
    for delete, args in [
        (admission.delete_validating_admission_policy_binding, ("vgpu-flanneld-own-node",)),
        (admission.delete_validating_admission_policy, ("vgpu-flanneld-own-node",)),
        (rbac.delete_namespaced_role_binding, ("vgpu-flanneld-token", NS)),
        (rbac.delete_namespaced_role, ("vgpu-flanneld-token", NS)),
        (rbac.delete_cluster_role_binding, ("vgpu-flanneld",)),
        (rbac.delete_cluster_role, ("vgpu-flanneld",)),
        (core.delete_namespaced_service_account, ("flanneld", NS)),
    ]:
        try:
            delete(*args)
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture(scope="module")
def flanneld(core: Any) -> Iterator[None]:
    """The role's ServiceAccount, RBAC and admission policy for flanneld."""
    remove_flanneld_objects(core)  # what an interrupted run left
    utils.create_from_dict(cluster.api_client(), yaml.safe_load(RBAC.read_text()))
    try:
        # The API server loads a new admission policy within a moment: until then the token RBAC
        # allows (flanneld's own, bound to no node) is not refused yet.
        sa_core = as_flanneld(core.create_namespaced_service_account_token("flanneld", NS, {"spec": {}}).status.token)
        body = {"spec": {"expirationSeconds": 600}}
        cluster.wait_for(
            "the admission policy vgpu-flanneld-own-node in force",
            lambda: refused(sa_core.create_namespaced_service_account_token, "flanneld", NS, body)[0] == 403,
            timeout=60,
        )
        yield
    finally:
        remove_flanneld_objects(core)


@pytest.fixture
def nodes(core: Any) -> Iterator[list[str]]:
    """Two plain (kwok) nodes, A and B."""
    group = uuid.uuid4().hex[:6]
    names = [f"flannel-{group}-a", f"flannel-{group}-b"]
    for name in names:
        core.create_node(cluster.node_body(name, [], {}))
    yield names
    for name in names:
        try:
            core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def node_token(core: Any, node: str, seconds: int = DAY) -> str:
    """A token of flanneld bound to `node`'s Node object, as the role issues it with the admin credentials."""
    uid = core.read_node(node).metadata.uid
    bound = {"kind": "Node", "apiVersion": "v1", "name": node, "uid": uid}
    request = {"spec": {"expirationSeconds": seconds, "boundObjectRef": bound}}
    return str(core.create_namespaced_service_account_token("flanneld", NS, request).status.token)


def as_flanneld(token: str, work: Path | None = None) -> Any:
    folder = work or cluster.STATE_DIR
    kubeconfig = cluster.token_kubeconfig(folder / f"flanneld-{uuid.uuid4().hex}.kubeconfig", token)
    return client.CoreV1Api(cluster.api_client(kubeconfig))


def claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def refused(call: Any, *args: Any) -> tuple[int, str]:
    """(status, message) of the API server's refusal; (0, '') when the call went through."""
    try:
        call(*args)
    except ApiException as exc:
        body = json.loads(exc.body) if exc.body else {}
        return exc.status, str(body.get("message", ""))
    return 0, ""


def status_patch(node: str) -> dict[str, Any]:
    """What flanneld writes on its node: its VXLAN address."""
    del node
    return {"metadata": {"annotations": {"flannel.alpha.coreos.com/public-ip": "10.0.0.9"}}}


def test_the_token_of_node_a_may_patch_only_node_a(flanneld: None, core: Any, nodes: list[str], tmp_path: Path) -> None:
    own, other = nodes
    sa_core = as_flanneld(node_token(core, own), tmp_path)
    assert sa_core.list_node().items, "flanneld reads the nodes"
    sa_core.patch_node_status(own, status_patch(own))
    status, message = refused(sa_core.patch_node_status, other, status_patch(other))
    assert status == 403, (status, message)
    assert f"flanneld may change only the status of its own node {own}, not {other}" in message, message
    assert refused(sa_core.patch_node, other, {"metadata": {"labels": {"x": "y"}}})[0] == 403

    unbound = core.create_namespaced_service_account_token("flanneld", NS, {"spec": {"expirationSeconds": DAY}})
    status, message = refused(as_flanneld(unbound.status.token, tmp_path).patch_node_status, own, status_patch(own))
    assert status == 403 and "must be bound to its node's Node object" in message, message


def test_the_token_is_bound_to_its_node_and_expires_within_a_day(
    flanneld: None, core: Any, nodes: list[str], tmp_path: Path
) -> None:
    own, other = nodes
    token = node_token(core, own)
    found = claims(token)
    assert found["kubernetes.io"]["node"]["name"] == own, found
    assert found["exp"] - found["iat"] <= DAY, found

    sa_core = as_flanneld(token, tmp_path)

    def request(node: str, seconds: int) -> tuple[int, str]:
        bound = {"kind": "Node", "apiVersion": "v1", "name": node}
        body = {"spec": {"expirationSeconds": seconds, "boundObjectRef": bound}}
        return refused(sa_core.create_namespaced_service_account_token, "flanneld", NS, body)

    assert request(own, DAY) == (0, "")
    for node, seconds in ((other, DAY), (own, 2 * DAY)):
        status, message = request(node, seconds)
        assert status == 403 and f"flanneld on {own} may request only tokens bound to its own Node" in message, message
    body = {"spec": {"expirationSeconds": DAY}}
    assert refused(sa_core.create_namespaced_service_account_token, "flanneld", NS, body)[0] == 403
    assert refused(sa_core.create_namespaced_service_account_token, "default", NS, body)[0] == 403


def test_the_node_renews_its_token_with_itself_and_only_for_itself(
    flanneld: None, core: Any, nodes: list[str], tmp_path: Path
) -> None:
    """The role's renewal script, with the real kubectl and a kubeconfig that reads the token from a
    file as flanneld's does (tokenFile)."""
    own, other = nodes
    old = node_token(core, own, seconds=3600)
    (tmp_path / "token").write_text(old)
    admin = (cluster.STATE_DIR / "admin.kubeconfig").read_text()
    server = next(line.split(":", 1)[1].strip() for line in admin.splitlines() if line.strip().startswith("server:"))
    cluster.write_kubeconfig(
        tmp_path / "kubeconfig",
        {"server": server, "certificate-authority": str(cluster.STATE_DIR / "pki" / "ca.crt")},
        {"tokenFile": str(tmp_path / "token")},
    )
    env = dict(os.environ, VGPU_FLANNEL_DIR=str(tmp_path), VGPU_KUBECTL=str(cluster.BIN_DIR / "kubectl"))

    def renew(node: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT)], env={**env, "NODE_NAME": node}, capture_output=True, text=True, timeout=60, check=False
        )

    done = renew(own)
    assert done.returncode == 0, done.stderr
    new = (tmp_path / "token").read_text().strip()
    assert new != old and claims(new)["kubernetes.io"]["node"]["name"] == own
    assert claims(new)["exp"] - claims(new)["iat"] == DAY
    assert oct((tmp_path / "token").stat().st_mode & 0o777) == "0o600"

    done = renew(other)
    assert done.returncode != 0 and "may request only tokens bound to its own Node" in done.stderr, done.stderr
    assert (tmp_path / "token").read_text().strip() == new, "a refused renewal replaced the token"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("token")) == ["token"]


def test_the_token_stops_working_when_its_node_is_deleted(
    flanneld: None, core: Any, nodes: list[str], tmp_path: Path
) -> None:
    """uninstall.yml --limit <node> deletes the Node: the token of the node that left is refused."""
    own, _other = nodes
    sa_core = as_flanneld(node_token(core, own), tmp_path)
    assert sa_core.list_node().items
    core.delete_node(own)

    def rejected() -> bool:
        return refused(sa_core.list_node)[0] == 401

    cluster.wait_for(f"the token of the deleted node {own} rejected", rejected, timeout=60)
    # A Node of the same name registered again is another object: the old token stays refused.
    core.create_node(cluster.node_body(own, [], {}))
    assert refused(sa_core.list_node)[0] == 401
