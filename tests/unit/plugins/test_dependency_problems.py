"""The lookup vgpu.isolation.dependency_problems (issue 41 item 6): a dependency too old is named too."""

from ansible_collections.vgpu.isolation.plugins.lookup.dependency_problems import dependencies, dependency_problems


def test_a_dependency_older_than_the_range_is_named_with_the_upgrade_command():
    (problem,) = dependency_problems(
        {"kubernetes.core": ">=6.0.0", "ansible.posix": ">=1.5.0"},
        {"kubernetes.core": "5.1.0", "ansible.posix": "2.0.0"},
    )
    assert problem == (
        "collection kubernetes.core is 5.1.0, and vgpu.isolation needs >=6.0.0; upgrade it: ansible-galaxy collection "
        "install --upgrade 'kubernetes.core:>=6.0.0'"
    )


def test_the_ranges_come_from_galaxy_yml_in_a_checkout():
    assert dependencies()["kubernetes.core"] == ">=6.0.0"
