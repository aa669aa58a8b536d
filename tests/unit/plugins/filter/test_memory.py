"""The memory filters: how an operator's quota strings are read and which settings are refused."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vgpu.isolation.plugins.filter.memory import FilterModule, mib, settings_problems

VALID = {
    "vgpu_kubernetes_flavour": "k3s",
    "vgpu_resource_prefix": "vgpu.io",
    "vgpu_memory_unit_mib": 100,
    "vgpu_reserved_memory_mib": 0,
    "vgpu_mps_active_thread_percentage": 100,
    "vgpu_sample_app_quota": "3000MiB",
    "vgpu_sample_app_use": "1200MiB",
}


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3000, 3000), ("3000", 3000), ("3000MiB", 3000), ("3GiB", 3072), (" 12 gib ", 12288), ("1TiB", 1048576)],
)
def test_sizes_in_binary_units_are_read_as_mib(value, expected):
    assert mib(value, "q") == expected


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("3000MB", "decimal units are ambiguous"),
        ("3G", "decimal units are ambiguous"),
        (-1, "must be greater than 0"),
        ("-1", "is not a memory size"),
        (0, "must be greater than 0"),
        ("lots", "is not a memory size"),
        (True, "is not a memory size"),
        ("3 parsecs", "unknown unit"),
    ],
)
def test_bad_sizes_are_refused_with_the_variable_and_value_named(value, fragment):
    with pytest.raises(AnsibleFilterError) as err:
        mib(value, "vgpu_sample_app_quota")
    message = str(err.value)
    assert message.startswith("vgpu_sample_app_quota: ")
    assert repr(value) in message
    assert fragment in message
    assert "3000MiB" in message  # says what is expected


def test_the_documented_defaults_are_valid():
    assert settings_problems(VALID) == []


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ({"vgpu_kubernetes_flavour": "microk8s"}, "vgpu_kubernetes_flavour: 'microk8s' is not supported"),
        ({"vgpu_resource_prefix": "Vgpu_IO"}, "vgpu_resource_prefix: 'Vgpu_IO'"),
        ({"vgpu_memory_unit_mib": 0}, "vgpu_memory_unit_mib: 0 must be a whole number"),
        ({"vgpu_memory_unit_mib": "100MiB"}, "vgpu_memory_unit_mib: '100MiB' must be a whole number"),
        ({"vgpu_reserved_memory_mib": -1}, "vgpu_reserved_memory_mib: -1"),
        ({"vgpu_mps_active_thread_percentage": 101}, "vgpu_mps_active_thread_percentage: 101"),
        ({"vgpu_sample_app_quota": "3000MB"}, "vgpu_sample_app_quota: '3000MB'"),
        ({"vgpu_sample_app_quota": "2950MiB"}, "2950 MiB is not a multiple of vgpu_memory_unit_mib (100 MiB)"),
        ({"vgpu_sample_app_use": "4GiB"}, "vgpu_sample_app_use: 4096 MiB is more than vgpu_sample_app_quota"),
        ({"vgpu_gpu_memory_mib": [12288]}, "vgpu_memory_unit_mib: 100 MiB does not divide GPU 0's 12288 MiB"),
        ({"vgpu_gpu_memory_mib": ["12GB"]}, "vgpu_gpu_memory_mib[0]: '12GB'"),
        ({"vgpu_reserved_memory_mib": 20000, "vgpu_gpu_memory_mib": [12000]}, "leaves nothing of GPU 0"),
    ],
)
def test_each_bad_setting_is_reported(override, fragment):
    problems = settings_problems({**VALID, **override})
    assert any(fragment in p for p in problems), problems


def test_a_unit_that_divides_the_stated_gpu_memory_is_accepted():
    settings = {**VALID, "vgpu_memory_unit_mib": 64, "vgpu_sample_app_quota": "3GiB", "vgpu_gpu_memory_mib": ["12GiB"]}
    assert settings_problems(settings) == []


def test_whole_numbers_given_on_the_command_line_are_accepted():
    # `ansible-playbook -e vgpu_memory_unit_mib=50` passes the string "50".
    assert settings_problems({**VALID, "vgpu_memory_unit_mib": "50", "vgpu_reserved_memory_mib": "0"}) == []


def test_every_problem_is_reported_at_once():
    problems = settings_problems({**VALID, "vgpu_kubernetes_flavour": "x", "vgpu_sample_app_quota": -1})
    assert len(problems) == 2


def test_the_plugin_exposes_both_filters():
    assert set(FilterModule().filters()) == {"mib", "settings_problems"}
