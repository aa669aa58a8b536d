"""The upstream Go modules the bundle and the e2e harness build (files/bundle/upstream/).

kwok, a test tool, is built against the Kubernetes release's own module versions, so that a cold
build compiles the packages they share once (files/bundle/upstream/kwok/go.mod says why).
"""

import re
from pathlib import Path

UPSTREAM = Path(__file__).resolve().parents[2] / "files" / "bundle" / "upstream"


def build_versions(go_mod: Path) -> dict[str, str]:
    """Module path -> the version a build uses: the require's, or the replace's where one names a version."""
    text = go_mod.read_text()
    versions = dict(re.findall(r"^\s+(\S+) (v\S+)(?: // indirect)?$", text, re.M))
    versions.update(re.findall(r"^\s+(\S+) => \S+ (v\S+)$", text, re.M))
    return versions


def test_build_versions_read_the_replace_over_the_require(tmp_path):
    go_mod = tmp_path / "go.mod"
    go_mod.write_text(
        "module m\n\nreplace (\n\tgolang.org/x/sys => golang.org/x/sys v0.40.0\n)\n\n"
        "require (\n\tgolang.org/x/sys v0.46.0 // indirect\n\tk8s.io/api v0.36.3\n)\n"
    )
    assert build_versions(go_mod) == {"golang.org/x/sys": "v0.40.0", "k8s.io/api": "v0.36.3"}


def test_kwok_builds_with_the_module_versions_of_the_kubernetes_release():
    kubernetes = build_versions(UPSTREAM / "kubernetes" / "go.mod")
    kwok = build_versions(UPSTREAM / "kwok" / "go.mod")
    shared = sorted(set(kubernetes) & set(kwok))
    assert len(shared) > 50, shared  # most of what kwok builds: the check has teeth
    apart = {path: (kwok[path], kubernetes[path]) for path in shared if kwok[path] != kubernetes[path]}
    assert not apart, (
        "files/bundle/upstream/kwok/go.mod builds these modules at other versions than the Kubernetes "
        f"release (kwok's, Kubernetes'): {apart}; pin each to the Kubernetes version with a replace "
        "there and run `go mod tidy`"
    )
