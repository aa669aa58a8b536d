"""The settings check of roles/vgpu (issue 14 item 2, issue 25): names, types, versions, memory
sizes, rules, one report.

The schema is the collection's own (lookup vgpu.isolation.settings_schema), read as the role reads it.
"""

from pathlib import Path

import pytest
from ansible_collections.vgpu.isolation.plugins.filter.settings import (
    CLUSTER_WIDE,
    PER_NODE,
    FilterModule,
    cluster_problems,
    deprecations,
    known_names,
    quota_problems,
    server_version_problems,
    settings_problems,
    settings_report,
)
from ansible_collections.vgpu.isolation.plugins.lookup.settings_schema import load
from ansible_collections.vgpu.isolation.plugins.module_utils.contract import OLD_NAMES, RETIRED, SETTINGS

ROOT = Path(__file__).resolve().parents[4]
SCHEMA = load(str(ROOT))
SPEC = SCHEMA["roles"]["vgpu"]["entry_points"]["settings"]
# Each setting's literal default, as the contract states it (roles/vgpu's defaults file wraps most of
# them in a fallback to the setting's old name).
DEFAULTS = {name: entry["default"] for name, entry in SETTINGS.items() if entry["default"] is not None}


def problems(given=None, **overrides):
    settings = {**DEFAULTS, **overrides}
    return settings_problems(settings, SCHEMA, list(given or overrides))


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
        f"{typo}: not a variable of vgpu.isolation; did you mean {meant}? the settings are listed in "
        "docs/variables.md, each role's variables in its meta/argument_specs.yml"
    ]


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        # Issue 25 item 6: both passed silently (the check left every vgpu_stack_* name to its role).
        ("vgpu_stack_monitoring_label", "vgpu_stack_monitoring_labels"),
        ("vpgu_memory_unit_mib", "vgpu_memory_unit_mib"),
        ("nvidia_driver_drain_timout", "nvidia_driver_drain_timeout"),
        ("kubeadm_pod_subnett", "kubeadm_pod_subnet"),
    ],
)
def test_a_misspelt_role_variable_is_refused_with_the_nearest_known_name(typo, meant):
    flavour = {"vgpu_kubernetes_flavour": "kubeadm"} if typo.startswith("kubeadm_") else {}
    (problem,) = problems(given=[typo, *flavour], **flavour)
    assert problem.startswith(f"{typo}: not a variable of vgpu.isolation; did you mean {meant}?"), problem


def test_role_and_playbook_variables_and_the_site_s_own_are_no_typos():
    given = ["vgpu_extender_port", "vgpu_interposer_releases_dir", "vgpu_uninstall_cluster", "vgpu_stack_node_roles"]
    given += ["nvidia_driver_drain_timeout", "preflight_check_network", "ansible_host", "site_owner", "ntp_servers"]
    assert problems(given=given) == []


@pytest.mark.parametrize(
    ("old", "new", "value"),
    [
        ("vgpu_stack_unit_mib", "vgpu_memory_unit_mib", 200),
        ("vgpu_stack_resource_prefix", "vgpu_resource_prefix", "gpu.example.org"),
        ("vgpu_stack_monitor_port", "vgpu_monitor_port", 19395),
        ("vgpu_stack_extender_port", "vgpu_extender_port", 32767),
        ("vgpu_stack_tls_dir", "vgpu_extender_tls_dir", "/srv/tls"),
        ("vgpu_stack_manage_scheduler", "vgpu_scheduler_manage", False),
    ],
)
def test_an_old_name_is_read_for_one_release_with_a_deprecation_naming_the_new_one(old, new, value):
    """Issue 39: the vgpu_stack_* aliases went, and kube-scheduler's wiring moved to roles/vgpu (issue
    26); an inventory of the previous release still works, the new name taking the old one's value
    (roles/vgpu's defaults read it), and the check names what to write instead."""
    assert problems(given=[old], **{old: value, new: value}) == []
    (line,) = deprecations([old, "site_owner"])
    assert line.startswith(f"{old}: deprecated, renamed {new}: set {new} instead;")
    assert "the next refuses it" in line


def test_an_old_name_and_its_new_one_set_to_different_values_are_refused_naming_both():
    found = problems(
        given=["vgpu_stack_unit_mib", "vgpu_memory_unit_mib"], vgpu_stack_unit_mib=200, vgpu_memory_unit_mib=100
    )
    assert found == [
        "vgpu_stack_unit_mib and vgpu_memory_unit_mib are one setting (vgpu_stack_unit_mib is its old name) set "
        "to different values, 200 MiB and 100 MiB; remove vgpu_stack_unit_mib"
    ]


