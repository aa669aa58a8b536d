"""Put tests/harness/get_pip.py where ansible-test looks for its cached pip bootstrap script.

ansible-test names the cache file after the pip version it pins; read that pin from its source
so an ansible-core upgrade cannot silently bypass the stand-in.
"""

import re
import shutil
from pathlib import Path

import ansible_test

source = Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
match = re.search(r"pip='([0-9.]+)'", source.read_text())
if not match:
    raise SystemExit(f"cannot find ansible-test's pinned pip version in {source}")
target = Path.home() / ".ansible" / "test" / "cache" / f"get_pip_{match.group(1).replace('.', '_')}.py"
target.parent.mkdir(parents=True, exist_ok=True)
shutil.copyfile(Path(__file__).with_name("get_pip.py"), target)
print(f">> pip bootstrap for ansible-test: {target}")
