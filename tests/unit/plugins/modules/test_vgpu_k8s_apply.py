"""vgpu_k8s_apply: ordering, change reporting, check mode, patching, deletion and rollout waits.

The API server is the in-memory fake of k8s_fake.py (no API server runs in unit tests); the
real-API tests of the same module are in tests/k8s.
"""

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.vgpu.isolation.plugins.module_utils import k8s_resources
from ansible_collections.vgpu.isolation.plugins.modules import vgpu_k8s_apply
from k8s_fake import FakeApi

MANIFEST = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: cgpu-monitor, namespace: kube-system}
spec:
  selector: {matchLabels: {app: m}}
  template: {metadata: {labels: {app: m}}, spec: {containers: [{name: m, image: "img:1"}]}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: cgpu-monitor, namespace: kube-system}
---
# an empty document is skipped
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: vgpu:reader}
rules: [{apiGroups: [""], resources: [nodes], verbs: [get]}]
"""


def params(**overrides):
    base = dict(
        kubeconfig=None,
        context=None,
        src=None,
        definition=MANIFEST,
        state="present",
        field_manager="vgpu-isolation",
        force_conflicts=True,
        wait=False,
        wait_timeout=5,
        wait_sleep=1,
    )
    base.update(overrides)
    return base


def test_first_apply_creates_in_dependency_order_and_second_apply_changes_nothing():
    api = FakeApi()
    first = vgpu_k8s_apply.run(api, params(), check_mode=False)
    assert first["changed"] is True
    assert [o["ref"] for o in first["objects"]] == [
        "ServiceAccount/kube-system/cgpu-monitor",
        "ClusterRole/vgpu:reader",
        "DaemonSet/kube-system/cgpu-monitor",
    ]
    assert {o["result"] for o in first["objects"]} == {"created"}

    second = vgpu_k8s_apply.run(api, params(), check_mode=False)
    assert second["changed"] is False
    assert {o["result"] for o in second["objects"]} == {"unchanged"}


def test_a_changed_image_is_reported_as_configured():
    api = FakeApi()
    vgpu_k8s_apply.run(api, params(), check_mode=False)
    result = vgpu_k8s_apply.run(api, params(definition=MANIFEST.replace("img:1", "img:2")), check_mode=False)
    assert result["changed"] is True
    by_ref = {o["ref"]: o["result"] for o in result["objects"]}
    assert by_ref["DaemonSet/kube-system/cgpu-monitor"] == "configured"
    assert by_ref["ServiceAccount/kube-system/cgpu-monitor"] == "unchanged"
    live = api.get("apps/v1", "DaemonSet", "cgpu-monitor", "kube-system")
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "img:2"


def test_check_mode_predicts_the_change_and_stores_nothing():
    api = FakeApi()
    result = vgpu_k8s_apply.run(api, params(), check_mode=True)
    assert result["changed"] is True
    assert api.store == {}
    assert all(call[-1] is True for call in api.calls if call[0] == "apply"), "every apply must be a dry run"


def test_server_bookkeeping_alone_is_not_a_change():
    before = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "resourceVersion": "1"}, "data": {}}
    after = dict(before, metadata={"name": "c", "resourceVersion": "9", "managedFields": [{"manager": "x"}]})
    after["status"] = {"anything": 1}
    assert not k8s_resources.differs(before, after)
    assert k8s_resources.differs(before, dict(before, data={"k": "v"}))


def test_namespaced_object_without_namespace_is_refused_by_name():
    api = FakeApi()
    bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "vgpu-config"}}
    with pytest.raises(k8s_resources.ManifestError, match="ConfigMap/vgpu-config is namespaced"):
        vgpu_k8s_apply.run(api, params(definition=[bad]), check_mode=False)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("kind: ConfigMap\nmetadata: {name: a}", "has no apiVersion"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {}", "has no metadata.name"),
        ("- just\n- a list", "expected a mapping"),
        ("a: [unclosed", "is not valid YAML"),
    ],
)
def test_malformed_manifests_fail_with_a_message_naming_the_problem(text, fragment):
    with pytest.raises(k8s_resources.ManifestError, match=fragment):
        vgpu_k8s_apply.run(FakeApi(), params(definition=text), check_mode=False)


def test_a_list_document_is_expanded():
    objects = k8s_resources.load_documents(
        "apiVersion: v1\nkind: List\nitems:\n"
        "- {apiVersion: v1, kind: ServiceAccount, metadata: {name: a, namespace: n}}\n"
    )
    assert [k8s_resources.ref(o) for o in objects] == ["ServiceAccount/n/a"]


NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": {"kubernetes.io/os": "linux"}}}
LABELS = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": {"vgpu.io/gpu-node": "true"}}}


def test_patching_labels_keeps_other_labels_and_is_idempotent():
    api = FakeApi([NODE])
    first = vgpu_k8s_apply.run(api, params(definition=[LABELS], state="patched"), check_mode=False)
    assert first["changed"] is True
    labels = api.get("v1", "Node", "gpu-1")["metadata"]["labels"]
    assert labels == {"kubernetes.io/os": "linux", "vgpu.io/gpu-node": "true"}
    again = vgpu_k8s_apply.run(api, params(definition=[LABELS], state="patched"), check_mode=False)
    assert again["changed"] is False


def test_patching_with_null_removes_the_label():
    api = FakeApi([NODE])
    vgpu_k8s_apply.run(api, params(definition=[LABELS], state="patched"), check_mode=False)
    removal = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": {"vgpu.io/gpu-node": None}}}
    result = vgpu_k8s_apply.run(api, params(definition=[removal], state="patched"), check_mode=False)
    assert result["changed"] is True
    assert api.get("v1", "Node", "gpu-1")["metadata"]["labels"] == {"kubernetes.io/os": "linux"}


def test_patching_a_node_that_is_not_registered_fails_naming_it():
    with pytest.raises(k8s_resources.ManifestError, match="Node/gpu-1 does not exist"):
        vgpu_k8s_apply.run(FakeApi(), params(definition=[LABELS], state="patched"), check_mode=False)


def test_absent_deletes_workloads_before_accounts_and_reports_absent_on_rerun():
    api = FakeApi()
    vgpu_k8s_apply.run(api, params(), check_mode=False)
    result = vgpu_k8s_apply.run(api, params(state="absent"), check_mode=False)
    assert result["objects"][0]["ref"] == "DaemonSet/kube-system/cgpu-monitor"
    assert result["changed"] is True and api.store == {}
    again = vgpu_k8s_apply.run(api, params(state="absent"), check_mode=False)
    assert again["changed"] is False
    assert {o["result"] for o in again["objects"]} == {"absent"}


def test_absent_in_check_mode_deletes_nothing():
    api = FakeApi()
    vgpu_k8s_apply.run(api, params(), check_mode=False)
    result = vgpu_k8s_apply.run(api, params(state="absent"), check_mode=True)
    assert result["changed"] is True
    assert len(api.store) == 3


def _rolled_out(obj, desired, available):
    obj["status"] = {
        "observedGeneration": obj["metadata"]["generation"],
        "desiredNumberScheduled": desired,
        "updatedNumberScheduled": desired,
        "numberAvailable": available,
    }


def test_wait_returns_once_the_daemonset_has_all_pods_available():
    api = FakeApi()
    reads = {"n": 0}

    def progress(kind, name, obj):
        # The DaemonSet controller catches up on the third read.
        if kind == "DaemonSet" and obj is not None:
            reads["n"] += 1
            _rolled_out(obj, 2, 2 if reads["n"] >= 3 else 0)

    api.on_get = progress
    result = vgpu_k8s_apply.run(api, params(wait=True, wait_sleep=1), check_mode=False)
    assert "failed" not in result
    assert result["rollout"] == [
        {
            "ref": "DaemonSet/kube-system/cgpu-monitor",
            "ready": True,
            "message": "DaemonSet/kube-system/cgpu-monitor: 2 of 2 pods available",
        }
    ]


def test_wait_fails_after_the_timeout_naming_the_late_workload():
    api = FakeApi()
    api.on_get = lambda kind, name, obj: obj and kind == "DaemonSet" and _rolled_out(obj, 2, 1)
    clock = iter(range(0, 1000, 3))
    vgpu_k8s_apply.run(api, params(), check_mode=False)
    ready, states = vgpu_k8s_apply.wait_for_rollout(
        api, k8s_resources.load_documents(MANIFEST), 5, 1, clock=lambda: next(clock), pause=lambda _s: None
    )
    assert ready is False
    assert states[0]["message"] == "DaemonSet/kube-system/cgpu-monitor: 2 of 2 pods updated, 1 available"


def test_rollout_state_waits_for_the_controller_to_observe_the_new_generation():
    ds = {"kind": "DaemonSet", "metadata": {"name": "d", "generation": 3}, "status": {"observedGeneration": 2}}
    assert rollout_message(ds) == (False, "DaemonSet/d: controller has not seen generation 3 yet (observed 2)")
    deploy = {"kind": "Deployment", "metadata": {"name": "x", "generation": 1}, "spec": {"replicas": 2}}
    deploy["status"] = {"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 1}
    assert rollout_message(deploy)[0] is False


def rollout_message(obj):
    return k8s_resources.rollout_state(obj)


def test_main_reports_through_ansible(monkeypatch, capsys, tmp_path):
    """The module entry point: reads src from disk, applies, and prints Ansible's JSON result."""
    api = FakeApi()
    monkeypatch.setattr(vgpu_k8s_apply, "K8sApi", lambda kubeconfig, context: api)
    monkeypatch.setattr(vgpu_k8s_apply, "HAS_KUBERNETES", True)
    src = tmp_path / "m.yaml"
    src.write_text(MANIFEST)
    with patch_module_args({"src": str(src), "kubeconfig": "/etc/rancher/k3s/k3s.yaml"}), pytest.raises(SystemExit):
        vgpu_k8s_apply.main()
    out = json.loads(capsys.readouterr().out)
    assert out["changed"] is True
    assert len(out["objects"]) == 3


def test_main_refuses_src_and_definition_together(capsys):
    with patch_module_args({"src": "/x.yaml", "definition": MANIFEST}), pytest.raises(SystemExit):
        vgpu_k8s_apply.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] is True
    assert "mutually exclusive" in out["msg"]
