#!/usr/bin/env bash
# Debian's etcd-server provides the etcd binary. Its packaged service must not run: the tests
# start their own etcd on loopback with a temporary data folder.
set -euo pipefail
command -v etcd >/dev/null && exit 0
command -v apt-get >/dev/null || { echo "!! etcd is missing and apt-get is not available: install etcd >= 3.4" >&2; exit 1; }
[[ "$(id -u)" == 0 ]] || { echo "!! etcd is missing: run 'sudo apt-get install etcd-server' (then 'sudo systemctl disable --now etcd')" >&2; exit 1; }
# policy-rc.d answering 101 keeps the package's scripts from starting the service.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
fi
trap '[[ $own_policy == 1 ]] && rm -f "$policy"' EXIT
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server
if [[ -d /run/systemd/system ]]; then
    systemctl disable --now etcd.service || true
fi
