#!/usr/bin/python
# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rollout_wait
short_description: Wait until DaemonSets and Deployments have rolled out, for as long as they make progress
version_added: "0.1.0"
description:
  - Reads the DaemonSets and Deployments among O(resources), and their pods, every O(poll_interval) seconds
    until each has rolled out (as C(kubectl rollout status) judges it).
  - There is no overall time limit. The wait goes on while the rollouts show something not seen before in this
    wait (a new generation observed, more pods scheduled, updated, ready or available, a pod created, bound,
    started, Ready or gone), and fails only when nothing new was seen for O(stall_timeout) seconds. A pod in a
    crash loop repeats the same states, so it is a stall.
  - The failure names what was last seen (the counts, and each pod that is not Ready, with its node and the
    reason its containers wait) and O(stall_setting), the setting that gives a slow machine more time.
  - A read of the API that fails (a loaded API server) is no progress and no verdict; the wait goes on, and its
    error is in the message if the wait stalls. Only a refused identity (401, 403) fails at once.
options:
  resources:
    description:
      - Kubernetes objects (at least C(kind), C(metadata.name) and C(metadata.namespace)), for example the
        C(result) of each object applied by C(kubernetes.core.k8s). Those of kind C(DaemonSet) or C(Deployment)
        are waited on; the others are ignored.
    type: list
    elements: dict
    required: true
  kubeconfig:
    description: Path of the kubeconfig to use; the client's default (C(KUBECONFIG), C(~/.kube/config)) when unset.
    type: path
  stall_timeout:
    description: Seconds the rollouts may go without any progress before the module fails.
    type: int
    default: 600
  poll_interval:
    description: Seconds between two reads of the rollouts.
    type: float
    default: 2
  stall_setting:
    description: The setting the failure message names as the one that gives a slow machine more time.
    type: str
    default: stall_timeout
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: In check mode the module reads nothing and waits for nothing (nothing was applied).
  diff_mode:
    support: none
  platform:
    platforms: posix
requirements:
  - The Kubernetes Python client (C(kubernetes)).
author:
  - vgpu.isolation maintainers (@vgpu-isolation)
"""

EXAMPLES = r"""
- name: Apply the components
  kubernetes.core.k8s:
    definition: "{{ lookup('ansible.builtin.template', 'components.yaml.j2') }}"
    apply: true
  register: applied

- name: Wait until they have rolled out, for as long as they make progress
  vgpu.isolation.rollout_wait:
    resources: "{{ applied.result.results | map(attribute='result') | selectattr('kind', 'in', ['DaemonSet']) }}"
    stall_timeout: 600
    stall_setting: vgpu_stack_wait_timeout
"""

RETURN = r"""
rollouts:
  description: Each workload waited on, as last seen (also when the wait stalled).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Kind, namespace and name.
      type: str
      sample: DaemonSet kube-system/cgpu-monitor
    done:
      description: Whether it has rolled out.
      type: bool
    summary:
      description: Its generation and pod counts, and the pods that are not Ready.
      type: str
      sample: "DaemonSet kube-system/cgpu-monitor: generation 2 (observed 2), 1 of 1 pods updated, 1 ready, 1 available"
waited_s:
  description: Seconds the module waited.
  returned: always
  type: int
  sample: 12
"""

import json
import traceback
from typing import Any, Dict, List, Tuple

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.vgpu.isolation.plugins.module_utils.rollout_progress import (
    KINDS,
    ReadError,
    Rollout,
    Stalled,
    follow,
    label_selector,
    rollout,
    workload_name,
)

try:
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError

    KUBERNETES_IMPORT_ERROR = None
except ImportError:
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

REQUEST_TIMEOUT = 30


class Refused(Exception):
    """The API refused this identity: no wait makes that better."""


def targets(resources: List[Dict[str, Any]]) -> List[Tuple[str, str, str]]:
    """(kind, namespace, name) of each DaemonSet and Deployment, in order, once each."""
    found: List[Tuple[str, str, str]] = []
    for obj in resources:
        meta = obj.get("metadata") or {}
        target = (obj.get("kind") or "", meta.get("namespace") or "default", meta.get("name") or "")
        if target[0] in KINDS and target not in found:
            found.append(target)
    return found


def _read(call: Any, *args: Any, **kwargs: Any) -> Any:
    """One API call, its JSON as the API serves it; None for 404."""
    try:
        response = call(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        return json.loads(response.data)
    except ApiException as err:
        if err.status == 404:
            return None
        if err.status in (401, 403):
            raise Refused("%s %s" % (err.status, err.reason)) from err
        raise ReadError("%s %s" % (err.status, err.reason)) from err
    except (HTTPError, OSError, ValueError) as err:
        raise ReadError(str(err)) from err


def observe(api: Any, wanted: List[Tuple[str, str, str]]) -> List[Rollout]:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    seen = []
    for kind, namespace, name in wanted:
        read = apps.read_namespaced_daemon_set if kind == "DaemonSet" else apps.read_namespaced_deployment
        obj = _read(read, name, namespace)
        label = workload_name({"kind": kind, "metadata": {"namespace": namespace, "name": name}})
        pods: List[Dict[str, Any]] = []
        if obj is not None:
            selector = label_selector((obj.get("spec") or {}).get("selector"))
            found = _read(core.list_namespaced_pod, namespace, label_selector=selector)
            pods = (found or {}).get("items") or []
        seen.append(rollout(obj, label, pods))
    return seen


def shown(item: Rollout) -> Dict[str, Any]:
    return {"name": item.name, "done": item.done, "summary": item.summary}


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            resources=dict(type="list", elements="dict", required=True),
            kubeconfig=dict(type="path"),
            stall_timeout=dict(type="int", default=600),
            poll_interval=dict(type="float", default=2),
            stall_setting=dict(type="str", default="stall_timeout"),
        ),
        supports_check_mode=True,
    )
    wanted = targets(module.params["resources"])
    if module.check_mode or not wanted:
        module.exit_json(changed=False, rollouts=[], waited_s=0)
    if KUBERNETES_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)
    try:
        api = config.new_client_from_config(config_file=module.params["kubeconfig"])
    except Exception as err:  # the client raises its own ConfigException, or OSError for the file
        module.fail_json(msg="Cannot use the kubeconfig %s: %s" % (module.params["kubeconfig"] or "(default)", err))
    try:
        last, waited = follow(
            lambda: observe(api, wanted),
            stall_seconds=module.params["stall_timeout"],
            interval=module.params["poll_interval"],
            setting=module.params["stall_setting"],
        )
    except Stalled as err:
        module.fail_json(msg=str(err), rollouts=[shown(r) for r in err.rollouts])
    except Refused as err:
        module.fail_json(msg="The Kubernetes API refused to show the rollouts: %s" % err)
    module.exit_json(
        changed=False,
        rollouts=[shown(r) for r in last],
        waited_s=int(waited),
    )


if __name__ == "__main__":
    main()
