#!/usr/bin/env bash
# Every metric that the Grafana dashboard, the alert rules and the HPA's adapter rules query
# exists on a live daemon's /metrics (and every expression parses). Starts the daemon from
# $DELTASERVE_BUILD_DIR (ctest sets it). See tests/deploy/metric_names.mjs.
set -euo pipefail
cd "$(dirname "$0")/../.."
node tests/deploy/metric_names.mjs
