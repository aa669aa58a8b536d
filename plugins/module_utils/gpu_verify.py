# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The verdict of a quota check: did the interposer enforce the quota the way a user would see it.

Pure functions, used by the vgpu_verify module and unit-tested without a GPU.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

EXPECTATIONS = ("auto", "run", "refuse")
# The interposer switches the check turns on, by their environment names in libvgpu's switches.def
# (tests/unit/test_switches.py checks them against it; a module runs on the node without that file).
ENFORCING_SWITCHES = {"GPU_VIRTUAL_MEMORY": "1", "LIMIT": "1"}


def expected_outcome(expect: str, quota_mib: int, use_mib: int) -> str:
    """``run`` when the app fits in the quota, ``refuse`` when it does not (or as the caller says)."""
    if expect not in EXPECTATIONS:
        raise ValueError(f"expect {expect!r} is not one of {', '.join(EXPECTATIONS)}")
    if expect != "auto":
        return expect
    return "run" if use_mib <= quota_mib else "refuse"


def quota_env(
    prefix: str, quota_mib: int, region_dir: str, gpu_index: int, base: Optional[Dict[str, str]] = None
) -> Dict[str, str]:
    """The environment a container gets from the device plugin, reduced to what the check needs."""
    env = dict(base or {})
    library_path = env.get("LD_LIBRARY_PATH", "")
    preload = env.get("LD_PRELOAD", "")
    env.update(
        {
            "VGPU_MEMORY_LIMIT": f"{quota_mib}MiB",
            "LD_LIBRARY_PATH": prefix + (":" + library_path if library_path else ""),
            # As the container contract: libvgpu preloaded too, for programs that open the driver by path.
            "LD_PRELOAD": prefix.rstrip("/") + "/libvgpu.so" + (":" + preload if preload else ""),
            "VGPU_REGION_DIR": region_dir,
            "CUDA_VISIBLE_DEVICES": str(gpu_index),
            **ENFORCING_SWITCHES,
        }
    )
    env.pop("VGPU_CONFIG_FILE", None)  # the env is the configuration here, not a stale quota file
    return env


def app_command(prefix: str, args: List[str], use_mib: int, hold_seconds: int) -> List[str]:
    """``<prefix>/vgpu-memory-usage`` with its arguments; ``{use_mib}`` and ``{hold_seconds}`` are filled in."""
    filled = [arg.replace("{use_mib}", str(use_mib)).replace("{hold_seconds}", str(hold_seconds)) for arg in args]
    return [f"{prefix.rstrip('/')}/vgpu-memory-usage", *filled]


def best_sample(samples: List[Tuple[int, int]]) -> Tuple[Optional[int], Optional[int]]:
    """The sample with the most memory used: the moment the app held its allocation."""
    if not samples:
        return None, None
    used, total = max(samples, key=lambda sample: sample[0])
    return used, total


def judge(
    *,
    expected: str,
    quota_mib: int,
    use_mib: int,
    app_rc: Optional[int],
    app_error: str,
    samples: List[Tuple[int, int]],
) -> Dict[str, Any]:
    """Whether the quota held, with the numbers nvidia-smi showed inside the quota.

    ``run``: the app exits 0, nvidia-smi shows total = quota and at least the app's allocation used,
    never more than the quota. ``refuse``: the app fails; its error text is returned.
    """
    used, total = best_sample(samples)
    problems = []
    if app_rc is None:
        problems.append("vgpu-memory-usage did not finish in time")
    if expected == "run":
        if app_rc not in (0, None):
            problems.append(
                f"vgpu-memory-usage failed (exit code {app_rc}) though {use_mib} MiB fits in {quota_mib} MiB"
            )
        if total is None:
            problems.append("nvidia-smi gave no memory reading inside the quota")
        else:
            if total != quota_mib:
                problems.append(f"nvidia-smi shows a total of {total} MiB inside the quota, expected {quota_mib} MiB")
            if used is None or used < use_mib:
                problems.append(f"nvidia-smi never showed the app's {use_mib} MiB in use (at most {used} MiB)")
            elif used > quota_mib:
                problems.append(f"nvidia-smi shows {used} MiB in use, above the {quota_mib} MiB quota")
    elif app_rc == 0:
        problems.append(
            f"vgpu-memory-usage got {use_mib} MiB under a {quota_mib} MiB quota: the quota was not enforced"
        )
    return {
        "enforced": not problems,
        "expected": expected,
        "used_mib": used,
        "total_mib": total,
        "memory": f"{used}MiB / {total}MiB" if used is not None and total is not None else None,
        "error": app_error.strip() if expected == "refuse" and app_rc not in (0, None) else None,
        "problems": problems,
    }
