"""Print a setting's literal value from an inventory, before any virtualenv or Ansible exists.

Usage: inventory_setting.py INVENTORY NAME

`make site` reads vgpu_offline_bundle_dir (the bundle's wheels build the site virtualenv) and
vgpu_component_image_import (whether the component image is built when missing) this way. It looks
in the inventory file, then in the group_vars/ and host_vars/ beside it, for a line `NAME: value`,
and prints the first value found (nothing when none is). A templated value cannot be read before
Ansible runs: it says so and names the make variable that gives it instead. An offline bundle that
is not on this machine (no site/wheels in it) is refused with the file that names it and the fix.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MAKE_VARIABLE = {"vgpu_offline_bundle_dir": "BUNDLE", "vgpu_component_image_import": "IMAGE_IMPORT"}


def candidates(inventory: Path) -> list[Path]:
    files = [inventory] if inventory.is_file() else []
    base = inventory.parent if inventory.is_file() else inventory
    for folder in ("group_vars", "host_vars"):
        if (base / folder).is_dir():
            files += sorted(p for p in (base / folder).rglob("*") if p.is_file() and p.suffix in ("", ".yml", ".yaml"))
    return files


def value(inventory: Path, name: str) -> str:
    return found(inventory, name)[0]


def found(inventory: Path, name: str) -> tuple[str, Path | None]:
    """The setting's literal value and the file that sets it; ("", None) when none does."""
    pattern = re.compile(rf"^\s*{re.escape(name)}\s*:\s*(.*?)\s*$")
    for path in candidates(inventory):
        for line in path.read_text(errors="replace").splitlines():
            match = pattern.match(line)
            if not match:
                continue
            raw = re.sub(r"\s+#.*$", "", match.group(1)).strip()
            found = raw[1:-1] if len(raw) > 1 and raw[0] == raw[-1] and raw[0] in "'\"" else raw
            if "{{" in found:
                variable = MAKE_VARIABLE.get(name, name.upper())
                raise SystemExit(
                    f"{path}: {name} is templated ({found}); make cannot read it before Ansible runs:"
                    f" give its value as `make ... {variable}=<value>`"
                )
            return found, path
    return "", None


def bundle_problem(bundle: str, source: Path | None) -> str:
    """Why the offline bundle named in `source` cannot be used here; "" when it can (or none is named)."""
    if not bundle or (Path(bundle) / "site" / "wheels").is_dir():
        return ""
    what = "which is no offline bundle on this machine"
    what += " (it has no site/wheels)" if Path(bundle).is_dir() else " (no such folder)"
    return (
        f"{source}: vgpu_offline_bundle_dir is {bundle}, {what}. The offline bundle is for air-gapped"
        " sites: on a connected machine, remove that line (or comment it out) and everything is"
        " downloaded; on an air-gapped one, build the bundle with `make bundle` on a connected"
        " Debian 12 machine and copy its build/bundle to this folder (README.md, 'Using it on your site')."
    )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    setting, source = found(Path(sys.argv[1]), sys.argv[2])
    problem = bundle_problem(setting, source) if sys.argv[2] == "vgpu_offline_bundle_dir" else ""
    if problem:
        raise SystemExit(problem)
    print(setting)
