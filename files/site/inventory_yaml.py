"""Name each YAML mistake of an inventory by file and line, before Ansible reads it.

Usage: inventory_yaml.py INVENTORY

Ansible names a YAML error in group_vars or host_vars without its file or line ("YAML parsing
failed: While parsing a flow sequence did not find expected ',' or ']'"). `make check` (and every
target that runs the check) runs this first: it parses the inventory file and every file of the
group_vars/ and host_vars/ beside it, prints one `path:line:column: problem` per file that is no
valid YAML, with what to do, and exits 1 ("nothing was changed"); silent and 0 when all parse.
Tags Ansible adds (!vault, !unsafe) are accepted as they are.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader that takes any tag (Ansible's !vault, !unsafe) as plain data."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def files(inventory: Path) -> list[Path]:
    """The inventory file (when it is YAML) and the variable files beside it, as Ansible reads them."""
    found = [inventory] if inventory.is_file() and inventory.suffix in (".yml", ".yaml") else []
    base = inventory.parent if inventory.is_file() else inventory
    for folder in ("group_vars", "host_vars"):
        if (base / folder).is_dir():
            found += sorted(
                p for p in (base / folder).rglob("*") if p.is_file() and p.suffix in ("", ".yml", ".yaml", ".json")
            )
    return found


def problems(inventory: Path) -> list[str]:
    """One line per file that is no valid YAML: path:line:column, what the parser found, the fix."""
    out = []
    for path in files(inventory):
        try:
            yaml.load(path.read_text(errors="replace"), Loader=_Loader)  # noqa: S506 (a safe loader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
            said = "; ".join(part for part in (exc.context, exc.problem) if part)
            out.append(f"{where}: not valid YAML: {said}; fix that line (a value with ':', '[' or '{{' needs quotes)")
        except yaml.YAMLError as exc:
            out.append(f"{path}: not valid YAML: {exc}")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    found = problems(Path(sys.argv[1]))
    if found:
        print(f"The inventory has {len(found)} YAML problem(s); nothing was changed.", file=sys.stderr)
        for line in found:
            print(f"  - {line}", file=sys.stderr)
        raise SystemExit(1)
