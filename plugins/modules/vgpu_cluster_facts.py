#!/usr/bin/python
# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

import contextlib
import time
import uuid
from typing import Any, Dict

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.urls import open_url
from ansible_collections.vgpu.isolation.plugins.module_utils.gpu_info import (
    parse_smi_memory,
    parse_vgpu_report_memory,
)
from ansible_collections.vgpu.isolation.plugins.module_utils.k8s_client import (
    HAS_KUBERNETES,
    KUBERNETES_IMPORT_ERROR,
    K8sApi,
    K8sError,
)
from ansible_collections.vgpu.isolation.plugins.module_utils.k8s_cluster import (
    NAME_LABEL,
    summarize,
)

ARGUMENT_SPEC: Dict[str, Dict[str, Any]] = dict(
    kubeconfig=dict(type="path"),
    context=dict(type="str"),
    namespace=dict(type="str", default="kube-system"),
    resource_prefix=dict(type="str", default="vgpu.io"),
    unit_mib=dict(type="int", default=100),
    gpu_nodes=dict(type="list", elements="str"),
    extender_url=dict(type="str", default="http://127.0.0.1:32766/healthz"),
    extender_client_cert=dict(type="path"),
    extender_client_key=dict(type="path"),
    extender_ca_cert=dict(type="path"),
    check_extender=dict(type="bool", default=True),
    sample_app=dict(type="bool", default=False),
    sample_image=dict(type="str", default="localhost/vgpu-components:0.1.0"),
    sample_namespace=dict(type="str", default="default"),
    sample_quota_mib=dict(type="int", default=3000),
    sample_use_mib=dict(type="int", default=1200),
    sample_command=dict(
        type="str",
        default="/opt/vgpu/vgpu-memory-usage {use_mib} 20 & sleep 8; nvidia-smi; /opt/vgpu/manage --stats; wait",
    ),
    sample_runtime_class=dict(type="str", default="nvidia"),
    sample_timeout=dict(type="int", default=300),
)


def check_extender(url, opener=open_url, client_cert=None, client_key=None, ca_cert=None):
    """GET the extender's health URL; any HTTP answer below 400 counts as reachable.

    With mutual TLS the extender answers only clients with a certificate of its CA: the module shows
    kube-scheduler's (``client_cert``, ``client_key``) and checks the extender against ``ca_cert``.
    """
    result = {"url": url, "checked": True, "reachable": False, "status": None, "error": ""}
    tls = {"client_cert": client_cert, "client_key": client_key} if client_cert else {}
    if ca_cert:
        tls["ca_path"] = ca_cert
    try:
        response = opener(url, method="GET", timeout=5, validate_certs=bool(ca_cert), **tls)
        result["status"] = response.getcode()
        result["reachable"] = result["status"] < 400
    except Exception as exc:  # connection refused, timeouts and HTTP errors all mean "not usable"
        result["status"] = getattr(exc, "code", None)
        result["error"] = str(exc)
    return result


def sample_pod_manifest(params, name):
    """The sample pod: one container with the quota as a limit of <prefix>/gpu-memory."""
    units = params["sample_quota_mib"] // params["unit_mib"]
    # Plain replacement, not str.format: the command is shell, where "${HOME}" or "{a,b}" are common.
    command = (
        params["sample_command"]
        .replace("{use_mib}", str(params["sample_use_mib"]))
        .replace("{quota_mib}", str(params["sample_quota_mib"]))
    )
    spec = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "sample",
                "image": params["sample_image"],
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", command],
                "resources": {"limits": {"%s/gpu-memory" % params["resource_prefix"]: str(units)}},
            }
        ],
    }
    if params["sample_runtime_class"]:
        spec["runtimeClassName"] = params["sample_runtime_class"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": params["sample_namespace"],
            "labels": {NAME_LABEL: "vgpu-sample", "app.kubernetes.io/part-of": "vgpu-isolation"},
        },
        "spec": spec,
    }


