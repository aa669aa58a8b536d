"""The subset locks `make lock` writes from requirements-dev.txt (tests/harness/lock_subset.py):
requirements-site.txt, the small virtualenv `make site` builds (issue 25), and
files/components/image/requirements.txt, the component image's Python packages. Each holds the
development lock's pins and every package its packages need, so what is built from it runs what
the tests ran and pip's --no-deps install of it is complete."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("lock_subset", ROOT / "tests" / "harness" / "lock_subset.py")
assert _SPEC and _SPEC.loader
lock_subset = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(lock_subset)
DEV = lock_subset.pins(ROOT / "requirements-dev.txt")
SITE = lock_subset.pins(ROOT / "requirements-site.txt")
COMPONENTS = ROOT / "files" / "components" / "pyproject.toml"
IMAGE = lock_subset.pins(ROOT / "files" / "components" / "image" / "requirements.txt")


def differing_from_dev(lock: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    return {name: (pin, DEV.get(name)) for name, pin in lock.items() if DEV.get(name) != pin}


def test_every_site_pin_is_the_development_pin():
    assert SITE, "requirements-site.txt pins nothing"
    differing = differing_from_dev(SITE)
    assert not differing, f"requirements-site.txt differs from requirements-dev.txt: {differing}"


def test_the_site_lock_holds_what_its_packages_need_and_no_test_tool():
    """Read from the installed metadata of the development virtualenv, where every pin is installed."""
    needed = lock_subset.closure(lock_subset.names(ROOT / "requirements-site.in"))
    assert set(SITE) == needed, f"missing: {sorted(needed - set(SITE))}, not needed: {sorted(set(SITE) - needed)}"
    assert {canonicalize_name(n) for n in ("ansible-core", "jinja2", "grpcio-tools")} <= set(SITE)
    assert not {"ansible-lint", "molecule", "pytest", "ruff", "mypy", "docker"} & set(SITE)


def test_every_image_pin_is_the_development_pin():
    """The image is built from this list (image/build.sh, --no-deps): a pin that drifted from the
    development lock would ship a version no test ran. `make lock` writes both."""
    differing = differing_from_dev(IMAGE)
    assert not differing, f"image/requirements.txt differs from requirements-dev.txt: {differing}"


def test_the_image_lock_is_the_components_dependencies_and_what_they_need():
    needed = lock_subset.closure(lock_subset.names(COMPONENTS))
    assert set(IMAGE) == needed, f"missing: {sorted(needed - set(IMAGE))}, not needed: {sorted(set(IMAGE) - needed)}"
    assert not {"pytest", "ruff", "mypy", "ansible-core", "grpcio-tools", "setuptools"} & set(IMAGE)


def test_the_image_pins_meet_the_components_requirements():
    """A pin below what pyproject.toml asks (grpcio>=1.85.1 for the generated stubs) would build an
    image whose components fail at import; `make lock` does not check that, this does."""
    unmet = {}
    for line in lock_subset.names(COMPONENTS):
        requirement = Requirement(line)
        pinned = IMAGE[canonicalize_name(requirement.name)].split("==", 1)[1]
        if not requirement.specifier.contains(pinned, prereleases=True):
            unmet[requirement.name] = f"{pinned} is not {requirement.specifier}"
    assert not unmet, f"files/components/image/requirements.txt: {unmet}"


def test_names_reads_a_pyprojects_dependencies(tmp_path: Path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["grpcio>=1.85.1", "PyYAML>=6"]\n')
    assert lock_subset.names(pyproject) == ["grpcio>=1.85.1", "PyYAML>=6"]
