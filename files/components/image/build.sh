#!/usr/bin/env bash
# Build the component image localhost/vgpu-components:<version> without a container daemon or
# registry: a debootstrap Debian 12 (minbase + python3) root filesystem, our wheel and its dependency
# wheels, packed by oci_archive.py (beside this script) into the OCI image archive
# build/images/vgpu-components-<version>.tar (importable with `ctr -n k8s.io images import`,
# `k3s ctr images import` and `docker load`). The same inputs give the same image digest.
#
# Usage: files/components/image/build.sh [WHEELHOUSE]
#   WHEELHOUSE (or $VGPU_WHEELHOUSE): folder of dependency wheels for CPython 3.11 x86_64, holding
#   those pinned in requirements.txt (beside this script); without it they are downloaded from PyPI
#   once into the cache.
# Needs root (debootstrap, chroot) and debootstrap, which `make image` installs when missing.
# Environment: VGPU_CACHE_DIR (default ~/.cache/vgpu-isolation; the root filesystem is cached
#   there keyed by the hash of its recipe, debootstrap's .deb files in $VGPU_CACHE_DIR/debs),
#   DEBIAN_MIRROR, PYTHON (the build Python with pip, setuptools and grpcio-tools; default
#   .venv/bin/python), OUT_DIR (default build/images), SOURCE_DATE_EPOCH (the archive's times, 0).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
components=$(dirname "$here")
root=$(cd "$components/../.." && pwd)
# The contract's version (contract/contract.yml, generated into the package), which the wheel carries.
version=$(sed -n 's/^VERSION = "\(.*\)"$/\1/p' "$components/src/vgpu_components/contract.py")
python=${PYTHON:-$root/.venv/bin/python}
cache=${VGPU_CACHE_DIR:-$HOME/.cache/vgpu-isolation}
wheelhouse=${1:-${VGPU_WHEELHOUSE:-}}
out_dir=${OUT_DIR:-$root/build/images}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
image=localhost/vgpu-components:$version
py_version=3.11  # Debian 12's python3

# --- 1. base root filesystem (cached by recipe hash) ------------------------------------------
suite=bookworm
variant=minbase
include=python3
recipe="suite=$suite variant=$variant include=$include mirror=$mirror recipe=1"
recipe_hash=$(printf '%s' "$recipe" | sha256sum | cut -c1-16)
base_tar=$cache/rootfs/debian12-python3-$recipe_hash.tar
mkdir -p "$cache/rootfs" "$cache/debs" "$out_dir"

