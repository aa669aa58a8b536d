"""The contract (contract/contract.yml) and its generator (issue 39): every generated file equals a
fresh generation, and a mistake in the contract is one line that names the entry.

`make lint` runs the same check (contract/generate.py --check); this test makes `make unit` fail too.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
from role_render import ROOT

from contract import generate

CONTRACT = generate.load()


def test_every_generated_file_equals_a_fresh_generation():
    assert generate.stale() == [], "run `make generate`"


def test_a_hand_edit_of_a_generated_file_is_found_stale(tmp_path: Path):
    """The check looks at every output: copy the tree's inputs, edit one output, and it is named."""
    for path in ["contract", *generate.outputs()]:
        source, target = ROOT / path, tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy(source, target)
    for source in generate.COPIES:
        (tmp_path / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / source, tmp_path / source)
    assert generate.stale(tmp_path) == []
    switches = tmp_path / "files" / "libvgpu" / "src" / "switches.def"
    switches.write_text(switches.read_text().replace("LIMIT,", "LIMITS,"))
    assert generate.stale(tmp_path) == ["files/libvgpu/src/switches.def"]


def broken(change) -> dict[str, Any]:
    contract = copy.deepcopy(CONTRACT)
    change(contract)
    return contract


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c["settings"]["vgpu_enforcement"].pop("why"),
            "settings.vgpu_enforcement: a cluster-wide setting says why",
        ),
        (
            lambda c: c["settings"]["vgpu_enforcement"].update(scope="host"),
            "settings.vgpu_enforcement: scope 'host' is none of",
        ),
        (
            lambda c: c["settings"]["vgpu_enforcement"].update(rnage=[1, 2]),
            "settings.vgpu_enforcement: unknown keys ['rnage']",
        ),
        (
            lambda c: c["settings"]["vgpu_memory_unit_mib"].update(type="int"),
            "settings.vgpu_memory_unit_mib: a memory size has type raw",
        ),
        (
            lambda c: c["settings"]["vgpu_kubernetes_version"].update(default=1.3),
            "settings.vgpu_kubernetes_version: default 1.3 is not of type str",
        ),
        (
            lambda c: c["settings"]["vgpu_enforcement"].update(default="kill"),
            "settings.vgpu_enforcement: default 'kill' is not one of its choices",
        ),
        (
            lambda c: c["config"]["monitor.enforcement"].update(setting="vgpu_enforcment"),
            "config.monitor.enforcement: setting vgpu_enforcment is no setting of the contract",
        ),
        (
            lambda c: c["config"]["mps.log_dir"].update({"from": "{vgpu_mps_pipe}/log"}),
            "config.mps.log_dir: from names vgpu_mps_pipe, which is no setting of the contract",
        ),
        (
            lambda c: c["settings"]["vgpu_scheduling"].update(old_names=["vgpu_stack_unit_mib"]),
            "old name vgpu_stack_unit_mib is a setting or the old name of two settings",
        ),
    ],
)
def test_a_mistake_in_the_contract_is_one_line_naming_the_entry(change, message):
    with pytest.raises(generate.ContractError, match=message.replace("[", r"\[").replace("]", r"\]")):
        generate.check(broken(change))


def test_the_check_command_names_each_stale_file_and_the_fix(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setattr(generate, "stale", lambda root=None: ["galaxy.yml"])
    assert generate.main(["--check"]) == 1
    message = "galaxy.yml: stale; it is generated from contract/contract.yml: run `make generate`"
    assert message in capsys.readouterr().err
