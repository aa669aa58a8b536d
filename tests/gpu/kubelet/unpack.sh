#!/usr/bin/env bash
# One carry folder of pack.sh into the GPU host's work folder:  tests/gpu/kubelet/unpack.sh CARRY_DIR...
# Checks each piece against the folder's SHA256SUMS, then unpacks it into $VGPU_KUBELET_WORK/payload
# (default /tmp/vgpu-kubelet/payload), where run.sh finds it. /tmp outlives a call while the machine
# stays warm, so the first call(s) unpack and the last one unpacks its own part and runs run.sh.
set -euo pipefail
WORK=${VGPU_KUBELET_WORK:-/tmp/vgpu-kubelet}
mkdir -p "$WORK/payload"
unxz() { if command -v xz >/dev/null; then xz -dc "$1"; else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"; fi; }
for dir in "$@"; do
    (cd "$dir" && sha256sum -c --quiet SHA256SUMS) || { echo "!! $dir: a piece does not match its SHA256SUMS" >&2; exit 1; }
    for piece in "$dir"/*.tar.xz; do
        started=$(date +%s)
        unxz "$piece" | tar -C "$WORK/payload" -x
        echo ">> $(basename "$piece") ($(du -m "$piece" | cut -f1) MiB) unpacked into $WORK/payload in $(($(date +%s) - started)) s"
    done
done
du -sh "$WORK/payload"/* 2>/dev/null
