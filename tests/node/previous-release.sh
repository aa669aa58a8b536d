#!/usr/bin/env bash
# What a site provisioned by an earlier release has, for `make e2e-node-upgrade`:
#   tests/node/previous-release.sh <git revision> <folder>
# writes into <folder>:
#   checkout/  a clone of that revision, as its operator has it; its e2e inventory
#              (tests/node/group_vars/all.yml) gets the settings of OLD_NAMES below, under the names
#              that release read (the vgpu_stack_* names the contract retired), as an operator's
#              group_vars would have them;
#   bundle/    this checkout's offline bundle (build/bundle, hard links) with that release's
#              component image in place of this one's, and SHA256SUMS to match.
# The component image of that revision is built by its own `make image` (its virtualenv; the image
# cache is shared, so an unchanged layer is not built twice).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
revision=${1:?usage: previous-release.sh <git revision> <folder>}
out=${2:?usage: previous-release.sh <git revision> <folder>}
bundle=${VGPU_E2E_BUNDLE:-$root/build/bundle}
log() { echo ">> $(date +%T) $*"; }

# The settings an operator of that release set under its names, and what the components must be
# given after the upgrade (checked by run-e2e.sh against the ConfigMap).
OLD_NAMES='vgpu_stack_enforcement_grace_seconds: 45
vgpu_stack_log_format: text
vgpu_stack_reserved_mib: 256'

git -C "$root" rev-parse --verify --quiet "$revision^{commit}" >/dev/null \
    || { echo "!! $revision: not a commit of $root; expected a revision of an earlier release" >&2; exit 2; }
[[ -f $bundle/SHA256SUMS ]] || { echo "!! $bundle has no SHA256SUMS: run make bundle first" >&2; exit 2; }
mkdir -p "$out"
if [[ $(git -C "$out/checkout" rev-parse HEAD 2>/dev/null) != $(git -C "$root" rev-parse "$revision^{commit}") ]]; then
    rm -rf "$out/checkout"
    git clone --quiet --shared --no-checkout "$root" "$out/checkout"
    git -C "$out/checkout" checkout --quiet --detach "$revision"
fi
git -C "$out/checkout" checkout --quiet -- tests/node/group_vars/all.yml
printf '# An inventory of release %s: settings under the names it read.\n%s\n' "$revision" "$OLD_NAMES" \
    >>"$out/checkout/tests/node/group_vars/all.yml"
log "the component image of $revision (its make image)"
make -C "$out/checkout" image >"$out/image.log" 2>&1 || { tail -n 30 "$out/image.log" >&2; exit 1; }
image=$(cd "$out/checkout/build/images" && ls vgpu-components-*.tar)
[[ -f $bundle/images/$image ]] || { echo "!! $bundle/images has no $image to replace" >&2; exit 1; }

log "the bundle with that image: $out/bundle"
rm -rf "$out/bundle"
cp -al "$bundle" "$out/bundle"
rm -f "$out/bundle/images/$image" "$out/bundle/SHA256SUMS"
cp "$out/checkout/build/images/$image" "$out/bundle/images/$image"
sum=$(sha256sum "$out/bundle/images/$image" | cut -d' ' -f1)
sed -E "s#^[0-9a-f]{64}  images/$image\$#$sum  images/$image#" "$bundle/SHA256SUMS" >"$out/bundle/SHA256SUMS"
grep -q "^$sum  images/$image\$" "$out/bundle/SHA256SUMS" || { echo "!! SHA256SUMS lists no images/$image" >&2; exit 1; }
