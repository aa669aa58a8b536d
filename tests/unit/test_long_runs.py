"""Output from long runs (issue 14 item 7): a long step says how long it usually takes before it
starts, site.yml ends with one summary per node, and the day-two playbooks have make targets.

What the messages print is checked where they run (molecule's driver scenario converges through
them); here the order of the tasks and plays, which is what a user waiting for them depends on.
"""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def tasks(path):
    return yaml.safe_load((ROOT / path).read_text())


@pytest.mark.parametrize(
    ("path", "long_step"),
    [
        ("roles/nvidia_driver/tasks/install.yml", "Install the packages of the method"),
        (
            "roles/nvidia_driver/tasks/dkms.yml",
            "Build the module for the kernel when DKMS has not, and read the state again",
        ),
    ],
)
def test_a_long_step_is_announced_with_its_usual_duration(path, long_step):
    names = [task["name"] for task in tasks(path)]
    before = tasks(path)[names.index(long_step) - 1]
    assert "ansible.builtin.debug" in before, before
    assert re.search(r"usually takes about \d+ minutes", before["ansible.builtin.debug"]["msg"]), before


@pytest.mark.parametrize("playbook", ["site.yml", "stack.yml", "upgrade.yml"])
def test_the_run_ends_with_one_summary_per_node(playbook):
    last = tasks("playbooks/" + playbook)[-1]
    assert last.get("ansible.builtin.import_playbook") == "summary.yml", last
    summary = tasks("playbooks/summary.yml")
    assert summary[-1]["hosts"] == "k8s_control_plane:gpu_nodes"
    shown = yaml.safe_dump(summary[-1]["tasks"][-1])
    for part in ("driver:", "GPUs:", "advertised:", "components:"):
        assert part in shown, part


@pytest.mark.parametrize(
    ("target", "playbook"), [("uninstall", "uninstall"), ("upgrade", "upgrade"), ("stack", "stack")]
)
def test_make_has_a_target_for_each_day_two_playbook(target, playbook):
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(rf"^{target}:.*\n\t(.*)$", makefile, re.MULTILINE)
    assert recipe and f"playbooks/{playbook}.yml" in recipe.group(1)
