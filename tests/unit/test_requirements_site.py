"""requirements-site.txt, the small virtualenv `make site` builds (issue 25): the same pins as the
development lock, and every package its packages need, so that site runs what the tests ran and
pip's --no-deps install of it is complete."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("site_lock", ROOT / "tests" / "harness" / "site_lock.py")
assert _SPEC and _SPEC.loader
site_lock = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(site_lock)
SITE = site_lock.pins(ROOT / "requirements-site.txt")
DEV = site_lock.pins(ROOT / "requirements-dev.txt")


def test_every_site_pin_is_the_development_pin():
    assert SITE, "requirements-site.txt pins nothing"
    differing = {name: (pin, DEV.get(name)) for name, pin in SITE.items() if DEV.get(name) != pin}
    assert not differing, f"requirements-site.txt differs from requirements-dev.txt: {differing}"


def test_the_site_lock_holds_what_its_packages_need_and_no_test_tool():
    """Read from the installed metadata of the development virtualenv, where every pin is installed."""
    needed = site_lock.closure(site_lock.names(ROOT / "requirements-site.in"))
    assert set(SITE) == needed, f"missing: {sorted(needed - set(SITE))}, not needed: {sorted(set(SITE) - needed)}"
    assert {canonicalize_name(n) for n in ("ansible-core", "jinja2", "grpcio-tools")} <= set(SITE)
    assert not {"ansible-lint", "molecule", "pytest", "ruff", "mypy", "docker"} & set(SITE)