def run_sample(api, params, clock=time.monotonic, pause=time.sleep):
    """Run the sample pod to completion, read nvidia-smi's memory line from its log, delete it."""
    name = "vgpu-sample-%s" % uuid.uuid4().hex[:8]
    namespace = params["sample_namespace"]
    api.apply(sample_pod_manifest(params, name), "vgpu-isolation-verify")
    outcome = {"ran": True, "name": name, "node": None, "phase": None, "used_mib": None, "total_mib": None, "log": ""}
    try:
        deadline = clock() + params["sample_timeout"]
        while True:
            pod = api.get("v1", "Pod", name, namespace) or {}
            outcome["phase"] = (pod.get("status") or {}).get("phase")
            outcome["node"] = (pod.get("spec") or {}).get("nodeName")
            if outcome["phase"] in ("Succeeded", "Failed") or clock() >= deadline:
                break
            pause(2)
        if outcome["node"] and outcome["phase"] in ("Succeeded", "Failed", "Running"):
            outcome["log"] = api.pod_log(name, namespace)
        # nvidia-smi's line, else libvgpu's own report (a container the runtime gave no nvidia-smi); no
        # memory line leaves both unknown, and sample_problems reports the missing total.
        for parse in (parse_smi_memory, parse_vgpu_report_memory):
            with contextlib.suppress(ValueError):
                outcome["used_mib"], outcome["total_mib"] = parse(str(outcome["log"]))
                break
    finally:
        api.delete("v1", "Pod", name, namespace)
    return outcome


def sample_problems(params, outcome):
    if outcome["phase"] != "Succeeded":
        phase = outcome["phase"] or "unscheduled"
        return ["sample pod %s ended %s (node %s)" % (outcome["name"], phase, outcome["node"])]
    if outcome["total_mib"] != params["sample_quota_mib"]:
        return [
            "sample pod saw %s MiB of GPU memory in nvidia-smi (or libvgpu's report), expected the quota %d MiB"
            % (outcome["total_mib"], params["sample_quota_mib"])
        ]
    return []


def run(api, params, check_mode, extender_check=check_extender):
    prefix = params["resource_prefix"]
    nodes = api.list("v1", "Node")
    if params["gpu_nodes"] is None:
        gpu_nodes = [
            n["metadata"]["name"]
            for n in nodes
            if ((n["metadata"].get("labels") or {}).get("%s/gpu-node" % prefix)) == "true"
        ]
    else:
        gpu_nodes = list(params["gpu_nodes"])
    selector = "app.kubernetes.io/part-of=vgpu-isolation"
    pods = api.list("v1", "Pod", namespace=params["namespace"], label_selector=selector)
    components, memory, problems = summarize(nodes, pods, gpu_nodes, prefix, params["unit_mib"])
    if not gpu_nodes:
        problems.append("no GPU node: none named and none labelled %s/gpu-node=true" % prefix)
    if params["check_extender"]:
        extender = extender_check(params["extender_url"])
        if not extender["reachable"]:
            problems.append("scheduler extender at %s is not reachable: %s" % (extender["url"], extender["error"]))
    else:
        extender = {"url": params["extender_url"], "checked": False, "reachable": None, "status": None, "error": ""}
    facts = {"components": components, "nodes": memory, "extender": extender, "gpu_nodes": gpu_nodes}
    if params["sample_app"]:
        if check_mode:
            facts["sample"] = {"ran": False, "reason": "check mode"}
        else:
            facts["sample"] = run_sample(api, params)
            problems.extend(sample_problems(params, facts["sample"]))
    facts["problems"] = problems
    facts["healthy"] = not problems
    result = dict(facts)
    result["changed"] = False
    result["ansible_facts"] = {"vgpu_cluster": facts}
    return result


def extender_checker(params):
    """check_extender with the module's TLS files, when it has them."""
    tls = {
        "client_cert": params["extender_client_cert"],
        "client_key": params["extender_client_key"],
        "ca_cert": params["extender_ca_cert"],
    }
    return lambda url: check_extender(url, **tls)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        required_together=[("extender_client_cert", "extender_client_key")],
    )
    params = module.params
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)
    if params["unit_mib"] < 1:
        module.fail_json(msg="unit_mib must be a positive number of MiB, got %d" % params["unit_mib"])
    if params["sample_quota_mib"] % params["unit_mib"] or params["sample_quota_mib"] <= 0:
        module.fail_json(
            msg="sample_quota_mib %d must be a positive multiple of unit_mib %d"
            % (params["sample_quota_mib"], params["unit_mib"])
        )
    try:
        api = K8sApi(params["kubeconfig"], params["context"])
        result = run(api, params, module.check_mode, extender_check=extender_checker(params))
    except K8sError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
