"""The settings check of roles/vgpu (issue 14 item 2): names, types, versions, memory sizes, rules.

The spec is roles/vgpu's own argument spec, read as the role reads it.
"""

from pathlib import Path

import pytest
import yaml
from ansible_collections.vgpu.isolation.plugins.filter.settings import (
    CLUSTER_WIDE,
    PER_NODE,
    FilterModule,
    cluster_problems,
    settings_problems,
)

ROOT = Path(__file__).resolve().parents[4]
SPEC = yaml.safe_load((ROOT / "roles/vgpu/meta/argument_specs.yml").read_text())["argument_specs"]["settings"][
    "options"
]
DEFAULTS = yaml.safe_load((ROOT / "roles/vgpu/defaults/main.yml").read_text())
PREFIXES = yaml.safe_load((ROOT / "roles/vgpu/vars/main.yml").read_text())["vgpu_owned_prefixes"]


def problems(given=None, **overrides):
    settings = {**DEFAULTS, **overrides}
    return settings_problems(settings, SPEC, list(given or overrides), PREFIXES)


def test_every_setting_has_a_default_and_a_spec():
    assert set(DEFAULTS) == set(SPEC)


def test_the_documented_defaults_are_valid():
    assert problems() == []


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("vgpu_kubernetes_flavor", "vgpu_kubernetes_flavour"),
        ("vgpu_mps_enable", "vgpu_mps_enabled"),
        ("vgpu_memory_unit", "vgpu_memory_unit_mib"),
    ],
)
def test_a_misspelt_setting_is_refused_with_a_did_you_mean(typo, meant):
    assert problems(given=[typo]) == [
        f"{typo}: not a vgpu.isolation setting; did you mean {meant}? the settings are listed in docs/variables.md"
    ]


def test_role_and_playbook_variables_are_no_typos():
    assert problems(given=["vgpu_stack_extender_port", "vgpu_interposer_prefix", "vgpu_verify_quota"]) == []


def test_a_name_far_from_every_setting_gets_no_guess():
    (problem,) = problems(given=["vgpu_colour"])
    assert "did you mean" not in problem and problem.startswith("vgpu_colour: not a vgpu.isolation setting")


def test_a_version_that_yaml_read_as_a_number_is_refused_with_the_advice_to_quote_it():
    # `vgpu_kubernetes_version: 1.30` in group_vars arrives as the float 1.3.
    (problem,) = problems(vgpu_kubernetes_version=1.3)
    assert problem.startswith("vgpu_kubernetes_version: 1.3 is a number, not a string")
    assert "quote it" in problem


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("vgpu_kubernetes_version", "1.30"),
        ("vgpu_kubernetes_version", "v1.31.4"),
        ("vgpu_k3s_version", "1.31.4"),
        ("vgpu_cuda_version", "11"),
        ("vgpu_driver_branch", "r470"),
    ],
)
def test_a_version_of_the_wrong_form_is_refused(name, value):
    overrides = {name: value}
    found = problems(**overrides)
    assert any(p.startswith(f"{name}: {value!r} is not a version of the form") for p in found), found


def test_driver_version_and_branch_must_agree():
    assert problems(vgpu_driver_version="535.274.02") == [
        "vgpu_driver_version: '535.274.02' is not in vgpu_driver_branch '470'; set both to the same branch"
    ]
    assert problems(vgpu_driver_version="535.274.02", vgpu_driver_branch="535", vgpu_cuda_version="12.2") == []


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"vgpu_mps_enabled": "maybe"}, "vgpu_mps_enabled: 'maybe' is not a boolean; expected true or false"),
        (
            {"vgpu_mps_active_thread_percentage": "half"},
            "vgpu_mps_active_thread_percentage: 'half' is not a whole number",
        ),
        (
            {"vgpu_kubernetes_flavour": "microk8s"},
            "vgpu_kubernetes_flavour: 'microk8s' is not one of k3s, kubeadm, none",
        ),
        ({"vgpu_gpu_memory_mib": "12GiB"}, "vgpu_gpu_memory_mib: '12GiB' is not a list; expected a YAML list"),
    ],
)
def test_a_type_error_is_one_short_line(overrides, expected):
    assert problems(**overrides) == [expected]