work=$(mktemp -d "${TMPDIR:-/tmp}/vgpu-image.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

if [[ ! -s $base_tar ]]; then
    echo ">> debootstrap $suite ($variant + $include) into the cache ($recipe_hash)"
    command -v debootstrap >/dev/null || "$root/tests/harness/ensure-debian-packages.sh" debootstrap
    nice -n 10 debootstrap --variant="$variant" --include="$include" --cache-dir="$cache/debs" \
        "$suite" "$work/base" "$mirror" >"$work/debootstrap.log" 2>&1 \
        || { tail -n 40 "$work/debootstrap.log" >&2; exit 1; }
    # Keep the image small: no package lists, docs, man pages or locales.
    rm -rf "$work/base/var/lib/apt/lists/"* "$work/base/var/cache/apt/"*.bin \
        "$work/base/usr/share/doc/"* "$work/base/usr/share/man/"* "$work/base/usr/share/info/"* \
        "$work/base/usr/share/locale/"* "$work/base/var/log/"*
    tar -C "$work/base" --numeric-owner -cf "$base_tar.tmp" .
    mv "$base_tar.tmp" "$base_tar"
    rm -rf "$work/base"
else
    echo ">> base root filesystem from the cache: $base_tar"
fi

# --- 2. wheels ----------------------------------------------------------------------------
echo ">> building the vgpu-components wheel"
make -s -C "$components" PYTHON="$python" WHEEL_DIR="$work/dist" wheel >/dev/null
pip_target=(--only-binary=:all: --implementation cp --python-version "$py_version" --abi cp311 --abi abi3 --abi none
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
# The dependencies at the pins the tests ran (requirements.txt beside this script, which `make lock`
# writes from requirements-dev.txt), not whatever PyPI or the wheel cache holds newest today.
pinned=$here/requirements.txt
if [[ -z $wheelhouse ]]; then
    wheelhouse=$cache/wheels/cp311-x86_64
    mkdir -p "$wheelhouse"
    echo ">> dependency wheels at the pins of $pinned (from PyPI, once) into $wheelhouse"
    "$python" -m pip download --quiet --no-deps "${pip_target[@]}" -d "$wheelhouse" -r "$pinned"
fi
echo ">> installing into the image from $wheelhouse"
mkdir -p "$work/rootfs"
tar -C "$work/rootfs" -xf "$base_tar"
# Debian 12's packages are the same whichever day debootstrap ran, but it writes that day into two
# files: each account's last password change in /etc/shadow (emptied: no password ageing, and every
# account's password is locked anyway) and ldconfig's aux-cache (a cache only, dropped). Without them
# the digest depends on the build's root filesystem and sources alone, not on the day.
sed -i -E 's/^([^:]*:[^:]*:)[0-9]*:/\1:/' "$work/rootfs/etc/shadow"
rm -f "$work/rootfs/var/cache/ldconfig/aux-cache"
site=$work/rootfs/usr/local/lib/python$py_version/dist-packages
# By name from a folder, not by path: pip records a path (a temporary one here) in direct_url.json.
# --no-deps: the pinned list is the whole closure (tests/unit/test_locks.py holds it to that).
"$python" -m pip install --quiet --no-index --no-deps --find-links "$work/dist" --find-links "$wheelhouse" \
    "${pip_target[@]}" --no-compile --target "$site" -r "$pinned" "vgpu-components==$version"
# Trim what the components never load: pip's script folder, the kubernetes client's asyncio
# variant (as large as the sync client), and the .deb files debootstrap leaves behind.
rm -rf "${site:?}/bin" "${site:?}/kubernetes/aio" "${work:?}/rootfs/var/cache/apt/archives/"*.deb
# The scripts pip made there start with the build Python's path, and each package's RECORD holds
# their hashes: dropping those lines keeps RECORD true and the digest free of where the build ran.
sed -i '\#^\.\./\.\./bin/#d' "$site"/*.dist-info/RECORD
# Byte code keyed by the sources' hashes, not their times: reproducible, and never stale.
chroot "$work/rootfs" python3 -m compileall -q --invalidation-mode unchecked-hash \
    "/usr/local/lib/python$py_version/dist-packages" >/dev/null

# Console scripts (pip --target does not write them for the image's interpreter).
for entry in nvidia-shared-device-plugin:device_plugin gpushare-scheduler-extender:extender \
    cgpu-monitor:monitor nvidia-mps:mps vgpu-dra-driver:dra_driver; do
    name=${entry%%:*}
    module=${entry##*:}
    printf '#!/usr/bin/python3\nimport sys\nfrom vgpu_components.%s import main\nsys.exit(main())\n' "$module" \
        >"$work/rootfs/usr/local/bin/$name"
    chmod 0755 "$work/rootfs/usr/local/bin/$name"
done

# --- 3. the OCI image archive -----------------------------------------------------------------
tarball=$out_dir/vgpu-components-$version.tar
"$python" "$here/oci_archive.py" "$work/rootfs" "$tarball" --ref "$image" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/nvidia/bin \
    --env PYTHONUNBUFFERED=1 --env PYTHONDONTWRITEBYTECODE=1 \
    --cmd '["nvidia-shared-device-plugin", "--help"]' \
    --label org.opencontainers.image.title=vgpu-components --label "org.opencontainers.image.version=$version"
echo ">> $image: $(du -m "$tarball" | cut -f1) MiB archive, $(du -sm "$work/rootfs" | cut -f1) MiB unpacked"
