#!/usr/bin/env bash
# The site virtualenv of `make site` (issue 25): requirements-site.txt, not the test tool chain.
# With the offline bundle's wheels (air-gapped), nothing is downloaded and no Debian package is
# needed: pip itself comes from the bundle's pip wheel. Without them, from PyPI; python3-venv is
# installed first when this Python lacks ensurepip (Debian ships it separately).
#
# Usage: files/site/venv.sh VENV REQUIREMENTS [WHEELHOUSE]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${1:?usage: $0 VENV REQUIREMENTS [WHEELHOUSE]}
requirements=${2:?usage: $0 VENV REQUIREMENTS [WHEELHOUSE]}
wheels=${3:-}

rm -rf "$venv"
if [[ -n $wheels ]]; then
    pip_wheel=$(find "$wheels" -maxdepth 1 -name 'pip-*.whl' | sort -V | tail -n 1)
    [[ -n $pip_wheel ]] || {
        echo "!! $wheels has no pip wheel: rebuild the offline bundle with \`make bundle\` (it adds site/wheels)" >&2
        exit 1
    }
    echo ">> creating the site virtualenv $venv from the offline bundle's wheels ($wheels)"
    python3 -m venv --without-pip "$venv"
    "$venv/bin/python" "$pip_wheel/pip" install --quiet --disable-pip-version-check --no-index \
        --find-links "$wheels" "$pip_wheel"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-index --find-links "$wheels" \
        --no-deps -r "$requirements"
else
    python3 -c 'import ensurepip' 2>/dev/null || "$root/tests/harness/ensure-debian-packages.sh" python3-venv
    echo ">> creating the site virtualenv $venv from PyPI ($requirements)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$requirements"
fi