def test_memory_settings_take_suffixes_as_docs_variables_md_says():
    assert problems(vgpu_reserved_memory_mib="512MiB", vgpu_memory_unit_mib="256Mi", vgpu_sample_app_quota="3Gi") == []


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"vgpu_resource_prefix": "Vgpu_IO"}, "vgpu_resource_prefix: 'Vgpu_IO'"),
        ({"vgpu_memory_unit_mib": 0}, "vgpu_memory_unit_mib: 0 must be greater than 0 MiB"),
        ({"vgpu_memory_unit_mib": "100MB"}, "vgpu_memory_unit_mib: '100MB' has an unknown unit"),
        ({"vgpu_reserved_memory_mib": -1}, "vgpu_reserved_memory_mib: -1 must be at least 0 MiB"),
        ({"vgpu_mps_active_thread_percentage": 101}, "vgpu_mps_active_thread_percentage: 101 must be from 1 to 100"),
        ({"vgpu_compute_shares_total": 0}, "vgpu_compute_shares_total: 0 must be from 1 to 1000"),
        ({"vgpu_sample_app_quota": "3000MB"}, "vgpu_sample_app_quota: '3000MB'"),
        ({"vgpu_sample_app_quota": "2950MiB"}, "2950 MiB is not a multiple of vgpu_memory_unit_mib (100 MiB)"),
        ({"vgpu_sample_app_use": "4GiB"}, "vgpu_sample_app_use: 4096 MiB is more than vgpu_sample_app_quota"),
        ({"vgpu_gpu_memory_mib": [12288]}, "vgpu_memory_unit_mib: 100 MiB does not divide GPU 0's 12288 MiB"),
        ({"vgpu_gpu_memory_mib": ["12GB"]}, "vgpu_gpu_memory_mib[0]: '12GB'"),
        ({"vgpu_reserved_memory_mib": 20000, "vgpu_gpu_memory_mib": [12000]}, "leaves nothing of GPU 0"),
        ({"vgpu_enforcement": "kill"}, "vgpu_enforcement: 'kill' is not one of evict, report"),
        ({"vgpu_enforcement_grace_seconds": -1}, "vgpu_enforcement_grace_seconds: -1 must be from 0 to 86400"),
        ({"vgpu_enforcement_context_allowance_mib": "512MB"}, "vgpu_enforcement_context_allowance_mib: '512MB'"),
    ],
)
def test_each_bad_setting_is_reported(overrides, fragment):
    found = problems(**overrides)
    assert any(fragment in p for p in found), found


def test_a_unit_that_divides_the_stated_gpu_memory_is_accepted():
    assert problems(vgpu_memory_unit_mib=64, vgpu_sample_app_quota="3GiB", vgpu_gpu_memory_mib=["12GiB"]) == []


def test_whole_numbers_given_on_the_command_line_are_accepted():
    # `ansible-playbook -e vgpu_memory_unit_mib=50` passes the string "50".
    assert problems(vgpu_memory_unit_mib="50", vgpu_reserved_memory_mib="0", vgpu_mps_enabled="true") == []


def test_every_problem_is_reported_at_once():
    assert len(problems(vgpu_kubernetes_flavour="x", vgpu_sample_app_quota=-1, given=["vgpu_mps_enable"])) == 3


def test_the_plugin_exposes_the_filter():
    assert set(FilterModule().filters()) == {"settings_problems", "cluster_problems"}


