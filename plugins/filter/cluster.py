# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Judge the cluster from what kubernetes.core.k8s_info read: pure functions, no API calls.

roles/vgpu_stack's cluster_info entry point reads nodes and pods with kubernetes.core.k8s_info and
asks cluster_health what runs where, what each GPU node advertises and what the user has to act on;
gpu_memory_holders names the pods that hold GPU memory (a unit change would rescale their quotas);
sample_memory reads the verification pod's log.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.vgpu.isolation.plugins.module_utils import gpus_annotation
from ansible_collections.vgpu.isolation.plugins.module_utils.contract import (
    ANNOTATIONS,
    DRA_DRIVER,
    LABELS,
    RESOURCES,
)
from ansible_collections.vgpu.isolation.plugins.module_utils.contract import (
    COMPONENTS as CONTRACT_COMPONENTS,
)
from ansible_collections.vgpu.isolation.plugins.module_utils.gpu_info import (
    parse_smi_memory,
    parse_vgpu_report_memory,
)
from ansible_collections.vgpu.isolation.plugins.module_utils.memory_size import parse_mib

# The components (the contract's list, contract/contract.yml).
COMPONENTS = tuple(component["name"] for component in CONTRACT_COMPONENTS)


# The names of the contract, composed from the resource prefix.
def _memory(prefix):
    return "%s/%s" % (prefix, RESOURCES["memory"])


def _label(prefix, which):
    return "%s/%s" % (prefix, LABELS[which])


def _driver(prefix):
    return "%s.%s" % (DRA_DRIVER, prefix)


NAME_LABEL = "app.kubernetes.io/name"
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")


def _meta(obj):
    return obj.get("metadata") or {}


def pod_running(pod):
    """A pod counts as running when its phase is Running and every container is ready."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    containers = status.get("containerStatuses") or []
    return bool(containers) and all(c.get("ready") for c in containers)


def is_control_plane(node):
    labels = _meta(node).get("labels") or {}
    return any(label in labels for label in CONTROL_PLANE_LABELS)


def expected_components(node, gpu_node_names, prefix, scheduling="extender"):
    """The components that must run on this node: GPU agents on GPU nodes (the device plugin, or on
    the DRA path the DRA driver), and on the extender path the extender on control planes."""
    labels = _meta(node).get("labels") or {}
    wanted = []
    if _meta(node).get("name") in gpu_node_names:
        wanted += ["vgpu-dra-driver" if scheduling == "dra" else "nvidia-shared-device-plugin", "cgpu-monitor"]
        if labels.get(_label(prefix, "mps")) == "true":
            wanted.append("nvidia-mps")
    if is_control_plane(node) and scheduling != "dra":
        wanted.append("gpushare-scheduler-extender")
    return wanted


def _quantity_int(value):
    """Extended resources are integer counts; anything else reads as 0."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def _annotated_gpus(text):
    """Each GPU of the device plugin's <prefix>/gpus annotation: its index, memory and the MiB its
    units offer, in the annotation's own unit (the extender's reader, module_utils/gpus_annotation.py);
    [] when there is none or it cannot be read, as the extender counts such a node."""
    try:
        unit, gpus = gpus_annotation.read(text)
    except ValueError:
        return []
    return [{"index": g["index"], "total_mib": g["total_mib"], "offered_mib": g["units"] * unit} for g in gpus]


def node_memory(node, prefix, unit_mib):
    """What a node advertises: units of <prefix>/gpu-memory and the MiB they stand for, and per GPU
    (the device plugin's annotation) what it offers."""
    status = node.get("status") or {}
    resource = _memory(prefix)
    capacity = _quantity_int((status.get("capacity") or {}).get(resource))
    allocatable = _quantity_int((status.get("allocatable") or {}).get(resource))
    annotation = (_meta(node).get("annotations") or {}).get("%s/%s" % (prefix, ANNOTATIONS["gpus"]))
    return {
        "name": _meta(node).get("name"),
        "capacity_units": capacity,
        "allocatable_units": allocatable,
        "allocatable_mib": allocatable * int(unit_mib),
        "gpus_annotation": annotation,
        "gpus": _annotated_gpus(annotation),
    }


