"""The collection installed from its tarball works without the checkout (issue 25 item 9).

The tarball is built as `make collection` builds it (from the files git knows, here with an
operator's inventory copied into inventory/, where README.md no longer puts it), installed with ansible-galaxy into
an empty folder, and its playbooks run by name (vgpu.isolation.site) from a folder outside the
checkout, with no ansible.cfg and only the dependency collections beside it: site.yml in check mode
on this machine (a local connection; no GPU here, so no driver and no cluster: flavour none), then
what an operator without a cluster or a driver sees from summary.yml, verify.yml and preflight.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
DEPENDENCIES = ("ansible/posix", "community/crypto", "community/general", "kubernetes/core")


def sh(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=900)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the tarball, the folder to run from, the environment): built, installed, nothing of the checkout."""
    work = tmp_path_factory.mktemp("installed")
    copy = ROOT / "tests" / "harness" / "copy-tree.sh"
    # The checkout as an operator has it: an inventory copied beside the example.
    assert sh(str(copy), str(work / "checkout"), cwd=ROOT).returncode == 0
    (work / "checkout" / "inventory" / "mysite").mkdir()
    (work / "checkout" / "inventory" / "mysite" / "hosts.yml").write_text("all: {}\n")
    for args in (["git", "init", "-q"], ["git", "add", "-A"]):
        assert sh(*args, cwd=work / "checkout").returncode == 0
    # What `make collection` does: the files git knows, then ansible-galaxy collection build.
    assert sh(str(copy), str(work / "src"), cwd=work / "checkout").returncode == 0
    built = sh(
        str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(work), str(work / "src"), cwd=work
    )
    assert built.returncode == 0, built.stdout + built.stderr
    tarball = work / f"vgpu-isolation-{GALAXY['version']}.tar.gz"
    installed = sh(
        str(BIN / "ansible-galaxy"),
        *("collection", "install", "--offline", "--no-deps", "--force", "-p", str(work / "collections"), str(tarball)),
        cwd=work,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # The dependency collections `make collection` unpacks, and nothing else of the checkout.
    for name in DEPENDENCIES:
        link = work / "dependencies" / "ansible_collections" / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(ROOT / ".collections" / "ansible_collections" / name)
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env["ANSIBLE_COLLECTIONS_PATH"] = os.pathsep.join([str(work / "collections"), str(work / "dependencies")])
    env["ANSIBLE_HOST_KEY_CHECKING"] = "false"
    env["PATH"] = str(BIN) + os.pathsep + env["PATH"]
    run = work / "site"
    run.mkdir()
    return tarball, run, env


def playbook(installed, name: str, inventory: dict, *args: str) -> tuple[int, str]:
    _tarball, run, env = installed
    (run / "hosts.yml").write_text(json.dumps(inventory))
    done = sh(str(BIN / "ansible-playbook"), "-i", "hosts.yml", f"vgpu.isolation.{name}", *args, cwd=run, env=env)
    return done.returncode, done.stdout + done.stderr


def this_machine(**settings) -> dict:
    """This machine as the one node of a site, over a local connection."""
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return {
        "all": {
            "vars": {**host, **settings},
            "children": {
                "k8s_control_plane": {"hosts": {"localhost": None}},
                "gpu_nodes": {"hosts": {"localhost": None}},
            },
        }
    }


def test_the_tarball_holds_the_collection_and_none_of_the_checkout_s_tooling_or_the_operator_s_inventory(installed):
    tarball, _run, _env = installed
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
        manifest = json.load(archive.extractfile("MANIFEST.json"))  # type: ignore[arg-type]
    assert "inventory/example/hosts.yml" in names and "playbooks/site.yml" in names
    leaked = [n for n in names if n.startswith(("inventory/mysite", "build/", "tests/node", ".venv", ".collections"))]
    assert leaked == [] and "Makefile" not in names
    info = manifest["collection_info"]
    assert all(info[key].startswith("https://") for key in ("repository", "documentation", "issues"))


def test_site_yml_runs_in_check_mode_from_the_installed_collection(installed):
    """No GPU here: no driver to install (method none), no cluster (flavour none), no GPU asked for."""
    settings = {
        "vgpu_kubernetes_flavour": "none",
        "vgpu_driver_method": "none",
        "preflight_require_gpu": False,
        "preflight_check_network": False,
    }
    code, out = playbook(installed, "site", this_machine(**settings), "--check")
    assert code == 0, out[-4000:]
    assert "failed=0" in out and "cluster: none (vgpu_kubernetes_flavour is none)" in out
    assert str(ROOT) not in out, "nothing of the checkout was used"


def test_the_component_image_is_looked_for_beside_the_inventory_not_inside_the_collection(installed):
    _tarball, run, _env = installed
    settings = {"preflight_require_gpu": False, "preflight_check_network": False}
    code, out = playbook(installed, "site", this_machine(**settings), "--check")
    assert code != 0
    assert f"its tarball {run}/vgpu-components-{GALAXY['version']}.tar is not on the controller" in out


def test_summary_yml_without_a_cluster_says_so(installed):
    """It failed with "Could not find or access '/etc/rancher/k3s/k3s.yaml' on the Ansible Controller"."""
    code, out = playbook(installed, "summary", this_machine())
    assert code == 0, out[-4000:]
    assert "cluster: none found: /etc/rancher/k3s/k3s.yaml and /opt/vgpu-python/bin/python" in out
    assert "site.yml builds the cluster, stack.yml adds the stack to one built by others" in out.replace(
        "\n        ", " "
    )
    # Issue 41: it said "problems: none" beside "driver: not loaded".
    assert "problems: none" not in out
    assert "problems: no NVIDIA driver is loaded; no GPU the driver tools report; no cluster to read" in out.replace(
        "\n        ", " "
    )


def test_verify_yml_on_a_machine_without_a_gpu_says_there_is_no_driver(installed):
    """It said "driver , 0 GPUs visible"."""
    code, out = playbook(installed, "verify", this_machine())
    assert code != 0
    assert "localhost: no NVIDIA driver is loaded (0 NVIDIA PCI devices)" in out
    assert "driver ," not in out
