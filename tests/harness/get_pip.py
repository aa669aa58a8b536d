"""Offline stand-in for pip's get-pip.py bootstrap script, used by `ansible-test sanity --venv`.

ansible-test downloads get-pip.py from a host our machines cannot reach; it only needs a script
that, run inside a fresh virtual environment, installs the requested pip. The interpreter's own
bundled pip (ensurepip) does the bootstrap, then that pip installs the pinned version from PyPI.
"""

import ensurepip
import os
import runpy
import sys

# get-pip.py's own switches; pip install does not know them.
_GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}

if __name__ == "__main__":
    saved = dict(os.environ)
    ensurepip.bootstrap(upgrade=True)
    # ensurepip turns off pip's configuration for the rest of the process (PIP_CONFIG_FILE=/dev/null);
    # the real install must see it (a site's index, proxy or CA bundle lives there).
    os.environ.clear()
    os.environ.update(saved)
    sys.argv = ["pip", "install", *[arg for arg in sys.argv[1:] if arg not in _GET_PIP_ONLY]]
    runpy.run_module("pip", run_name="__main__", alter_sys=True)
