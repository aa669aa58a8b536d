#!/usr/bin/python
# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vgpu_verify
short_description: Check on a node that the libvgpu interposer enforces a GPU-memory quota
version_added: "0.1.0"
description:
  - Runs C(<prefix>/vgpu-memory-usage) under a quota, the way a container runs it, without Kubernetes,
    with C(VGPU_MEMORY_LIMIT) set to O(quota), C(LD_LIBRARY_PATH) set to O(prefix) and a fresh shared
    region in a temporary folder.
  - While the program holds its memory, runs C(nvidia-smi) under the same environment and reports
    the used and total memory it shows inside the quota.
  - When the program fits in the quota it must run, and nvidia-smi must show the quota as the total
    and at least the program's allocation as used (the reference check shows C(1200MiB / 3000MiB)).
    When it does not fit it must fail, and the module returns its error text.
  - The module fails when the quota is not enforced.
options:
  prefix:
    description: Folder where the interposer is installed.
    type: path
    default: /opt/vgpu
  quota:
    description:
      - The quota, in MiB as an integer or as a string with a binary suffix (C(3000MiB), C(3GiB)).
    type: raw
    default: 3000MiB
  use:
    description: Memory the test program allocates, in the same format as O(quota).
    type: raw
    default: 1200MiB
  expect:
    description:
      - V(run) expects the program to run, V(refuse) expects the quota to stop it, V(auto) expects
        V(run) when O(use) fits in O(quota) and V(refuse) otherwise.
    type: str
    choices: [auto, run, refuse]
    default: auto
  gpu_index:
    description: The GPU (nvidia-smi index) the check runs on.
    type: int
    default: 0
  hold_seconds:
    description: How long the program holds its allocation; nvidia-smi is read during that time.
    type: int
    default: 8
  timeout:
    description: Seconds after which the program is killed and the check fails.
    type: int
    default: 120
  app_args:
    description:
      - Arguments of C(vgpu-memory-usage); C({use_mib}) and C({hold_seconds}) are replaced by the numbers.
    type: list
    elements: str
    default: ["{use_mib}", "{hold_seconds}"]
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: In check mode the module returns the commands and environment it would use and runs nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
requirements:
  - An NVIDIA GPU with its driver loaded, C(nvidia-smi), and the interposer installed in O(prefix).
author:
  - vgpu.isolation maintainers (@vgpu-isolation)
"""

EXAMPLES = r"""
- name: A 1200 MiB program runs under a 3000 MiB quota, and nvidia-smi shows 1200MiB / 3000MiB
  vgpu.isolation.vgpu_verify:
    quota: 3000MiB
    use: 1200MiB
  register: within

- name: The same program is refused under a 1000 MiB quota
  vgpu.isolation.vgpu_verify:
    quota: 1000MiB
    use: 1200MiB
  register: over

- name: Show what nvidia-smi saw inside the quota
  ansible.builtin.debug:
    msg: "{{ within.memory }}; refused with: {{ over.error }}"
"""

RETURN = r"""
enforced:
  description: Whether the quota was enforced as expected.
  returned: always
  type: bool
  sample: true
expected:
  description: What the check expected, V(run) or V(refuse).
  returned: always
  type: str
  sample: run
quota_mib:
  description: The quota in MiB.
  returned: always
  type: int
  sample: 3000
use_mib:
  description: What the program allocates, in MiB.
  returned: always
  type: int
  sample: 1200
used_mib:
  description: Memory used as nvidia-smi showed it inside the quota, at its highest during the run.
  returned: when not in check mode
  type: int
  sample: 1200
total_mib:
  description: Total memory as nvidia-smi showed it inside the quota.
  returned: when not in check mode
  type: int
  sample: 3000
memory:
  description: The pair as nvidia-smi prints it in its table.
  returned: when not in check mode
  type: str
  sample: 1200MiB / 3000MiB
error:
  description: The program's error text when it was refused (the expected failing case), else null.
  returned: when not in check mode
  type: str
  sample: "cuMemAlloc(1200 MiB) failed: CUDA_ERROR_OUT_OF_MEMORY"
problems:
  description: Why the quota is not considered enforced; empty when it is.
  returned: when not in check mode
  type: list
  elements: str
app_rc:
  description: Exit code of vgpu-memory-usage; null when it was killed at the timeout.
  returned: when not in check mode
  type: int
app_stdout:
  description: Standard output of vgpu-memory-usage.
  returned: when not in check mode
  type: str
app_stderr:
  description: Standard error of vgpu-memory-usage.
  returned: when not in check mode
  type: str
commands:
  description: The commands the check runs (or would run, in check mode).
  returned: always
  type: list
  elements: list
  sample:
    - ["/opt/vgpu/vgpu-memory-usage", "1200", "8"]
    - ["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits", "-i", "0"]
environment:
  description: The quota environment both commands run with (the temporary region folder is named at run time).
  returned: always
  type: dict
  sample: {"VGPU_MEMORY_LIMIT": "3000MiB", "LD_LIBRARY_PATH": "/opt/vgpu", "CUDA_VISIBLE_DEVICES": "0"}