def test_an_old_name_and_its_new_one_that_agree_are_no_problem():
    given = ["vgpu_stack_unit_mib", "vgpu_memory_unit_mib", "vgpu_stack_mps_enabled", "vgpu_mps_enabled"]
    settings = {"vgpu_stack_unit_mib": "200MiB", "vgpu_memory_unit_mib": 200}
    assert problems(given=given, vgpu_stack_mps_enabled="yes", vgpu_mps_enabled=True, **settings) == []


def test_a_retired_name_gets_a_deprecation_and_no_problem():
    assert problems(given=["vgpu_stack_version"]) == []
    assert deprecations(["vgpu_stack_version"]) == [
        f"vgpu_stack_version: deprecated, no longer read: {RETIRED['vgpu_stack_version']}; remove it"
    ]


def test_every_old_name_is_none_of_the_collection_s_variables():
    """A role variable of an old name would be taken for the inventory's by the new name's default."""
    known = known_names(load(str(ROOT)))
    assert sorted(old for old in OLD_NAMES if old in known) == []
    assert sorted(new for new in OLD_NAMES.values() if new not in known) == []


def test_the_cluster_check_takes_an_old_name_s_value_for_its_new_one():
    """One host of the previous release's inventory (the old name), one of this release's (the new)."""
    agree = {"cp": {"vgpu_stack_unit_mib": 200}, "gpu-1": {"vgpu_memory_unit_mib": "200MiB"}}
    assert cluster_problems(agree, SPEC) == []
    differ = {"cp": {"vgpu_stack_unit_mib": 200}, "gpu-1": {}}
    (problem,) = cluster_problems(differ, SPEC)
    assert problem.startswith("vgpu_memory_unit_mib differs between hosts (200 MiB on cp; 100 MiB on gpu-1)")


def test_a_name_with_a_role_prefix_far_from_every_variable_gets_no_guess():
    (problem,) = problems(given=["vgpu_colour"])
    assert "did you mean" not in problem and problem.startswith("vgpu_colour: not a variable of vgpu.isolation")


@pytest.mark.parametrize(
    ("flavour", "name", "owner"),
    [("k3s", "kubeadm_pod_subnet", "kubeadm"), ("kubeadm", "k3s_token", "k3s"), ("none", "k3s_token", "k3s")],
)
def test_variables_of_the_other_flavour_are_refused(flavour, name, owner):
    """Issue 25 item 6: K3s chosen with kubeadm_* settings passed silently, and nothing read them."""
    assert problems(given=[name], vgpu_kubernetes_flavour=flavour) == [
        f"{name}: a variable of the {owner} role, but vgpu_kubernetes_flavour is '{flavour}', so nothing reads it; "
        f"remove it, or set vgpu_kubernetes_flavour: {owner}"
    ]


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
        ({"vgpu_resource_prefix": "gpus.kubernetes.io"}, "'gpus.kubernetes.io' is in the kubernetes.io domain"),
        ({"vgpu_memory_unit_mib": 0}, "vgpu_memory_unit_mib: 0 must be greater than 0 MiB"),
        ({"vgpu_memory_unit_mib": "100MB"}, "vgpu_memory_unit_mib: '100MB' has an unknown unit"),
        ({"vgpu_reserved_memory_mib": -1}, "vgpu_reserved_memory_mib: -1 must be at least 0 MiB"),
        ({"vgpu_mps_active_thread_percentage": 101}, "vgpu_mps_active_thread_percentage: 101 must be from 1 to 100"),
        ({"vgpu_compute_shares_total": 0}, "vgpu_compute_shares_total: 0 must be from 1 to 1000"),
        ({"vgpu_sample_app_quota": "3000MB"}, "vgpu_sample_app_quota: '3000MB'"),
        ({"vgpu_sample_app_quota": "2950MiB"}, "2950 MiB is not a multiple of vgpu_memory_unit_mib (100 MiB)"),
        ({"vgpu_sample_app_use": "4GiB"}, "vgpu_sample_app_use: 4096 MiB is more than vgpu_sample_app_quota"),
        ({"vgpu_gpu_memory_mib": ["12GB"]}, "vgpu_gpu_memory_mib[0]: '12GB'"),
        ({"vgpu_reserved_memory_mib": 12000, "vgpu_gpu_memory_mib": [12000]}, "leaves less than one unit"),
        ({"vgpu_memory_unit_mib": "16GiB", "vgpu_gpu_memory_mib": [15360]}, "GPU 0's 15360 MiB"),
        ({"vgpu_enforcement": "kill"}, "vgpu_enforcement: 'kill' is not one of evict, report"),
        ({"vgpu_enforcement_grace_seconds": -1}, "vgpu_enforcement_grace_seconds: -1 must be from 0 to 86400"),
        (
            {"vgpu_enforcement_termination_grace_seconds": 31536000},
            "vgpu_enforcement_termination_grace_seconds: 31536000 must be from 0 to 3600",
        ),
        ({"vgpu_enforcement_context_allowance_mib": "512MB"}, "vgpu_enforcement_context_allowance_mib: '512MB'"),
        ({"vgpu_enforcement_unattributed_tolerance_mib": "1GB"}, "vgpu_enforcement_unattributed_tolerance_mib: '1GB'"),
        (
            {"vgpu_mps_set_exclusive_process": True},
            "vgpu_mps_set_exclusive_process: True must be false: every GPU allocation has its own MPS server",
        ),
    ],
)
def test_each_bad_setting_is_reported(overrides, fragment):
    found = problems(**overrides)
    assert any(fragment in p for p in found), found


