"""The verdict of the quota check, from the numbers nvidia-smi showed inside the quota."""

from typing import Any

import pytest
from ansible_collections.vgpu.isolation.plugins.module_utils import gpu_verify as gv


def judge(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "expected": "run",
        "quota_mib": 3000,
        "use_mib": 1200,
        "app_rc": 0,
        "app_error": "",
        "samples": [(0, 3000), (1200, 3000)],
    }
    args.update(overrides)
    return gv.judge(**args)


def test_the_reference_run_is_enforced_and_shows_1200_of_3000():
    verdict = judge()
    assert verdict["enforced"]
    assert verdict["memory"] == "1200MiB / 3000MiB"
    assert verdict["used_mib"] == 1200
    assert verdict["total_mib"] == 3000
    assert verdict["error"] is None


def test_the_reference_refusal_is_enforced_and_returns_the_error():
    verdict = judge(
        expected="refuse",
        quota_mib=1000,
        app_rc=1,
        app_error="cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY\n",
        samples=[(0, 1000)],
    )
    assert verdict["enforced"]
    assert verdict["error"] == "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY"


def test_an_app_that_allocates_past_its_quota_means_not_enforced():
    verdict = judge(expected="refuse", quota_mib=1000, app_rc=0, samples=[(1200, 1000)])
    assert not verdict["enforced"]
    assert "not enforced" in verdict["problems"][0]


def test_nvidia_smi_showing_the_physical_gpu_means_not_virtualized():
    verdict = judge(samples=[(1200, 143771)])
    assert not verdict["enforced"]
    assert "total of 143771 MiB" in verdict["problems"][0]


def test_use_not_visible_in_nvidia_smi_is_a_problem():
    verdict = judge(samples=[(0, 3000)])
    assert not verdict["enforced"]
    assert "never showed" in verdict["problems"][0]


def test_an_app_failing_within_its_quota_is_a_problem():
    verdict = judge(app_rc=2)
    assert not verdict["enforced"]
    assert "exit code 2" in verdict["problems"][0]


def test_a_hung_app_is_a_problem():
    assert "did not finish" in judge(app_rc=None)["problems"][0]


def test_without_any_nvidia_smi_reading_a_run_is_not_enforced():
    verdict = judge(samples=[])
    assert not verdict["enforced"]
    assert verdict["memory"] is None


@pytest.mark.parametrize(
    ("expect", "use", "outcome"), [("auto", 1200, "run"), ("auto", 3001, "refuse"), ("run", 5000, "run")]
)
def test_expected_outcome(expect, use, outcome):
    assert gv.expected_outcome(expect, 3000, use) == outcome


def test_the_quota_env_is_the_containers_env_without_a_stale_config_file():
    env = gv.quota_env(
        "/opt/vgpu",
        3000,
        "/var/lib/vgpu/containers/a",
        1,
        base={"LD_LIBRARY_PATH": "/usr/lib", "VGPU_CONFIG_FILE": "/x", "LD_PRELOAD": "/usr/lib/libjemalloc.so.2"},
    )
    assert env["VGPU_MEMORY_LIMIT"] == "3000MiB"
    assert env["LD_LIBRARY_PATH"] == "/opt/vgpu:/usr/lib"
    assert env["LD_PRELOAD"] == "/opt/vgpu/libvgpu.so:/usr/lib/libjemalloc.so.2"  # as the container contract
    assert env["VGPU_REGION_DIR"] == "/var/lib/vgpu/containers/a"
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert "VGPU_CONFIG_FILE" not in env


def test_app_arguments_are_filled_in():
    assert gv.app_command("/opt/vgpu/", ["--mib", "{use_mib}", "--hold", "{hold_seconds}"], 1200, 8) == [
        "/opt/vgpu/vgpu-memory-usage",
        "--mib",
        "1200",
        "--hold",
        "8",
    ]
