"""vgpu_verify end to end, with real processes standing in for the GPU.

There is no GPU here, so the interposer's two observable behaviours are played by small scripts:
`vgpu-memory-usage` allocates against VGPU_MEMORY_LIMIT (or, for the leaky variant, ignores it) and
records its use in the region folder, and `nvidia-smi` reports that use against the quota only when
LD_LIBRARY_PATH puts the prefix first, as the real shim libraries would. The module's process
handling, environment, sampling and verdict are the real code.
"""

import json
import os
import stat
import textwrap
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.vgpu.isolation.plugins.modules import vgpu_verify

PHYSICAL_MIB = 143771

APP = """\
#!/usr/bin/env python3
import os, sys, time
use, hold = int(sys.argv[1]), float(sys.argv[2])
limit = int(os.environ["VGPU_MEMORY_LIMIT"].removesuffix("MiB"))
if use > limit and {enforce}:
    print(f"cuMemAlloc({{use}} MiB) failed: CUDA_ERROR_OUT_OF_MEMORY (quota {{limit}} MiB)", file=sys.stderr)
    sys.exit(2)
used = os.path.join(os.environ["VGPU_REGION_DIR"], "used")
with open(used, "w") as f:
    f.write(str(use))
time.sleep(hold)
os.remove(used)
print(f"allocated {{use}} MiB, held {{hold}} s")
"""

SMI = f"""\
#!/usr/bin/env python3
import os, sys
prefix = os.environ.get("FAKE_PREFIX", "")
if not os.environ.get("LD_LIBRARY_PATH", "").startswith(prefix):
    print("0, {PHYSICAL_MIB}")  # without the shim first, nvidia-smi sees the whole GPU
    sys.exit(0)
try:
    with open(os.path.join(os.environ["VGPU_REGION_DIR"], "used")) as f:
        used = int(f.read())
except FileNotFoundError:
    used = 0
print(f"{{used}}, {{os.environ['VGPU_MEMORY_LIMIT'].removesuffix('MiB')}}")
"""


@pytest.fixture
def run_module(capsys: pytest.CaptureFixture[str]):
    """Run vgpu_verify's main() with these arguments and return its JSON result."""

    def run(args: dict[str, Any]) -> dict[str, Any]:
        with patch_module_args(args), pytest.raises(SystemExit):
            vgpu_verify.main()
        result: dict[str, Any] = json.loads(capsys.readouterr().out)
        return result

    return run


def write_script(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A prefix with a quota-enforcing vgpu-memory-usage and an nvidia-smi on the PATH."""
    prefix = tmp_path / "opt-vgpu"
    prefix.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_script(prefix / "vgpu-memory-usage", APP.format(enforce=True))
    write_script(bin_dir / "nvidia-smi", SMI)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PREFIX", str(prefix))
    return prefix


def test_the_reference_check_runs_within_the_quota_and_shows_1200_of_3000(node, run_module):
    result = run_module({"prefix": str(node), "quota": "3000MiB", "use": "1200MiB", "hold_seconds": 2})
    assert result["enforced"] is True
    assert result["expected"] == "run"
    assert result["memory"] == "1200MiB / 3000MiB"
    assert (result["used_mib"], result["total_mib"]) == (1200, 3000)
    assert result["app_rc"] == 0
    assert result["changed"] is False


def test_the_reference_check_is_refused_under_1000_and_returns_the_error(node, run_module):
    result = run_module({"prefix": str(node), "quota": 1000, "use": "1200MiB", "hold_seconds": 1})
    assert result["enforced"] is True
    assert result["expected"] == "refuse"
    assert "CUDA_ERROR_OUT_OF_MEMORY" in result["error"]
    assert result["total_mib"] == 1000  # nvidia-smi inside the quota still shows the quota as the GPU


def test_an_interposer_that_does_not_enforce_fails_the_module(node, run_module):
    write_script(node / "vgpu-memory-usage", APP.format(enforce=False))
    result = run_module({"prefix": str(node), "quota": "1000MiB", "use": "1200MiB", "hold_seconds": 1})
    assert result["failed"] is True
    assert result["enforced"] is False
    assert "not enforced" in result["msg"]


def test_nvidia_smi_that_does_not_see_the_quota_fails_the_module(node, run_module, monkeypatch):
    monkeypatch.setenv("FAKE_PREFIX", "/somewhere/else")  # the shim is not the library nvidia-smi loads
    result = run_module({"prefix": str(node), "hold_seconds": 1})
    assert result["failed"] is True
    assert f"total of {PHYSICAL_MIB} MiB" in result["msg"]


def test_a_missing_interposer_is_named_with_the_fix(tmp_path, run_module):
    result = run_module({"prefix": str(tmp_path / "nothing")})
    assert result["failed"] is True
    assert "vgpu-memory-usage is missing" in result["msg"]
    assert "vgpu_interposer" in result["msg"]


def test_check_mode_reports_the_commands_and_runs_nothing(node, run_module):
    marker_app = node / "vgpu-memory-usage"
    write_script(marker_app, f"#!/bin/sh\ntouch {node}/ran\n")
    result = run_module({"prefix": str(node), "_ansible_check_mode": True})
    assert not (node / "ran").exists()
    assert result["commands"][0] == [str(marker_app), "1200", "8"]
    assert result["environment"]["VGPU_MEMORY_LIMIT"] == "3000MiB"
    assert result["environment"]["LD_LIBRARY_PATH"] == str(node)
    assert "check mode" in result["msg"]


@pytest.mark.parametrize("quota", ["3000MB", "0", "lots"])
def test_a_bad_quota_is_refused_before_anything_runs(node, run_module, quota):
    result = run_module({"prefix": str(node), "quota": quota})
    assert result["failed"] is True
    assert quota in result["msg"]


def test_a_hung_app_is_stopped_at_the_timeout_and_fails_the_module(node, run_module):
    result = run_module({"prefix": str(node), "hold_seconds": 60, "timeout": 2, "use": "1200MiB"})
    assert result["failed"] is True
    assert result["app_rc"] is None
    assert "did not finish in time" in result["msg"]
