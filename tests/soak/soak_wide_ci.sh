#!/usr/bin/env bash
# The CI soak again with more streams than waiting places (16 streams, 8 waiting) and 16
# clients at once: requests that arrive together while places are free must all get them.
# (Until the engine counted only the requests past its free places, 16 simultaneous requests
# on such a server drew 429s the tool rightly failed.) 600 requests; see soak_ci.sh.
set -euo pipefail
export DELTASERVE_SOAK_REQUESTS="${DELTASERVE_SOAK_REQUESTS:-600}"
export DELTASERVE_SOAK_OUT="${DELTASERVE_SOAK_OUT:-$DELTASERVE_BUILD_DIR/soak_wide}"
export DELTASERVE_SOAK_SERVE_ARGS="--max-streams 16 ${DELTASERVE_SOAK_SERVE_ARGS:-}"
export DELTASERVE_SOAK_CONCURRENCY="${DELTASERVE_SOAK_CONCURRENCY:-16}"
exec bash "$(dirname "$0")/soak_ci.sh"
