#!/usr/bin/env bash
# The CI soak on a replicated daemon: --split replicas over two CPU "devices" (one engine per
# device behind one HTTP front end; docs/configuration.md, "Several devices"). The same mix of
# abuse as soak_ci.sh, 600 requests: every slot, KV block and socket must come back on both
# engines (the daemon-wide series are their sums), both engines must have served requests,
# and the second SIGTERM still ends the drain at once. See soak_ci.sh.
set -euo pipefail
export DELTASERVE_SOAK_REQUESTS="${DELTASERVE_SOAK_REQUESTS:-600}"
export DELTASERVE_SOAK_OUT="${DELTASERVE_SOAK_OUT:-$DELTASERVE_BUILD_DIR/soak_replicas}"
# DELTASERVE_SOAK_DEVICES: the devices (default cpu:0,cpu:1; bench/gpu_replicas.sh gives GPUs).
export DELTASERVE_SOAK_SERVE_ARGS="--split replicas --devices ${DELTASERVE_SOAK_DEVICES:-cpu:0,cpu:1} ${DELTASERVE_SOAK_SERVE_ARGS:-}"
devices="${DELTASERVE_SOAK_DEVICES:-cpu:0,cpu:1}"
commas="${devices//[^,]/}"
export DELTASERVE_SOAK_ENGINES=$((${#commas} + 1))
exec bash "$(dirname "$0")/soak_ci.sh"