# The memory nvidia-smi shows (memory.total) for the GPUs sites run: none a round number of units.
REAL_GPUS = {
    "T4": 15360,
    "A10": 23028,
    "L4": 23034,
    "A100 40GB": 40960,
    "A100 80GB": 81920,
    "H100 80GB": 81559,
    "H200": 143771,
}


@pytest.mark.parametrize("unit", [100, 256, 512, 1024])
@pytest.mark.parametrize("model", REAL_GPUS)
def test_real_gpu_sizes_are_accepted_with_any_unit(model, unit):
    """Issue 25 item 3: an A10 (23028 MiB) with unit 256 was refused ("choose a unit that divides
    22516"); a GPU's memory rounds down to whole units now, the remainder unused."""
    quota = {"vgpu_sample_app_quota": unit * 8, "vgpu_sample_app_use": unit * 4}
    assert (
        problems(
            vgpu_memory_unit_mib=unit, vgpu_reserved_memory_mib=512, vgpu_gpu_memory_mib=[REAL_GPUS[model]], **quota
        )
        == []
    )


def test_mixed_gpu_models_in_one_node_work_with_one_unit():
    assert (
        problems(
            vgpu_memory_unit_mib="256MiB", vgpu_sample_app_quota="3GiB", vgpu_gpu_memory_mib=list(REAL_GPUS.values())
        )
        == []
    )


def test_whole_numbers_given_on_the_command_line_are_accepted():
    # `ansible-playbook -e vgpu_memory_unit_mib=50` passes the string "50".
    assert problems(vgpu_memory_unit_mib="50", vgpu_reserved_memory_mib="0", vgpu_mps_enabled="true") == []


def test_every_problem_is_reported_at_once():
    assert len(problems(vgpu_kubernetes_flavour="x", vgpu_sample_app_quota=-1, given=["vgpu_mps_enable"])) == 3


def test_the_plugin_exposes_the_filters():
    assert set(FilterModule().filters()) == {
        "settings_problems",
        "cluster_problems",
        "settings_report",
        "quota_problems",
        "server_version_problems",
        "settings_deprecations",
    }


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


# --- quotas no GPU can give (issue 25 item 4) --------------------------------------------------
def test_a_sample_quota_bigger_than_every_stated_gpu_is_refused_naming_the_largest():
    """It passed every check and failed only when the sample pod timed out after 300 s."""
    values = {
        "cp": {"vgpu_sample_app_quota": "40GiB"},
        "gpu-1": {"vgpu_gpu_memory_mib": [REAL_GPUS["T4"]]},
        "gpu-2": {"vgpu_gpu_memory_mib": [REAL_GPUS["A10"], REAL_GPUS["L4"]]},
    }
    assert cluster_problems(values, SPEC, "cp") == [
        "vgpu_sample_app_quota: 40960 MiB is more than any GPU of the cluster offers: the largest, gpu-2's GPU 1 "
        "with 23034 MiB, offers 230 units of 100 MiB = 23000 MiB (less 0 MiB reserved, the remainder unused); "
        "lower the quota to 23000 MiB or less"
    ]


def test_a_quota_that_fits_the_largest_gpu_of_a_mixed_cluster_passes():
    values = {
        "cp": {"vgpu_sample_app_quota": "20GiB"},
        "a": {"vgpu_gpu_memory_mib": [15360]},
        "b": {"vgpu_gpu_memory_mib": [23028]},
    }
    assert cluster_problems(values, SPEC, "cp") == []


