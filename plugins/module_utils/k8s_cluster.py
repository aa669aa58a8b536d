# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure helpers that judge the vgpu components' state from objects read off the API server."""

from typing import Any, Dict, Set

COMPONENTS = ("nvidia-shared-device-plugin", "cgpu-monitor", "nvidia-mps", "gpushare-scheduler-extender")
NAME_LABEL = "app.kubernetes.io/name"
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")


def pod_running(pod):
    """A pod counts as running when its phase is Running and every container is ready."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    containers = status.get("containerStatuses") or []
    return bool(containers) and all(c.get("ready") for c in containers)


def is_control_plane(node):
    labels = (node.get("metadata") or {}).get("labels") or {}
    return any(label in labels for label in CONTROL_PLANE_LABELS)


def expected_components(node, gpu_node_names, prefix):
    """The components that must run on this node: GPU agents on GPU nodes, the extender on control planes."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    wanted = []
    if meta.get("name") in gpu_node_names:
        wanted += ["nvidia-shared-device-plugin", "cgpu-monitor"]
        if labels.get("%s/mps" % prefix) == "true":
            wanted.append("nvidia-mps")
    if is_control_plane(node):
        wanted.append("gpushare-scheduler-extender")
    return wanted


def _quantity_int(value):
    """Extended resources are integer counts; anything else reads as 0."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def node_memory(node, prefix, unit_mib):
    """What a node advertises: units of <prefix>/gpu-memory and the MiB they stand for."""
    status = node.get("status") or {}
    resource = "%s/gpu-memory" % prefix
    capacity = _quantity_int((status.get("capacity") or {}).get(resource))
    allocatable = _quantity_int((status.get("allocatable") or {}).get(resource))
    return {
        "name": (node.get("metadata") or {}).get("name"),
        "capacity_units": capacity,
        "allocatable_units": allocatable,
        "allocatable_mib": allocatable * unit_mib,
        "gpus_annotation": ((node.get("metadata") or {}).get("annotations") or {}).get("%s/gpus" % prefix),
    }


def summarize(nodes, pods, gpu_node_names, prefix, unit_mib):
    """Per-component and per-node view plus the list of problems a user has to act on."""
    by_name = {str((n.get("metadata") or {}).get("name")): n for n in nodes}
    problems = []
    for missing in sorted(set(gpu_node_names) - set(by_name)):
        problems.append("GPU node %s is not registered in the cluster" % missing)

    components: Dict[str, Dict[str, Any]] = {name: {"expected": 0, "running": 0, "nodes": {}} for name in COMPONENTS}
    running_on: Dict[str, Set[str]] = {}
    for pod in pods:
        name = ((pod.get("metadata") or {}).get("labels") or {}).get(NAME_LABEL)
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
        for name in expected_components(node, gpu_node_names, prefix):
            components[name]["expected"] += 1
            if name in running_on.get(node_name, set()):
                components[name]["running"] += 1
            else:
                state = components[name]["nodes"].get(node_name, "no pod")
                problems.append("%s is not running on %s (%s)" % (name, node_name, state))
        if node_name in gpu_node_names:
            view = node_memory(node, prefix, unit_mib)
            memory.append(view)
            if view["allocatable_units"] <= 0:
                problems.append("GPU node %s advertises no %s/gpu-memory" % (node_name, prefix))
    return components, memory, problems
