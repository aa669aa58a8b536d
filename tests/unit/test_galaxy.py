"""galaxy.yml's metadata (issue 14 item 7, issue 25 item 9): addresses nobody else owns, and every
collection the roles and playbooks call is declared as a dependency, so `ansible-galaxy collection
install` brings it."""

import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from urllib.parse import urlparse

import yaml

ROOT = Path(__file__).resolve().parents[2]
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
# Modules, action groups, roles and filters called by their fully qualified name.
FQCN = re.compile(
    r"^\s*(?:- )?([a-z]+)\.([a-z_]+)\.[a-z_0-9]+:\s*$"  # a task: "  kubernetes.core.k8s:"
    r"|group/([a-z]+)\.([a-z_]+)\."  # module_defaults: "group/kubernetes.core.k8s:"
    r"|\|\s*([a-z]+)\.([a-z_]+)\.[a-z_0-9]+",  # a filter: "| vgpu.isolation.mib"
    re.MULTILINE,
)


def used_collections():
    used = set()
    for path in [*ROOT.glob("roles/**/*.yml"), *ROOT.glob("playbooks/*.yml")]:
        for groups in FQCN.findall(path.read_text()):
            ns, name = [part for part in groups if part][:2]
            used.add(f"{ns}.{name}")
    return used - {"ansible.builtin", "vgpu.isolation"}


def test_the_addresses_are_on_one_host_that_is_real_or_can_be_nobody_else_s():
    """Issue 25 item 9: galaxy.yml had no repository, documentation or issues address. Until the
    repository is published they are placeholders on the reserved .invalid domain (RFC 2606), which
    never resolves to someone else's site, and galaxy.yml says so; never example.com or localhost."""
    text = (ROOT / "galaxy.yml").read_text()
    hosts = set()
    for key in ("repository", "documentation", "issues"):
        address = urlparse(GALAXY[key])
        assert address.scheme == "https" and not re.search(r"example\.|localhost", GALAXY[key]), key
        hosts.add(address.hostname)
    (host,) = hosts
    assert not host.endswith(".invalid") or "PLACEHOLDERS" in text.split("repository:")[0]
    assert GALAXY["authors"] and all(author.strip() for author in GALAXY["authors"])


def test_every_collection_the_roles_call_is_a_dependency():
    used = used_collections()
    assert {"kubernetes.core", "community.general", "community.crypto", "ansible.posix"} <= used, used
    assert used <= set(GALAXY["dependencies"]), used - set(GALAXY["dependencies"])


def test_the_changelog_has_the_release_of_galaxy_yml_s_version():
    """Issue 25 item 9: changelog.yaml had `releases: {}`, so the installed collection carried no
    changelog. `antsibull-changelog release --version <version>` folds the fragments in (run again
    for the same version, it adds the fragments written since)."""
    changelog = yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())
    release = changelog["releases"][GALAXY["version"]]
    assert release["changes"]["release_summary"] and release["release_date"]
    assert f"v{GALAXY['version']}" in (ROOT / "CHANGELOG.rst").read_text()


def test_a_plain_build_leaves_every_inventory_but_the_example_out_of_the_tarball(tmp_path):
    """Issue 41: `ansible-galaxy collection build` in a checkout with an operator's inventory copied
    into inventory/ (operations.md suggested inventory/mysite/) packed its hosts, its group_vars and
    any credentials into the tarball. galaxy.yml's build_ignore leaves out every inventory but the
    example, whatever git ignores."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("galaxy.yml", "README.md", "meta", "playbooks", "roles", "plugins", "inventory", "docs", "changelogs"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, checkout / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, checkout / name)
    secret = "vgpu_component_registry_credentials: [{registry: r.example, username: u, password: hunter2}]\n"  # noqa: S105 - the leak looked for
    for site in ("mysite", "examples", "ex", "e-site"):
        (checkout / "inventory" / site / "group_vars").mkdir(parents=True)
        (checkout / "inventory" / site / "hosts.yml").write_text("all: {}\n")
        (checkout / "inventory" / site / "group_vars" / "all.yml").write_text(secret)
    (checkout / "inventory" / "prod.yml").write_text(secret)
    built = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-galaxy")), "collection", "build", "--output-path", str(tmp_path)],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    with tarfile.open(tmp_path / f"vgpu-isolation-{GALAXY['version']}.tar.gz") as archive:
        names = archive.getnames()
        contents = b"".join(archive.extractfile(m).read() for m in archive.getmembers() if m.isfile())  # type: ignore[union-attr]
    inventory = sorted(n for n in names if n.startswith("inventory/"))
    assert inventory and all(n.startswith("inventory/example") for n in inventory), inventory
    assert "inventory/example/hosts.yml" in names and "inventory/example/group_vars/all.yml" in names
    assert b"hunter2" not in contents
