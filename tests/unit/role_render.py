"""Render role templates with Ansible itself (ansible-playbook on localhost).

Shared by the role tests (tests/unit/roles) and the live API tests, so both look at exactly what a
run deploys. pytest's configuration (pyproject.toml, pythonpath) puts this folder on the path.
"""

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
# The settings every role reads (each role depends on roles/vgpu).
VGPU_DEFAULTS = ROOT / "roles" / "vgpu" / "defaults" / "main.yml"
VGPU_VARS = ROOT / "roles" / "vgpu" / "vars" / "main.yml"
# What a run deploys: vgpu_stack's objects, and kube-scheduler's wiring from roles/vgpu.
TEMPLATES = [
    "vgpu_stack/templates/components.yaml.j2",
    "vgpu/templates/kube-scheduler-config.yaml.j2",
    "vgpu_stack/templates/node-labels.yaml.j2",
    "vgpu/templates/k3s-scheduler-dropin.yaml.j2",
    "vgpu_stack/templates/sample-pod.yaml.j2",
]


def role_play(role: str, tasks: list[dict], *extra_files: Path, hosts: str = "localhost") -> str:
    """A play that runs ``tasks`` with the settings a run of ``role`` reads: roles/vgpu's defaults
    and vars, the role's own, then ``extra_files`` (what the test sets, as play variables: host
    variables would be taken for the inventory's by the settings check, which refuses names no role
    declares)."""
    files = [VGPU_DEFAULTS, VGPU_VARS]
    if role != "vgpu":
        files += [p for p in (ROOT / "roles" / role / d / "main.yml" for d in ("defaults", "vars")) if p.exists()]
    play = {
        "hosts": hosts,
        "connection": "local",
        "gather_facts": False,
        "vars_files": [str(f) for f in [*files, *extra_files]],
        "tasks": tasks,
    }
    return yaml.safe_dump([play], sort_keys=False)


def role_tasks_play(task: str, role: str, tasks_from: str, facts: dict | None = None) -> str:
    """A play on localhost that runs one task file of a role as the role runs it, with the settings
    every role reads and this venv's Python; ``facts`` stands in for gathered facts."""
    extra = {"ansible_facts": facts} if facts else {}
    play = {
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars_files": [str(VGPU_DEFAULTS)],
        "vars": {"ansible_python_interpreter": sys.executable, **extra},
        "tasks": [
            {
                "name": task,
                "ansible.builtin.include_role": {"name": f"vgpu.isolation.{role}", "tasks_from": tasks_from},
            }
        ],
    }
    return yaml.safe_dump([play], sort_keys=False)


def run_playbook(*args: str, path_prefix: str = "") -> subprocess.CompletedProcess:
    """ansible-playbook of this venv with this checkout as vgpu.isolation; asserts it succeeded.

    ``path_prefix`` goes in front of PATH: a folder of stand-in tools the play should run.
    """
    env = dict(
        os.environ,
        PATH=path_prefix + os.pathsep + os.environ["PATH"] if path_prefix else os.environ["PATH"],
        # This checkout (linked by tests/conftest.py), then the collections `make collection` unpacks
        # from the pinned ansible wheel (community.crypto, which vgpu_stack needs).
        ANSIBLE_COLLECTIONS_PATH=os.pathsep.join(
            [str(ROOT / "build" / "pytest-collections"), str(ROOT / ".collections")]
        ),
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
    )
    binary = Path(sys.executable).with_name("ansible-playbook")
    proc = subprocess.run([str(binary), *args], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc


def render(folder: Path, extra: dict) -> dict:
    """Render every template with the role's defaults plus `extra`; returns {name: [documents]}."""
    variables = dict(extra)
    variables.setdefault("ansible_facts", {"os_family": "Debian", "nodename": "edge"})
    variables.setdefault("vgpu_stack_gpu_nodes", [{"name": "edge", "mps": False}, {"name": "gpu-2", "mps": True}])
    (folder / "extra.yml").write_text(yaml.safe_dump(variables))
    playbook = folder / "render.yml"
    render_all = {
        "ansible.builtin.template": {
            "src": f"{ROOT / 'roles'}/{{{{ item }}}}",
            "dest": f"{folder}/{{{{ item | basename | replace('.j2', '') }}}}",
            "mode": "0644",
        },
        "loop": TEMPLATES,
    }
    playbook.write_text(role_play("vgpu_stack", [render_all], folder / "extra.yml"))
    run_playbook(str(playbook))
    out = {}
    for path in TEMPLATES:
        name = Path(path).name.replace(".j2", "")
        out[name] = [d for d in yaml.safe_load_all((folder / name).read_text()) if d]
    return out