def test_without_stated_gpus_the_quota_waits_for_preflight():
    assert cluster_problems({"cp": {"vgpu_sample_app_quota": "400GiB"}, "gpu": {}}, SPEC, "cp") == []


@pytest.mark.parametrize(("model", "units"), [("H200", 561), ("H100 80GB", 318), ("A10", 89)])
def test_a_quota_is_compared_with_whole_units_of_the_measured_gpu(model, units):
    """preflight passes the sizes nvidia-smi reads; a quota of exactly the GPU's units fits, one more does not."""
    gpus = [("node's GPU 0", REAL_GPUS[model])]
    assert quota_problems(units * 256, 256, 0, gpus) == []
    (problem,) = quota_problems((units + 1) * 256, 256, 0, gpus)
    assert f"offers {units} units of 256 MiB = {units * 256} MiB" in problem


# --- one report for every host (issue 25 item 8) -----------------------------------------------
def test_the_report_names_each_problem_once_with_its_hosts_then_the_cluster_wide_ones():
    report = settings_report(
        {"cp": ["vgpu_mps_enable: typo"], "gpu-1": ["vgpu_mps_enable: typo", "vgpu_driver_branch: bad"]},
        ["vgpu_memory_unit_mib differs between hosts"],
    )
    assert report == [
        "vgpu_mps_enable: typo [every host]",
        "vgpu_driver_branch: bad [gpu-1]",
        "vgpu_memory_unit_mib differs between hosts",
    ]


# --- an existing cluster's version (issue 25 item 7) -------------------------------------------
def test_dra_on_an_existing_cluster_older_than_1_36_is_refused_by_the_api_server_s_version():
    assert server_version_problems("v1.35.2", "dra", "the API server of cp-1") == [
        "vgpu_scheduling: 'dra' needs Kubernetes 1.36 or later (GPU memory as a DRA consumable capacity, beta and on "
        "by default from 1.36); the API server of cp-1 is 'v1.35.2'; upgrade the cluster to 1.36 or later first, or "
        "keep vgpu_scheduling: extender"
    ]
    assert server_version_problems("v1.36.3+k3s1", "dra") == []
    assert server_version_problems("v1.31.4", "extender") == []


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


def test_a_unit_larger_than_the_largest_gpu_gets_advice_about_the_unit_not_a_0_mib_quota():
    """Issue 41 item 4: the advice was "lower the quota to 0 MiB"; the unit (or the reserve) is what to lower."""
    (problem,) = quota_problems("16GiB", "16GiB", 0, [("gpu-1's GPU 0", REAL_GPUS["T4"])])
    assert problem.startswith("vgpu_memory_unit_mib: 16384 MiB is more than any GPU of the cluster offers")
    assert problem.endswith("lower vgpu_memory_unit_mib to 15360 MiB or less")
    (problem,) = quota_problems("256MiB", 256, "16GiB", [("gpu-1's GPU 0", REAL_GPUS["T4"])])
    assert problem.endswith("lower vgpu_reserved_memory_mib below 15360 MiB")


def test_turning_the_tenant_pod_policy_off_needs_a_stated_reason():
    """Issue 40 item 4: the policy that keeps tenant pods from every GPU goes off only with a reason,
    which the stack's run repeats (docs/variables.md, "Tenant pods")."""
    (problem,) = problems(vgpu_tenant_pod_policy=False)
    assert problem.startswith("vgpu_tenant_pod_policy: false without vgpu_tenant_pod_policy_off_reason"), problem
    assert "reaches every GPU" in problem and "vgpu_tenant_pod_policy_exempt_namespaces" in problem, problem
    assert problems(vgpu_tenant_pod_policy=False, vgpu_tenant_pod_policy_off_reason="Kyverno refuses them") == []
    assert problems(vgpu_tenant_pod_policy="no", vgpu_tenant_pod_policy_off_reason="  ") == [problem]


def test_an_exempt_namespace_must_be_a_namespace_name():
    (problem,) = problems(vgpu_tenant_pod_policy_exempt_namespaces=["kube-system", "Team_A"])
    assert "vgpu_tenant_pod_policy_exempt_namespaces: 'Team_A' is no namespace name" in problem, problem
    assert problems(vgpu_tenant_pod_policy_exempt_namespaces=[]) == []
    assert problems(vgpu_tenant_pod_policy_exempt_namespaces=["kube-system", "gpu-trusted"]) == []
