"""The runtime role's containerd step (roles/nvidia_container_runtime/tasks/containerd.yml) run for real on
containerd 1.x: ansible-playbook on localhost with Debian 12's containerd 1.6 and NVIDIA's nvidia-ctk
built from the pinned sources (toolkit_binaries.py), on a configuration in a temporary folder.
containerd's own `config dump` is the judge of what containerd would run with.

A worker taken out of the cluster (playbooks/uninstall.yml) keeps containerd but loses
/etc/containerd/config.toml; adding it back stopped in this step, because containerd 1.x's
`config dump` fails where the file is missing (make e2e-site-day2, issue 27)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import toolkit_binaries
from recap import changed_count
from role_render import role_tasks_play, run_playbook

# The configuration Debian 12's containerd package installs.
DEBIAN_CONFIG = """version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"""


@pytest.fixture(scope="module")
def tools() -> Path:
    containerd = shutil.which("containerd")
    assert containerd, "these tests run Debian's containerd 1.x: make host-packages installs it"
    version = subprocess.run([containerd, "--version"], capture_output=True, text=True, check=True).stdout
    assert " 1." in version, f"these tests need containerd 1.x, found {version.strip()}"
    return toolkit_binaries.folder()


def converge(tools: Path, folder: Path, *args: str) -> int:
    (folder / "play.yml").write_text(
        role_tasks_play(
            "The runtime's containerd step, as the role runs it",
            "nvidia_container_runtime",
            "containerd.yml",
            facts={"service_mgr": "none"},  # the handler says to restart containerd, and restarts nothing here
        )
    )
    variables = {
        "__nvidia_container_runtime_containerd_config": str(folder / "config.toml"),
        "nvidia_container_runtime_containerd_dropin_dir": str(folder / "conf.d"),
    }
    host = Path("/etc/containerd")
    before = sorted((p, p.read_bytes()) for p in host.rglob("*") if p.is_file()) if host.is_dir() else []
    run = run_playbook(str(folder / "play.yml"), "-e", json.dumps(variables), *args, path_prefix=str(tools))
    after = sorted((p, p.read_bytes()) for p in host.rglob("*") if p.is_file()) if host.is_dir() else []
    assert after == before, "the role wrote to this machine's /etc/containerd, not to the folder it was given"
    return changed_count(run.stdout)


def effective(folder: Path) -> str:
    """What containerd would run with: its own merge of config.toml and what that imports."""
    return subprocess.run(
        ["containerd", "--config", str(folder / "config.toml"), "config", "dump"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_a_host_whose_containerd_has_no_config_file_gets_the_nvidia_runtime(tools, tmp_path):
    """containerd runs with its built-in defaults then; the role gives it the nvidia runtime."""
    assert converge(tools, tmp_path) == 1
    assert "runtimes.nvidia]" in effective(tmp_path)
    assert converge(tools, tmp_path) == 0


def test_the_package_configuration_keeps_its_settings_beside_the_nvidia_runtime(tools, tmp_path):
    (tmp_path / "config.toml").write_text(DEBIAN_CONFIG)
    converge(tools, tmp_path, "--check")
    assert (tmp_path / "config.toml").read_text() == DEBIAN_CONFIG  # check mode writes nothing
    assert converge(tools, tmp_path) == 1
    merged = effective(tmp_path)
    assert "runtimes.nvidia]" in merged
    assert 'bin_dir = "/usr/lib/cni"' in merged
    assert 'path = "/var/lib/containerd/opt"' in merged
    assert converge(tools, tmp_path) == 0
