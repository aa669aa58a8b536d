"""The component image built by files/components/image/build.sh, run with Docker.

Builds the image (an OCI archive, no Docker needed) when the tarball is missing or older than the
package sources (the root filesystem comes from the cache after the first build), loads it with
`docker load`, runs every entry point, and imports it with `ctr` into the containerd beside dockerd,
as a node's containerd imports it.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from vgpu_components import __version__, contract

from tests.harness.lock_subset import pins
from tests.polling import wait_for

COMPONENTS = Path(__file__).resolve().parents[1]
ROOT = COMPONENTS.parents[1]
VERSION = __version__  # the contract's (contract/contract.yml), which names the wheel and the image
IMAGE = f"localhost/vgpu-components:{VERSION}"
TARBALL = ROOT / "build" / "images" / f"vgpu-components-{VERSION}.tar"
ENTRY_POINTS = [component["name"] for component in contract.COMPONENTS]

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _stale() -> bool:
    if not TARBALL.exists():
        return True
    built = TARBALL.stat().st_mtime
    sources = [
        *COMPONENTS.joinpath("src").rglob("*.py"),
        *COMPONENTS.joinpath("src").rglob("*.proto"),
        COMPONENTS / "pyproject.toml",
        COMPONENTS / "image" / "build.sh",
        COMPONENTS / "image" / "oci_archive.py",
        COMPONENTS / "image" / "requirements.txt",
    ]
    return any(p.stat().st_mtime > built for p in sources if "_pb2" not in p.name)


@pytest.fixture(scope="module")
def image() -> str:
    subprocess.run([str(ROOT / "tests" / "harness" / "ensure-docker.sh")], check=True)
    if _stale():
        subprocess.run([str(COMPONENTS / "image" / "build.sh")], check=True, timeout=1800)
    subprocess.run(["docker", "load", "-i", str(TARBALL)], check=True, capture_output=True)
    return IMAGE


def docker_run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "run", "--rm", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


# The containerd that dockerd runs: its own (Docker's static packages, ensure-docker.sh's dockerd)
# or the system's.
CONTAINERD_SOCKETS = [Path("/run/docker/containerd/containerd.sock"), Path("/run/containerd/containerd.sock")]


def test_containerd_imports_the_archive_under_the_image_name(image: str) -> None:
    """What the roles run on a node (`ctr -n k8s.io images import`), here in a namespace of its own."""
    socket_path = next((p for p in CONTAINERD_SOCKETS if p.is_socket()), None)
    assert socket_path, f"no containerd socket at {', '.join(map(str, CONTAINERD_SOCKETS))}"
    ctr = ["ctr", "--address", str(socket_path), "--namespace", "vgpu-image-test"]
    try:
        subprocess.run([*ctr, "images", "import", "--no-unpack", str(TARBALL)], check=True, capture_output=True)
        names = subprocess.run([*ctr, "images", "list", "--quiet"], check=True, capture_output=True, text=True)
        assert names.stdout.split() == [image]
    finally:
        subprocess.run([*ctr, "images", "remove", image], capture_output=True, check=False)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_each_console_script_answers_help(image: str, entry: str) -> None:
    out = docker_run(image, entry, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: {entry}")


def test_python_module_form_works(image: str) -> None:
    out = docker_run(image, "python3", "-m", "vgpu_components.monitor", "--help")
    assert out.returncode == 0 and out.stdout.startswith("usage: cgpu-monitor"), out.stderr


# Every Python package in the image, with its version (Debian's python3 brings none of its own).
LIST_DISTRIBUTIONS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps(sorted((d.metadata['Name'], d.version) for d in m.distributions())))"
)


def test_image_runs_the_package_versions_the_tests_ran(image: str) -> None:
    """The image's dependencies are requirements-dev.txt's pins, not whatever PyPI (or the wheel
    cache) held newest on the day it was built: the unit and integration tests ran those pins."""
    out = docker_run(image, "python3", "-c", LIST_DISTRIBUTIONS)
    assert out.returncode == 0, out.stderr
    installed: dict[str, str] = {canonicalize_name(name): version for name, version in json.loads(out.stdout)}
    assert installed.pop("vgpu-components") == VERSION
    tested = {name: pin.split("==", 1)[1] for name, pin in pins(ROOT / "requirements-dev.txt").items()}
    differing = {
        name: (version, tested.get(name)) for name, version in installed.items() if version != tested.get(name)
    }
    assert not differing, f"image version, requirements-dev.txt pin: {differing}"


def _with_build_day(base: Path, out: Path, day: int) -> None:
    """A copy of the base root filesystem tarball as debootstrap would have made it on `day` (days
    since 1970): what it writes that day into /etc/shadow (each account's last password change) and
    ldconfig's aux-cache (the libraries' change times)."""
    with tarfile.open(base) as source, tarfile.open(out, "w") as copy:
        for member in source:
            data = source.extractfile(member) if member.isfile() else None
            if member.name in ("./etc/shadow", "./var/cache/ldconfig/aux-cache") and data is not None:
                content = data.read()
                if member.name == "./etc/shadow":
                    content = re.sub(rb"^([^:]*:[^:]*:)[0-9]*:", rb"\g<1>%d:" % day, content, flags=re.M)
                else:
                    content += day.to_bytes(4, "little")
                member.size = len(content)
                copy.addfile(member, io.BytesIO(content))
            else:
                copy.addfile(member, data)


def test_the_digest_depends_on_the_inputs_not_the_day_or_the_checkout(image: str, tmp_path: Path) -> None:
    """Two machines that build the image get Debian 12's same packages and the same pinned wheels,
    but debootstrap writes its day into two files, and pip writes the build Python's path into the
    console scripts it makes (and their hashes into each package's RECORD). The image built from
    either must be one image (one digest), so a site can check the archive it was given against one
    built here. Builds twice, from copies of the cached base (the image fixture made it) stamped
    with two days, through two paths to the build Python, with the pinned wheels already cached."""
    cache = Path(os.environ.get("VGPU_CACHE_DIR", Path.home() / ".cache" / "vgpu-isolation"))
    bases = sorted((cache / "rootfs").glob("debian12-python3-*.tar"))
    assert bases, f"no base root filesystem cached in {cache}/rootfs: `make image` makes one"
    base = bases[-1]
    wheels = cache / "wheels" / "cp311-x86_64"
    bin_dir = Path(sys.executable).parent
    pythons = [bin_dir / "python3", bin_dir / f"python{sys.version_info.major}.{sys.version_info.minor}"]
    digests = []
    for day, python in zip((20000, 20001), pythons):
        own = tmp_path / str(day)
        (own / "rootfs").mkdir(parents=True)
        _with_build_day(base, own / "rootfs" / base.name, day)
        env = {**os.environ, "VGPU_CACHE_DIR": str(own), "OUT_DIR": str(own / "images"), "PYTHON": str(python)}
        built = subprocess.run(
            [str(COMPONENTS / "image" / "build.sh"), str(wheels)],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        assert built.returncode == 0, built.stderr[-2000:]
        found = re.search(r"\((sha256:[0-9a-f]{64})\) written", built.stdout)
        assert found, built.stdout[-2000:]
        digests.append(found.group(1))
        shutil.rmtree(own / "rootfs")
    assert digests[0] == digests[1], f"two build days and Python paths, two images: {digests}"


def test_image_is_small(image: str) -> None:
    size = int(
        subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Size}}", image], capture_output=True, text=True, check=True
        ).stdout
    )
    assert size < 300 * 1024 * 1024, f"image is {size // 2**20} MiB"


def test_extender_refuses_plain_http_beyond_loopback(image: str) -> None:
    """Without TLS files the image's extender will not serve a non-loopback address, and says why."""
    run = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "-e",
            "VGPU_EXTENDER_ADDRESS=0.0.0.0",
            "-e",
            "NODE_NAME=cp-0",
            image,
            "gpushare-scheduler-extender",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode != 0
    assert "refusing to serve plain HTTP" in run.stderr
    assert "tls_cert_file" in run.stderr


def test_extender_serves_healthz_and_stops_on_sigterm(image: str) -> None:
    # Plain HTTP is allowed on loopback only, so the container shares the host's network.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    name = f"vgpu-extender-test-{port}"
    subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--name",
            name,
            "--network",
            "host",
            "-e",
            "VGPU_EXTENDER_ADDRESS=127.0.0.1",
            "-e",
            f"VGPU_EXTENDER_PORT={port}",
            "-e",
            "NODE_NAME=cp-0",
            image,
            "gpushare-scheduler-extender",
        ],
        check=True,
        capture_output=True,
    )
    try:

        def healthz() -> int | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                    return int(response.status)
            except OSError:
                return None

        assert wait_for("the extender's /healthz", healthz, 60) == 200
        subprocess.run(["docker", "stop", "-t", "20", name], check=True, capture_output=True)
        code = subprocess.run(
            ["docker", "inspect", "--format", "{{.State.ExitCode}}", name], capture_output=True, text=True, check=True
        ).stdout.strip()
        assert code == "0"
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=True).stderr
        assert '"component": "gpushare-scheduler-extender"' in logs
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
