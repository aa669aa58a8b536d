#!/usr/bin/env bash
# Smoke test of the components on a real GPU host (the team's H200 machine).
# The host has no package registry: the caller puts the runtime wheels (grpcio, protobuf,
# prometheus_client, kubernetes and its dependencies, pyyaml, nvidia-ml-py) on PYTHONPATH, and
# the generated gRPC stubs must exist (`make -C files/components proto` before copying the tree).
#   PYTHONPATH=/path/to/site-packages files/components/tests/gpu_smoke.sh
#   VGPU_WHEELHOUSE=/path/to/wheels files/components/tests/gpu_smoke.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../src" && pwd)
root=$(cd "$here/../../.." && pwd)  # tests.polling, the wait helper of the test fakes
if ! ls "$src"/vgpu_components/proto/deviceplugin_pb2.py >/dev/null 2>&1; then
    echo "gRPC stubs missing in $src/vgpu_components/proto: run 'make -C files/components proto' first" >&2
    exit 2
fi
# VGPU_WHEELHOUSE: a folder of cp312 manylinux wheels to use when no site-packages is given;
# wheels are zip files, so they are unpacked here without pip.
if [[ -n ${VGPU_WHEELHOUSE:-} ]]; then
    site=$(mktemp -d "${TMPDIR:-/tmp}/vgpu-smoke-site.XXXXXX")
    trap 'rm -rf "$site"' EXIT
    "${PYTHON:-python3}" -c 'import glob, sys, zipfile
for wheel in sorted(glob.glob(sys.argv[1] + "/*.whl")):
    zipfile.ZipFile(wheel).extractall(sys.argv[2])' "$VGPU_WHEELHOUSE" "$site"
    PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$src:$here:$root${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$PATH:/usr/local/nvidia/bin"
# Where GPU containers get the driver libraries (libnvidia-ml.so.1) when not in the default paths.
for lib in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    if [[ -d $lib ]]; then
        export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
done
"${PYTHON:-python3}" "$here/gpu_smoke.py" "$@"
