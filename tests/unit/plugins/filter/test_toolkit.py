"""toolkit_settings_to_set: which of the runtime role's settings the toolkit's configuration lacks."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vgpu.isolation.plugins.filter.toolkit import toolkit_settings_to_set

WANTED = {
    "nvidia-container-runtime.mode": "cdi",
    "accept-nvidia-visible-devices-envvar-when-unprivileged": "false",
    "accept-nvidia-visible-devices-as-volume-mounts": "true",
}
# The start of the configuration the toolkit's package installs (nvidia-ctk config default).
PACKAGED = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]
"""


def test_commented_defaults_count_as_missing_and_a_different_value_is_set_again():
    assert toolkit_settings_to_set(PACKAGED, WANTED) == [
        "nvidia-container-runtime.mode=cdi",
        "accept-nvidia-visible-devices-envvar-when-unprivileged=false",
        "accept-nvidia-visible-devices-as-volume-mounts=true",
    ]


def test_a_configuration_that_has_them_needs_nothing():
    done = (
        "accept-nvidia-visible-devices-as-volume-mounts = true\n"
        "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n" + PACKAGED.replace('"auto"', '"cdi"')
    )
    assert toolkit_settings_to_set(done, WANTED) == []


def test_the_env_turned_back_on_is_named():
    turned = "accept-nvidia-visible-devices-envvar-when-unprivileged = true\n"
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged=false" in toolkit_settings_to_set(turned, WANTED)


def test_a_broken_configuration_is_an_error_that_says_so():
    with pytest.raises(AnsibleFilterError, match="not TOML"):
        toolkit_settings_to_set("mode = ", WANTED)


def test_a_list_setting_is_compared_and_set_as_its_items_joined_by_colons():
    """The low-level runtimes (nvidia-container-runtime.runtimes): --set splits a list at its colons
    (a comma splits the flag itself: "crun" alone is then an undefined setting)."""
    own = {"nvidia-container-runtime.runtimes": ["/usr/local/libexec/vgpu-isolation/runc-without-graphics"]}
    assert toolkit_settings_to_set(PACKAGED, own) == [
        "nvidia-container-runtime.runtimes=/usr/local/libexec/vgpu-isolation/runc-without-graphics"
    ]
    assert toolkit_settings_to_set(PACKAGED, {"nvidia-container-runtime.runtimes": ["runc", "crun"]}) == []
    assert toolkit_settings_to_set(PACKAGED, {"nvidia-container-runtime.runtimes": ["crun"]}) == [
        "nvidia-container-runtime.runtimes=crun"
    ]