def _slice_mib(value):
    """A device's memory capacity in MiB. The driver publishes "<n>Mi", and the API server returns the
    canonical quantity ("8Gi" for 8192Mi, "1Ti"): Kubernetes' binary suffixes are memory sizes of the
    inventory's grammar. A value of another form offers nothing."""
    try:
        return parse_mib(str(value), "memory", 0)
    except ValueError:
        return 0


def slice_memory(node_name, slices, prefix, unit_mib):
    """What a node offers on the DRA path: the memory of the devices of its ResourceSlices of our driver."""
    driver = _driver(prefix)
    total = 0
    published = False
    gpus = []
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("nodeName") != node_name or spec.get("driver") != driver:
            continue
        published = True
        for index, device in enumerate(spec.get("devices") or []):
            offered = _slice_mib(((device.get("capacity") or {}).get("memory") or {}).get("value", "0"))
            total += offered
            gpus.append({"index": index, "offered_mib": offered})
    return published, {
        "name": node_name,
        "capacity_units": total // int(unit_mib),
        "allocatable_units": total // int(unit_mib),
        "allocatable_mib": total,
        "gpus_annotation": None,
        "gpus": gpus,
    }


def gpu_node_memory(node, prefix, unit_mib, scheduling="extender", slices=None):
    """What a GPU node offers, and the problem when it offers nothing: its units of <prefix>/gpu-memory,
    or on the DRA path the memory of its ResourceSlices."""
    name = _meta(node).get("name")
    if scheduling == "dra":
        published, view = slice_memory(name, slices or [], prefix, unit_mib)
        return view, None if published else "GPU node %s publishes no ResourceSlice of %s" % (name, _driver(prefix))
    view = node_memory(node, prefix, unit_mib)
    problem = "GPU node %s advertises no %s" % (name, _memory(prefix)) if view["allocatable_units"] <= 0 else None
    return view, problem


def cluster_health(nodes, pods, gpu_nodes=None, prefix="vgpu.io", unit_mib=100, *, scheduling="extender", slices=None):
    """Per-component and per-node view of the vgpu stack, and the problems a user has to act on.

    ``nodes`` and ``pods`` are k8s_info resources (the stack's pods); ``gpu_nodes`` the names of the
    GPU nodes (None: the nodes labelled <prefix>/gpu-node=true); ``scheduling`` the path
    (vgpu_scheduling), and on the DRA path ``slices`` the ResourceSlices.
    """
    by_name = {str(_meta(n).get("name")): n for n in nodes}
    if gpu_nodes is None:
        gpu_nodes = [
            name
            for name, n in by_name.items()
            if (_meta(n).get("labels") or {}).get(_label(prefix, "gpu_node")) == "true"
        ]
    problems = ["GPU node %s is not registered in the cluster" % name for name in sorted(set(gpu_nodes) - set(by_name))]
    if not gpu_nodes:
        problems.append("no GPU node: none named and none labelled %s=true" % _label(prefix, "gpu_node"))

    components: dict = {name: {"expected": 0, "running": 0, "nodes": {}} for name in COMPONENTS}
    running_on: dict = {}
    for pod in pods:
        name = (_meta(pod).get("labels") or {}).get(NAME_LABEL)
        node_name = (pod.get("spec") or {}).get("nodeName")
        if name not in components or not node_name:
            continue
        phase = "Running" if pod_running(pod) else (pod.get("status") or {}).get("phase", "Unknown")
        components[name]["nodes"][node_name] = phase
        if phase == "Running":
            running_on.setdefault(node_name, set()).add(name)

    memory = []
    for node_name in sorted(by_name):
        node = by_name[node_name]
        for name in expected_components(node, gpu_nodes, prefix, scheduling):
            components[name]["expected"] += 1
            if name in running_on.get(node_name, set()):
                components[name]["running"] += 1
            else:
                state = components[name]["nodes"].get(node_name, "no pod")
                problems.append("%s is not running on %s (%s)" % (name, node_name, state))
        if node_name in gpu_nodes:
            view, problem = gpu_node_memory(node, prefix, unit_mib, scheduling, slices)
            memory.append(view)
            problems += [problem] if problem else []
    return {"components": components, "nodes": memory, "gpu_nodes": list(gpu_nodes), "problems": problems}


