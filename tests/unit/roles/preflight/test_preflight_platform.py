"""preflight asks the support matrix (issue 14 item 3) on a real node: this machine, Debian 12, no GPU.

The role runs for real (ansible-playbook on localhost, check mode, no mirror probe) as a member of
gpu_nodes; it must stop with one report before anything changes. GPU generations cannot be shown
here (no GPU): tests/unit/plugins/module_utils/test_platforms.py covers them on the filter.
"""

import json
import sys

import pytest
from role_render import run_playbook

PLAY = """
- hosts: all
  connection: local
  gather_facts: true
  roles:
    - vgpu.isolation.preflight
"""


def preflight(tmp_path, **settings):
    hosts = {"gpu_nodes": {"hosts": {"localhost": {"ansible_python_interpreter": sys.executable}}}}
    (tmp_path / "hosts.yml").write_text(json.dumps(hosts))
    (tmp_path / "play.yml").write_text(PLAY)
    image = tmp_path / "vgpu-components-0.1.0.tar"
    image.write_bytes(b"")
    extra = {"preflight_check_network": False, "vgpu_component_image_tarball": str(image), **settings}
    with pytest.raises(AssertionError) as failed:
        run_playbook("--check", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"), "-e", json.dumps(extra))
    return str(failed.value)


def test_a_supported_node_without_a_gpu_is_stopped_for_that_alone(tmp_path):
    out = preflight(tmp_path)
    assert "Preflight found 1 problem(s) on localhost; nothing was changed." in out
    assert "no NVIDIA GPU found" in out


def test_a_missing_component_image_is_named_before_anything_changes(tmp_path):
    """Issue 11: a site with no component image failed late, in vgpu_stack, after the driver, the
    runtime, the interposer and Kubernetes were installed."""
    out = preflight(tmp_path, vgpu_component_image_tarball=str(tmp_path / "missing.tar"))
    assert "Preflight found 2 problem(s)" in out
    assert f"its tarball {tmp_path / 'missing.tar'} is not on the controller; build it with `make image`" in out


def test_a_branch_the_chosen_repository_does_not_package_is_refused_before_the_run(tmp_path):
    out = preflight(tmp_path, vgpu_driver_method="nvidia_repo")
    assert "Preflight found 2 problem(s)" in out
    assert "driver branch 470 is not packaged by NVIDIA's CUDA repository for Debian 12 (it offers: 535, 580)" in out
