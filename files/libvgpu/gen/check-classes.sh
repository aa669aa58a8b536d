#!/bin/sh
# The build's check that every driver export is classified and that nothing which allocates or
# keeps memory alive is a plain forward (issue 24).
#   check-classes.sh DEF STAMP EXPORT_LIST... -- REAL_LIB...
# Names: the committed export lists, plus the functions the real libraries on this node export
# (REAL_LIB may be empty or missing). Fails, naming each function, when one is not classified in
# DEF, or is classified allocates / keeps-alive without being a hook and without a reason
# ("allocates: <why it needs no hook>"). Writes STAMP when all is well.
set -eu
def=$1 stamp=$2
shift 2
lists=""
while [ "$1" != "--" ]; do lists="$lists $1"; shift; done
shift
tmp=$stamp.names
names() { sed -e 's/#.*//' -e 's/@.*//' -e 's/[[:space:]]//g' | grep -E '^(cu|nvml)[A-Za-z0-9_]*$' | sort -u; }
# Each name with where it comes from: "L" a committed list (strict), "N" only this node's driver.
# $lists: the committed lists, space-separated paths (split on purpose)
# shellcheck disable=SC2086
cat $lists | names >"$tmp.lists"
for real in "$@"; do
    if [ -n "$real" ] && [ -r "$real" ]; then
        nm -D --defined-only "$real" | awk '$2 == "T" { print $3 }'
    fi
done | names | comm -13 "$tmp.lists" - | sed 's/$/ N/' >"$tmp"
sed 's/$/ L/' "$tmp.lists" >>"$tmp"
rm -f "$tmp.lists"
if awk -F'|' -v def="$def" '
function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
FNR == NR {
    if ($0 ~ /^[ \t]*(#|$)/) next
    name = trim($1)
    if (NF == 2) { role[name] = "-"; class[name] = trim($2) }
    else { role[name] = trim($2); class[name] = trim($3) }
    next
}
{
    split($0, f, " "); n = f[1]
    # NVML manages the GPU and takes no GPU memory for the caller: an NVML name only a newer
    # node driver exports is forwarded with a warning, so a driver update cannot stop the build.
    if (!(n in class) && f[2] == "N" && n ~ /^nvml/) {
        printf "%s: warning: %s (exported by this node'"'"'s driver) is not classified; forwarded as NVML functions are\n", def, n >"/dev/stderr"
        next
    }
    if (!(n in class)) {
        printf "%s: %s is exported by the driver and not classified: add a line \"%s | <class>\" (allocates, keeps-alive, frees, imports or neutral)\n", def, n, n >"/dev/stderr"
        bad++
    } else if ((class[n] == "allocates" || class[n] == "keeps-alive") && role[n] != "hook") {
        printf "%s: %s %s device memory and is not a hook: hook it (role hook), or give the reason it needs none (\"%s: <reason>\")\n", def, n, class[n] == "allocates" ? "allocates" : "keeps", class[n] >"/dev/stderr"
        bad++
    }
}
END { exit bad ? 1 : 0 }' "$def" "$tmp"; then
    rm -f "$tmp"
    touch "$stamp"
else
    rm -f "$tmp" "$stamp"
    echo "check-classes.sh: the driver exports above are not classified safely; the build stops (design.md, \"Every export classified\")" >&2
    exit 1
fi