def _requested_units(pod, resource):
    units = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        asked = (resources.get("limits") or {}).get(resource) or (resources.get("requests") or {}).get(resource)
        units += _quantity_int(asked)
    return units


def gpu_memory_holders(pods, prefix="vgpu.io"):
    """The pods that hold GPU memory now: placed on a node, not finished, asking <prefix>/gpu-memory.

    Each is "namespace/name on node (N units)"; their quotas were computed in the unit in force."""
    resource = _memory(prefix)
    holders = []
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        units = _requested_units(pod, resource)
        if node and phase not in ("Succeeded", "Failed") and units > 0:
            meta = _meta(pod)
            holders.append("%s/%s on %s (%d units)" % (meta.get("namespace"), meta.get("name"), node, units))
    return sorted(holders)


def mps_label_changes(nodes, gpu_nodes, prefix="vgpu.io"):
    """Names of the nodes whose <prefix>/mps label is set and differs from what ``gpu_nodes`` (each
    {name, mps}) wants: their device plugins read the label when they start, so they must restart."""
    wanted = {node["name"]: "true" if node["mps"] else "false" for node in gpu_nodes}
    changed = []
    for node in nodes:
        name = _meta(node).get("name")
        label = (_meta(node).get("labels") or {}).get(_label(prefix, "mps"))
        if name in wanted and label is not None and label != wanted[name]:
            changed.append(name)
    return sorted(changed)


def without_admission_plugin(pods, plugin):
    """Names of the kube-apiserver pods (kubeadm's static pods, as k8s_info lists them) that do not
    run ``plugin``: it is not in their last ``--enable-admission-plugins``, or it is in a
    ``--disable-admission-plugins``."""
    missing = []
    for pod in pods:
        enabled, disabled = [], []
        for container in (pod.get("spec") or {}).get("containers") or []:
            for arg in (container.get("command") or []) + (container.get("args") or []):
                flag, _sep, value = str(arg).partition("=")
                if flag == "--enable-admission-plugins":
                    enabled = value.split(",")
                elif flag == "--disable-admission-plugins":
                    disabled = value.split(",")
        if plugin not in enabled or plugin in disabled:
            missing.append(_meta(pod).get("name"))
    return missing


def admission_policy_problems(policies, bindings, name):
    """What keeps the ValidatingAdmissionPolicy ``name`` from refusing anything: it is not among
    ``policies``, or none of ``bindings`` binds it with the action Deny (as kubernetes.core.k8s_info
    returns them); one line each, empty when it refuses."""
    problems = []
    if not any(_meta(policy).get("name") == name for policy in policies):
        problems.append(
            "admission policy %s is missing: the pods it refuses are admitted; run the stack's role again "
            "(stack.yml or site.yml), or see docs/security.md" % name
        )
    denying = [
        binding
        for binding in bindings
        if (binding.get("spec") or {}).get("policyName") == name
        and "Deny" in ((binding.get("spec") or {}).get("validationActions") or [])
    ]
    if not denying:
        problems.append(
            "admission policy %s has no binding that denies (a ValidatingAdmissionPolicyBinding with "
            "policyName %s and validationActions [Deny]): it refuses nothing; run the stack's role again" % (name, name)
        )
    return problems


def sample_memory(log):
    """``{used_mib, total_mib}`` the verification pod saw: nvidia-smi's table, or libvgpu's own
    report (manage --stats) where the node has no nvidia-smi; both None when the log has neither."""
    for parse in (parse_smi_memory, parse_vgpu_report_memory):
        try:
            used, total = parse(str(log))
        except ValueError:
            continue
        return {"used_mib": used, "total_mib": total}
    return {"used_mib": None, "total_mib": None}


class FilterModule(object):
    """The cluster views of vgpu.isolation."""

    def filters(self):
        return {
            "admission_policy_problems": admission_policy_problems,
            "cluster_health": cluster_health,
            "gpu_memory_holders": gpu_memory_holders,
            "mps_label_changes": mps_label_changes,
            "sample_memory": sample_memory,
            "without_admission_plugin": without_admission_plugin,
        }
