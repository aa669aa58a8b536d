"""apt_download against this machine's real apt (Debian 12, as the nodes): the bundle's package
closure is the set apt itself would install on a bare node, never a mere alternative.

Found by `make e2e-node`: the closure from `apt-cache depends --recurse` held every alternative of a
dependency, libelogind0 (an alternative to libsystemd0) among them, and installing the bundle's
kubeadm/ folder on a node then removed systemd.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
from ansible_collections.vgpu.isolation.plugins.modules import apt_download


class AptModule:
    """What apt_download needs of AnsibleModule, running the real commands."""

    def run_command(self, args: list[str], **_kwargs: Any) -> tuple[int, str, str]:
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout, done.stderr

    def fail_json(self, **kwargs: Any) -> None:
        raise AssertionError(kwargs)


@pytest.fixture
def apt() -> AptModule:
    if shutil.which("apt-get") is None:
        pytest.fail("apt-get is missing: these tests run on Debian, as the bundle is built")
    return AptModule()


def test_the_closure_takes_apts_choice_among_alternatives(apt: AptModule) -> None:
    kubeadm_node = ["containerd", "runc", "containernetworking-plugins", "iptables", "iproute2", "mount", "util-linux"]
    closure = apt_download.closure_of(apt, kubeadm_node, True)
    assert {"containerd", "runc", "containernetworking-plugins", "iptables", "libsystemd0", "debconf"} <= set(closure)
    assert not {"libelogind0", "cdebconf"} & set(closure), closure


def test_without_recursion_the_closure_is_the_named_packages(apt: AptModule) -> None:
    assert apt_download.closure_of(apt, ["runc", "iptables"], False) == ["iptables", "runc"]
