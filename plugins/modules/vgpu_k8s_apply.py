#!/usr/bin/python
# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

import time
from typing import Any, Dict

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.common.text.converters import to_text
from ansible_collections.vgpu.isolation.plugins.module_utils.k8s_client import (
    HAS_KUBERNETES,
    KUBERNETES_IMPORT_ERROR,
    K8sApi,
    K8sError,
)
from ansible_collections.vgpu.isolation.plugins.module_utils.k8s_resources import (
    HAS_YAML,
    YAML_IMPORT_ERROR,
    ManifestError,
    differs,
    flatten,
    load_documents,
    order_for_apply,
    order_for_delete,
    ref,
    rollout_state,
)

ARGUMENT_SPEC: Dict[str, Dict[str, Any]] = dict(
    kubeconfig=dict(type="path"),
    context=dict(type="str"),
    src=dict(type="path"),
    definition=dict(type="raw"),
    state=dict(type="str", default="present", choices=["present", "absent", "patched"]),
    field_manager=dict(type="str", default="vgpu-isolation"),
    force_conflicts=dict(type="bool", default=True),
    wait=dict(type="bool", default=False),
    wait_timeout=dict(type="int", default=300),
    wait_sleep=dict(type="int", default=2),
)


def read_objects(params):
    """The objects named by src or definition, validated."""
    if params["src"]:
        try:
            with open(params["src"], "rb") as handle:
                text = to_text(handle.read())
        except OSError as exc:
            raise ManifestError("cannot read src %s: %s" % (params["src"], exc)) from exc
        return load_documents(text, params["src"])
    definition = params["definition"]
    if isinstance(definition, str):
        return load_documents(definition)
    if isinstance(definition, dict):
        definition = [definition]
    if not isinstance(definition, list):
        raise ManifestError("definition must be a mapping, a list of mappings or YAML text")
    return flatten(definition)


def _check_namespace(api, obj):
    if api.namespaced(obj["apiVersion"], obj["kind"]) and not obj["metadata"].get("namespace"):
        raise ManifestError("%s is namespaced but names no metadata.namespace" % ref(obj))


def _key(obj):
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace")


def apply_present(api, objects, params, check_mode):
    results = []
    for obj in order_for_apply(objects):
        _check_namespace(api, obj)
        api_version, kind, name, namespace = _key(obj)
        before = api.get(api_version, kind, name, namespace)
        after = api.apply(obj, params["field_manager"], params["force_conflicts"], dry_run=check_mode)
        if before is None:
            outcome = "created"
        elif differs(before, after):
            outcome = "configured"
        else:
            outcome = "unchanged"
        results.append({"ref": ref(obj), "result": outcome})
    return results


def apply_patched(api, objects, params, check_mode):
    results = []
    for obj in objects:
        api_version, kind, name, namespace = _key(obj)
        before = api.get(api_version, kind, name, namespace)
        if before is None:
            raise ManifestError("%s does not exist, so it cannot be patched" % ref(obj))
        patch = {key: value for key, value in obj.items() if key not in ("apiVersion", "kind")}
        after = api.merge_patch(
            api_version,
            kind,
            name,
            patch,
            namespace=namespace,
            field_manager=params["field_manager"],
            dry_run=check_mode,
        )
        results.append({"ref": ref(obj), "result": "configured" if differs(before, after) else "unchanged"})
    return results


def apply_absent(api, objects, check_mode):
    results = []
    for obj in order_for_delete(objects):
        api_version, kind, name, namespace = _key(obj)
        if api.get(api_version, kind, name, namespace) is None:
            results.append({"ref": ref(obj), "result": "absent"})
            continue
        if not check_mode:
            api.delete(api_version, kind, name, namespace)
        results.append({"ref": ref(obj), "result": "deleted"})
    return results


def wait_for_rollout(api, objects, timeout, sleep, *, clock=time.monotonic, pause=time.sleep):
    """Poll the workloads until all rolled out; returns (all_ready, states)."""
    workloads = [obj for obj in objects if obj["kind"] in ("DaemonSet", "Deployment")]
    deadline = clock() + timeout
    while True:
        states = []
        for obj in workloads:
            api_version, kind, name, namespace = _key(obj)
            live = api.get(api_version, kind, name, namespace)
            if live is None:
                states.append({"ref": ref(obj), "ready": False, "message": "%s does not exist" % ref(obj)})
                continue
            live.setdefault("kind", kind)
            ready, message = rollout_state(live)
            states.append({"ref": ref(obj), "ready": ready, "message": message})
        if all(state["ready"] for state in states) or clock() >= deadline:
            return all(state["ready"] for state in states), states
        pause(sleep)


def run(api, params, check_mode):
    """The whole module run against an API adapter; returns the result dict (failed set on failure)."""
    objects = read_objects(params)
    if params["state"] == "absent":
        results = apply_absent(api, objects, check_mode)
    elif params["state"] == "patched":
        results = apply_patched(api, objects, params, check_mode)
    else:
        results = apply_present(api, objects, params, check_mode)
    changed = any(item["result"] not in ("unchanged", "absent") for item in results)
    result = {"changed": changed, "objects": results}
    if params["wait"] and params["state"] == "present" and not check_mode:
        ready, states = wait_for_rollout(api, objects, params["wait_timeout"], params["wait_sleep"])
        result["rollout"] = states
        if not ready:
            late = "; ".join(state["message"] for state in states if not state["ready"])
            result["failed"] = True
            result["msg"] = "rollout not finished after %d s: %s" % (params["wait_timeout"], late)
    return result


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=[("src", "definition")],
        required_one_of=[("src", "definition")],
        supports_check_mode=True,
    )
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)
    if not HAS_YAML:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=YAML_IMPORT_ERROR)
    if module.params["wait_timeout"] < 0 or module.params["wait_sleep"] < 1:
        module.fail_json(msg="wait_timeout must be >= 0 and wait_sleep >= 1 (seconds)")
    try:
        api = K8sApi(module.params["kubeconfig"], module.params["context"])
        result = run(api, module.params, module.check_mode)
    except (K8sError, ManifestError) as exc:
        module.fail_json(msg=str(exc))
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
