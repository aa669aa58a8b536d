"""preflight asks the support matrix (issue 14 item 3) on a real node: this machine, Debian 12, no GPU.

The role runs for real (ansible-playbook on localhost, check mode, no mirror probe) as a member of
gpu_nodes; it must stop with one report before anything changes. GPU generations cannot be shown
here (no GPU): tests/unit/plugins/module_utils/test_platforms.py covers them on the filter.
"""

import hashlib
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


def failed_check_run(tmp_path, inventory, playbook, path_prefix="", **settings):
    """Run ``playbook`` in check mode on ``inventory`` (no mirror probe, an empty component image);
    returns its failure (the test fails if it passes)."""
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    image = tmp_path / "vgpu-components-0.1.0.tar"
    image.write_bytes(b"")
    extra = {"preflight_check_network": False, "vgpu_component_image_tarball": str(image), **settings}
    with pytest.raises(AssertionError) as failed:
        run_playbook(
            "--check",
            "-i",
            str(tmp_path / "hosts.yml"),
            str(playbook),
            "-e",
            json.dumps(extra),
            path_prefix=path_prefix,
        )
    return str(failed.value)


def preflight(tmp_path, groups=("gpu_nodes",), hosts=("localhost",), path_prefix="", **settings):
    """Run preflight in check mode on this machine as ``hosts`` of ``groups``; returns its failure."""
    members = {host: {"ansible_python_interpreter": sys.executable} for host in hosts}
    (tmp_path / "play.yml").write_text(PLAY)
    inventory = {group: {"hosts": members} for group in groups}
    return failed_check_run(tmp_path, inventory, tmp_path / "play.yml", path_prefix, **settings)


def stand_in(folder, name, output, args):
    """A stand-in for a tool that needs what this machine lacks (a GPU, an old API server): it
    answers ``output`` to exactly the arguments ``args`` the real tool would get, and fails otherwise."""
    folder.mkdir(exist_ok=True)
    expected = " ".join(args)
    script = f'#!/bin/sh\n[ "$*" = "{expected}" ] || {{ echo "unexpected arguments: $*" >&2; exit 2; }}\n'
    (folder / name).write_text(script + "cat <<'EOF'\n" + output + "\nEOF\n")
    (folder / name).chmod(0o755)
    return str(folder)


SMI_ARGS = ("--query-gpu=memory.total,mig.mode.current", "--format=csv,noheader,nounits")


def test_a_supported_node_without_a_gpu_is_stopped_for_that_alone(tmp_path):
    out = preflight(tmp_path)
    assert "Preflight found 1 problem(s); nothing was changed." in out
    assert "no NVIDIA GPU found" in out and "or move this host out of the gpu_nodes group [localhost]" in out


def test_the_problems_of_every_host_come_in_one_report(tmp_path):
    """Issue 25 item 8: each host printed its own copy of the same problem."""
    out = preflight(tmp_path, hosts=("gpu-1", "gpu-2"), ansible_connection="local")
    assert "Preflight found 1 problem(s); nothing was changed." in out
    assert "or move this host out of the gpu_nodes group [every host]" in out
    assert len([line for line in out.splitlines() if line.startswith("fatal:")]) == 1


def test_a_sample_quota_bigger_than_the_gpu_nvidia_smi_shows_is_refused_before_the_run(tmp_path):
    """Issue 25 item 4: it failed only when the sample pod timed out after 300 s. nvidia-smi is a
    stand-in printing an A10's memory (no GPU here)."""
    tools = stand_in(tmp_path / "bin", "nvidia-smi", "23028, Disabled", SMI_ARGS)
    out = preflight(tmp_path, path_prefix=tools, vgpu_sample_app_quota="40000MiB", preflight_require_gpu=False)
    assert (
        "vgpu_sample_app_quota: 40000 MiB is more than any GPU of the cluster offers: the largest, localhost's GPU 0 "
        "with 23028 MiB, offers 230 units of 100 MiB = 23000 MiB"
    ) in out


