"""Copy one collection out of the Ansible community package wheel into a collections path.

Usage: extract_collection.py WHEEL NAMESPACE/NAME COLLECTIONS_DIR
"""

import shutil
import sys
import zipfile
from pathlib import Path


def extract(wheel: Path, collection: str, dest: Path) -> int:
    prefix = f"ansible_collections/{collection}/"
    target = dest / "ansible_collections" / collection
    shutil.rmtree(target, ignore_errors=True)
    count = 0
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if member.filename.startswith(prefix) and not member.is_dir():
                archive.extract(member, dest)
                count += 1
    if not (target / "MANIFEST.json").is_file():
        raise SystemExit(f"{wheel} has no {collection} collection (looked for {prefix}MANIFEST.json)")
    return count


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    files = extract(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
    print(f">> {sys.argv[2]}: {files} files in {sys.argv[3]}")
