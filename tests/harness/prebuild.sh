#!/usr/bin/env bash
# Starts the Go builds of the upstream binaries (files/bundle/build-binaries.sh) in the background,
# so that they use the second core while the early layers of `make test` (lint, sanity, unit tests:
# mostly one Python process at a time) run. The e2e layers call build-binaries.sh again, which
# waits on its lock for this build and then reuses it. Log: build/logs/prebuild.log.
# If it fails, the e2e layer's own call builds again and shows the error.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
logs=$root/build/logs
mkdir -p "$logs"
nohup "$root/files/bundle/build-binaries.sh" >"$logs/prebuild.log" 2>&1 &
echo ">> upstream binaries building in the background (log: build/logs/prebuild.log)"