def test_a_gpu_in_mig_mode_is_refused_before_the_run(tmp_path):
    """Issue 25 item 11 (MIG): a MIG GPU was advertised whole and its pods found no CUDA device.
    nvidia-smi is a stand-in printing an A100 with MIG on (no GPU here)."""
    tools = stand_in(tmp_path / "bin", "nvidia-smi", "81920, Disabled\n81920, Enabled", SMI_ARGS)
    out = preflight(tmp_path, path_prefix=tools, preflight_require_gpu=False)
    assert "Preflight found 1 problem(s)" in out
    assert "GPU 1 has MIG mode enabled: vgpu.isolation shares whole GPUs by memory quota" in out


def test_dra_on_a_running_cluster_older_than_1_36_is_refused_by_asking_its_api_server(tmp_path):
    """Issue 25 item 7: stack.yml trusted vgpu_kubernetes_version (1.36.3 by default) and changed the
    nodes before failing. kubectl is a stand-in answering as a 1.35 API server would (none runs here)."""
    version = {"clientVersion": {"gitVersion": "v1.36.3"}, "serverVersion": {"gitVersion": "v1.35.2"}}
    kubeconfig = tmp_path / "admin.conf"
    tools = stand_in(
        tmp_path / "bin",
        "kubectl",
        json.dumps(version),
        ("--kubeconfig", str(kubeconfig), "version", "--output", "json"),
    )
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    settings = {"vgpu_kubernetes_flavour": "kubeadm", "vgpu_scheduling": "dra", "vgpu_kubeconfig": str(kubeconfig)}
    out = preflight(tmp_path, groups=("k8s_control_plane",), path_prefix=tools, **settings)
    assert (
        "vgpu_scheduling: 'dra' needs Kubernetes 1.36 or later (GPU memory as a DRA consumable capacity, beta and on "
        "by default from 1.36); the API server of the running cluster (kubectl version on localhost) is 'v1.35.2'; "
        "upgrade the cluster to 1.36 or later first, or keep vgpu_scheduling: extender"
    ) in out


def test_a_missing_component_image_is_named_before_anything_changes(tmp_path):
    """Issue 11: a site with no component image failed late, in vgpu_stack, after the driver, the
    runtime, the interposer and Kubernetes were installed."""
    out = preflight(tmp_path, vgpu_component_image_tarball=str(tmp_path / "missing.tar"))
    assert "Preflight found 2 problem(s)" in out
    assert f"its tarball {tmp_path / 'missing.tar'} is not on the controller; build it with `make image`" in out


@pytest.mark.parametrize("switch", ["vgpu_component_image_import", "vgpu_stack_import_image"])
def test_a_registry_image_needs_no_tarball(tmp_path, switch):
    """Issue 25: with the image import off (the setting, or the vgpu_stack role's own switch) the
    nodes pull the image from its registry; preflight asked for the tarball all the same, so such a
    site could never pass."""
    settings = {
        "vgpu_component_image": "registry.example.org/gpu/vgpu-components:0.1.0",
        "vgpu_component_image_tarball": str(tmp_path / "missing.tar"),
        switch: False,
    }
    out = preflight(tmp_path, **settings)
    assert "Preflight found 1 problem(s); nothing was changed." in out
    assert "no NVIDIA GPU found" in out


def test_a_branch_the_chosen_repository_does_not_package_is_refused_before_the_run(tmp_path):
    out = preflight(tmp_path, vgpu_driver_method="nvidia_repo")
    assert "Preflight found 2 problem(s)" in out
    assert "driver branch 470 is not packaged by NVIDIA's CUDA repository for Debian 12 (it offers: 535, 580)" in out


