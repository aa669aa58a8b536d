"""The newcomer's pages (issue 41): a first-run page from nothing to the pod under its quota, with a
glossary, linked from the README beside docs/pods.md; docs/variables.md opens with what an operator
sets, not with the project's test and lint internals."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_links_the_first_run_page_and_the_pod_writers_page():
    readme = (ROOT / "README.md").read_text()
    assert "docs/first-run.md" in readme and "docs/pods.md" in readme
    steps = readme[readme.index("## Using it on your site") :]
    assert steps.index("make check INVENTORY=") < steps.index("make site INVENTORY=")
    assert "Connected machine" in steps and "Air-gapped site" in steps


def test_the_first_run_page_reaches_the_pod_and_explains_its_words():
    page = (ROOT / "docs" / "first-run.md").read_text()
    assert "1200MiB /  3000MiB" in page and "docs/pods.md" in page
    glossary = page[page.index("## Glossary") :]
    for term in (
        "**unit**",
        "**extender**",
        "**interposer / libvgpu**",
        "**the component image**",
        "**the offline bundle**",
    ):
        assert term in glossary, term
    for fact in ("outside the checkout, under version control", "Debian 12", "Root, for the component image"):
        assert fact in page, fact
    assert "`make bundle` installs Docker" in page


def test_variables_md_opens_with_what_an_operator_sets():
    page = (ROOT / "docs" / "variables.md").read_text()
    opening = page[: page.index("\n## ")]
    assert not re.search(r"make lint|make generate|tests/unit|ansible-lint", opening), opening
    assert "group_vars" in opening
    testing = (ROOT / "docs" / "testing.md").read_text()
    assert "One contract." in testing and "var-naming[no-role-prefix]" in testing
