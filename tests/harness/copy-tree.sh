#!/usr/bin/env bash
# Copies the files git knows (tracked, or new and not ignored) into DEST: what a clean clone of
# this working tree holds, without caches, build outputs or virtual environments.
set -euo pipefail
dest=$1
rm -rf "$dest"
mkdir -p "$dest"
git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' path; do [[ -e $path || -L $path ]] && printf '%s\0' "$path"; done \
    | xargs -0 --no-run-if-empty cp -P --parents -t "$dest"