# --- cluster-wide settings (issue 14 item 1) ---------------------------------------------------
def test_a_cluster_wide_setting_that_differs_between_hosts_is_refused_naming_the_hosts():
    """The example inventory's bug: the unit set for the GPU nodes only, the control plane on 100."""
    values = {
        "edge-cp-1": {},
        "edge-gpu-1": {"vgpu_memory_unit_mib": 256, "vgpu_reserved_memory_mib": 512},
        "edge-gpu-2": {"vgpu_memory_unit_mib": "256MiB", "vgpu_reserved_memory_mib": "512Mi"},
    }
    assert cluster_problems(values, SPEC) == [
        "vgpu_memory_unit_mib differs between hosts (100 MiB on edge-cp-1; 256 MiB on edge-gpu-1, edge-gpu-2): "
        "it is cluster-wide (one ConfigMap for every node, and every pod's request counts in it); "
        "set it once for all of them, e.g. in group_vars/all",
        "vgpu_reserved_memory_mib differs between hosts (0 MiB on edge-cp-1; 512 MiB on edge-gpu-1, edge-gpu-2): "
        "it is cluster-wide (one ConfigMap for every node: the device plugins advertise what it leaves); "
        "set it once for all of them, e.g. in group_vars/all",
    ]


def test_per_node_settings_may_differ_and_equal_spellings_agree():
    values = {
        "a": {"vgpu_mps_enabled": True, "vgpu_driver_branch": "535", "vgpu_memory_unit_mib": "1GiB"},
        "b": {"vgpu_mps_enabled": False, "vgpu_driver_branch": "470", "vgpu_memory_unit_mib": 1024},
        "c": {"vgpu_gpu_memory_mib": ["24GiB"], "vgpu_memory_unit_mib": "1Gi", "vgpu_nvidia_runtime_default": "yes"},
    }
    assert cluster_problems(values, SPEC) == []


def test_every_setting_is_either_cluster_wide_or_per_node():
    assert set(CLUSTER_WIDE) | set(PER_NODE) == set(SPEC)
    assert not set(CLUSTER_WIDE) & set(PER_NODE)


def test_the_filter_plugin_exposes_the_cluster_check():
    assert FilterModule().filters()["cluster_problems"] is cluster_problems


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"vgpu_scheduling": "dra", "vgpu_kubernetes_flavour": "k3s", "vgpu_k3s_version": "v1.31.4+k3s1"},
            "vgpu_scheduling: 'dra' needs Kubernetes 1.36 or later (GPU memory as a DRA consumable capacity, "
            "beta and on by default from 1.36); vgpu_k3s_version is 'v1.31.4+k3s1'",
        ),
        (
            {"vgpu_scheduling": "dra", "vgpu_kubernetes_flavour": "kubeadm", "vgpu_kubernetes_version": "1.35.2"},
            "vgpu_scheduling: 'dra' needs Kubernetes 1.36 or later (GPU memory as a DRA consumable capacity, "
            "beta and on by default from 1.36); vgpu_kubernetes_version is '1.35.2'",
        ),
    ],
)
def test_dra_scheduling_needs_kubernetes_1_36(overrides, expected):
    assert problems(**overrides) == [expected]


@pytest.mark.parametrize(
    "overrides",
    [
        {"vgpu_scheduling": "dra", "vgpu_kubernetes_flavour": "kubeadm", "vgpu_kubernetes_version": "1.36.3"},
        {"vgpu_scheduling": "dra", "vgpu_kubernetes_flavour": "k3s", "vgpu_k3s_version": "v1.36.1+k3s1"},
        {"vgpu_scheduling": "dra", "vgpu_kubernetes_flavour": "none"},
        {"vgpu_scheduling": "extender", "vgpu_kubernetes_flavour": "k3s", "vgpu_k3s_version": "v1.31.4+k3s1"},
    ],
)
def test_dra_scheduling_on_a_recent_enough_cluster_is_accepted(overrides):
    assert problems(**overrides) == []


def test_an_unknown_scheduling_path_is_refused():
    assert problems(vgpu_scheduling="hami") == ["vgpu_scheduling: 'hami' is not one of extender, dra"]
