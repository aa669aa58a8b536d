"""vgpu_verify against the real libvgpu interposer, built from files/libvgpu, over libvgpu's fake driver.

No GPU here: the interposer forwards to the fake driver library its tests build (host memory behind
a driver-shaped API, VGPU_REAL_LIBCUDA). The quota is enforced by the real interposer. nvidia-smi
needs a real NVML, so a script stands in for it that reports, like the interposer's NVML hook, the
container's use and its quota as the real `manage --stats --json` reads them from the shared region.
"""

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.vgpu.isolation.plugins.modules import vgpu_verify

LIBVGPU = Path(__file__).resolve().parents[4] / "files" / "libvgpu"

SMI = """\
#!/usr/bin/env python3
import json, os, subprocess, sys
prefix = os.environ["LD_LIBRARY_PATH"].split(":")[0]
region = os.path.join(os.environ["VGPU_REGION_DIR"], "vgpu.region")
quota = int(os.environ["VGPU_MEMORY_LIMIT"].removesuffix("MiB"))
used = 0
if os.path.exists(region):
    stats = json.loads(subprocess.check_output([os.path.join(prefix, "manage"), "--stats", "--json"]))
    used = sum(d["used_bytes"] for d in stats["devices"]) // 1048576
print(f"{used}, {quota}")
"""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (LIBVGPU / "Makefile").exists(), reason="files/libvgpu is not in this tree"),
    pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None, reason="needs cc and make"),
]


@pytest.fixture(scope="module")
def libvgpu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """libvgpu and its fake driver, built into a fresh folder."""
    out = tmp_path_factory.mktemp("libvgpu")
    subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(LIBVGPU),
            f"OUT={out}",
            "all",
            f"{out}/fake/libcuda.so.1",
            f"{out}/fake/libnvidia-ml.so.1",
        ],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture
def node(libvgpu: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("VGPU_REAL_LIBCUDA", str(libvgpu / "fake" / "libcuda.so.1"))
    monkeypatch.setenv("VGPU_REAL_LIBNVML", str(libvgpu / "fake" / "libnvidia-ml.so.1"))
    return libvgpu


def run(capsys: pytest.CaptureFixture[str], args: dict[str, Any]) -> dict[str, Any]:
    with patch_module_args(args), pytest.raises(SystemExit):
        vgpu_verify.main()
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_1200_mib_run_under_a_3000_mib_quota_and_show_1200_of_3000(node, capsys):
    result = run(capsys, {"prefix": str(node), "quota": "3000MiB", "use": "1200MiB", "hold_seconds": 3})
    assert result["enforced"] is True, result
    assert result["memory"] == "1200MiB / 3000MiB"
    assert "total 3000 MiB" in result["app_stdout"]  # cuMemGetInfo inside the quota, as the app printed it


def test_1200_mib_are_refused_under_a_1000_mib_quota(node, capsys):
    result = run(capsys, {"prefix": str(node), "quota": "1000MiB", "use": "1200MiB", "hold_seconds": 1})
    assert result["enforced"] is True, result
    assert result["expected"] == "refuse"
    assert "CUDA_ERROR_OUT_OF_MEMORY" in result["error"]


def test_the_refusal_is_named_when_something_else_writes_to_standard_error(node, capsys, tmp_path):
    """The app prints its CUDA error on standard output; a line another library writes to
    standard error (here a wrapper's; in make test, gRPC's fork handler of the pytest worker:
    "epoll_wait error: Bad file descriptor") was taken for the whole error text, and the refusal
    was not named."""
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    for item in node.iterdir():
        (prefix / item.name).symlink_to(item)
    (prefix / "vgpu-memory-usage").unlink()
    wrapper = prefix / "vgpu-memory-usage"
    wrapper.write_text(
        f'#!/bin/sh\necho "E1205 some library: unrelated noise" >&2\nexec {node}/vgpu-memory-usage "$@"\n'
    )
    wrapper.chmod(0o755)
    result = run(capsys, {"prefix": str(prefix), "quota": "1000MiB", "use": "1200MiB", "hold_seconds": 1})
    assert result["enforced"] is True, result
    assert "CUDA_ERROR_OUT_OF_MEMORY" in result["error"], result