def test_an_incomplete_offline_bundle_is_named_before_the_run(tmp_path):
    """Issue 14 item 8: the bundle's completeness for the chosen flavour, from its SHA256SUMS."""
    bundle = tmp_path / "bundle"
    files = {
        "images/vgpu-components-0.1.0.tar": b"image",
        "kubeadm/kubeadm_1.36.3-1_amd64.deb": b"deb",
        "container-toolkit/nvidia-container-toolkit-base_1.20.2-1_amd64.deb": b"deb",
    }
    for name, content in files.items():
        (bundle / name).parent.mkdir(parents=True, exist_ok=True)
        (bundle / name).write_bytes(content)
    sums = "".join(f"{hashlib.sha256(content).hexdigest()}  {name}\n" for name, content in files.items())
    (bundle / "SHA256SUMS").write_text(sums)
    out = preflight(
        tmp_path,
        vgpu_offline_bundle_dir=str(bundle),
        vgpu_kubernetes_flavour="kubeadm",
        vgpu_driver_method="none",
    )
    assert "offline bundle: kubeadm/ has no package for kubelet, kubectl, cri-tools, containerd, runc" in out
    assert "offline bundle: images/kubernetes-v1.36.3.tar is missing (kubeadm imports its images from it)" in out
    assert "container-toolkit" not in out.split("Preflight found")[1]


def test_a_driver_from_the_mirror_on_an_air_gapped_site_is_named_before_the_run(tmp_path):
    bundle = tmp_path / "bundle"
    (bundle / "images").mkdir(parents=True)
    (bundle / "images" / "vgpu-components-0.1.0.tar").write_bytes(b"image")
    (bundle / "SHA256SUMS").write_text(f"{hashlib.sha256(b'image').hexdigest()}  images/vgpu-components-0.1.0.tar\n")
    out = preflight(
        tmp_path,
        vgpu_offline_bundle_dir=str(bundle),
        vgpu_kubernetes_flavour="none",
        preflight_check_network=True,
        preflight_probe_timeout=2,
        preflight_probe_urls={"Debian": "http://127.0.0.1:9/Release"},
    )
    assert "vgpu_driver_method auto installs the driver from the package mirror http://127.0.0.1:9/Release" in out
    assert "set vgpu_driver_method: offline" in out


def test_a_kubeadm_network_manifest_missing_on_the_controller_is_named_before_the_run(tmp_path):
    """Issue 14: the CNI for kubeadm. A manifest named by kubeadm_cni_manifest_src that is not on the
    controller failed only after kubeadm init had built the control plane."""
    missing = tmp_path / "flannel.yml"
    out = preflight(tmp_path, vgpu_kubernetes_flavour="kubeadm", kubeadm_cni_manifest_src=str(missing))
    assert "Preflight found 2 problem(s)" in out
    assert f"kubeadm_cni_manifest_src: {missing} (the pod network of the cluster) is not on the controller" in out


def test_flannel_without_an_offline_bundle_is_named_before_the_run(tmp_path):
    """Issue 27: flanneld comes from the offline bundle's flannel package only (no distribution
    packages it). kubeadm_cni: flannel on a site without a bundle failed only when the node's
    flanneld service could not start, after kubeadm init."""
    out = preflight(tmp_path, vgpu_kubernetes_flavour="kubeadm", kubeadm_cni="flannel")
    assert "Preflight found 2 problem(s)" in out
    assert "kubeadm_cni: flannel runs flanneld from the offline bundle, and this site has none" in out
    assert "kubeadm_cni_manifest_src" in out


def test_flannel_with_an_offline_bundle_is_no_problem_of_its_own(tmp_path):
    """The other side of the rule above: with a bundle named, flannel is not reported (the bundle's
    own check reports that this test's bundle folder is empty)."""
    out = preflight(
        tmp_path, vgpu_kubernetes_flavour="kubeadm", kubeadm_cni="flannel", vgpu_offline_bundle_dir=str(tmp_path)
    )
    assert "kubeadm_cni: flannel" not in out