"""

import os
import shutil
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vgpu.isolation.plugins.module_utils.gpu_info import parse_smi_memory
from ansible_collections.vgpu.isolation.plugins.module_utils.gpu_verify import (
    app_command,
    expected_outcome,
    judge,
    quota_env,
)
from ansible_collections.vgpu.isolation.plugins.module_utils.memory_size import parse_mib

POLL_SECONDS = 0.5


def smi_command(smi: str, gpu_index: int) -> List[str]:
    return [smi, "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits", "-i", str(gpu_index)]


def read_sample(module: AnsibleModule, command: List[str], env: Dict[str, str]) -> Optional[Tuple[int, int]]:
    rc, out, _err = module.run_command(command, environ_update=env)
    if rc != 0:
        return None
    try:
        return parse_smi_memory(out)
    except ValueError:
        return None


def run_check(
    module: AnsibleModule, app: List[str], smi: List[str], env: Dict[str, str], use_mib: int
) -> Dict[str, Any]:
    """Run the program in a thread, sample nvidia-smi while it holds its memory, and wait for it."""
    timeout = module.params["timeout"]
    timeout_bin = module.get_bin_path("timeout")
    # coreutils timeout ends a hung program (exit 124, or 137 after the KILL); run_command has no timeout.
    command = [timeout_bin, "--kill-after=5", str(timeout), *app] if timeout_bin else app
    outcome: Dict[str, Any] = {}

    def run_app() -> None:
        rc, out, err = module.run_command(command, environ_update=env)
        outcome.update(app_rc=None if timeout_bin and rc in (124, 137) else rc, app_stdout=out, app_stderr=err)

    worker = threading.Thread(target=run_app, daemon=True)
    worker.start()
    samples: List[Tuple[int, int]] = []
    deadline = time.monotonic() + timeout
    while worker.is_alive() and time.monotonic() < deadline:
        sample = read_sample(module, smi, env)
        if sample is not None:
            samples.append(sample)
            if sample[0] >= use_mib:
                break  # the allocation is visible: that is the reading we want
        time.sleep(POLL_SECONDS)
    worker.join(max(1.0, deadline - time.monotonic()) + 10)
    if worker.is_alive():
        module.fail_json(msg=f"{app[0]} did not end within {timeout} s and could not be stopped", commands=[app, smi])
    if not samples:
        # Read once after the program ended so a refused run still shows the total inside the quota.
        sample = read_sample(module, smi, env)
        if sample is not None:
            samples.append(sample)
    outcome["samples"] = samples
    return outcome


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "prefix": {"type": "path", "default": "/opt/vgpu"},
            "quota": {"type": "raw", "default": "3000MiB"},
            "use": {"type": "raw", "default": "1200MiB"},
            "expect": {"type": "str", "choices": ["auto", "run", "refuse"], "default": "auto"},
            "gpu_index": {"type": "int", "default": 0},
            "hold_seconds": {"type": "int", "default": 8},
            "timeout": {"type": "int", "default": 120},
            "app_args": {"type": "list", "elements": "str", "default": ["{use_mib}", "{hold_seconds}"]},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        quota_mib = parse_mib(params["quota"], "quota")
        use_mib = parse_mib(params["use"], "use")
    except ValueError as error:
        module.fail_json(msg=str(error))
    for name in ("gpu_index", "hold_seconds", "timeout"):
        if params[name] < 0:
            module.fail_json(msg=f"{name} must not be negative, got {params[name]}")
    expected = expected_outcome(params["expect"], quota_mib, use_mib)
    prefix = params["prefix"]
    app = app_command(prefix, params["app_args"], use_mib, params["hold_seconds"])
    smi_path = module.get_bin_path("nvidia-smi") or "nvidia-smi"
    smi = smi_command(smi_path, params["gpu_index"])
    shown_env = quota_env(prefix, quota_mib, "<temporary folder>", params["gpu_index"])
    result: Dict[str, Any] = {
        "changed": False,
        "expected": expected,
        "quota_mib": quota_mib,
        "use_mib": use_mib,
        "commands": [app, smi],
        "environment": shown_env,
    }
    if module.check_mode:
        result["enforced"] = False
        result["msg"] = "check mode: nothing was run"
        module.exit_json(**result)

    if not os.access(app[0], os.X_OK):
        hint = f"install the interposer into {prefix} (role vgpu.isolation.vgpu_interposer)"
        module.fail_json(msg=f"{app[0]} is missing or not executable: {hint}", **result)
    if not module.get_bin_path("nvidia-smi"):
        module.fail_json(msg="nvidia-smi is not on the PATH: the NVIDIA driver is not installed", **result)

    region_dir = tempfile.mkdtemp(prefix="vgpu-verify-")
    try:
        env = quota_env(prefix, quota_mib, region_dir, params["gpu_index"], base=dict(os.environ))
        outcome = run_check(module, app, smi, env, use_mib)
    finally:
        shutil.rmtree(region_dir, ignore_errors=True)
    verdict = judge(
        expected=expected,
        quota_mib=quota_mib,
        use_mib=use_mib,
        app_rc=outcome["app_rc"],
        # Both streams: the app names its CUDA error on standard output, and another library may
        # write to standard error first.
        app_error="\n".join(text.strip() for text in (outcome["app_stdout"], outcome["app_stderr"]) if text.strip()),
        samples=outcome["samples"],
    )
    result.update(verdict)
    result.update({key: outcome[key] for key in ("app_rc", "app_stdout", "app_stderr")})
    if not verdict["enforced"]:
        module.fail_json(msg="the quota was not enforced: " + "; ".join(verdict["problems"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
