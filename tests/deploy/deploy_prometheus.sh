#!/usr/bin/env bash
# Prometheus artefacts (deploy/prometheus): the scrape config and the alert rules pass
# promtool's checks (rules linted too), every alert fires in the rule unit tests on synthetic
# series, and every alert has such a test.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=deploy/prometheus

promtool check config "$dir/prometheus.yml"
promtool check rules --lint=all --lint-fatal "$dir"/rules/*.yml
promtool test rules "$dir"/tests/*.test.yml

# Each alert needs a test case that expects it to fire.
missing=0
for alert in $(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\).*/\1/p' "$dir"/rules/*.yml | sort -u); do
  if ! grep -A2 "alertname: $alert\$" "$dir"/tests/*.test.yml | grep -q "exp_labels"; then
    echo "no firing test for alert $alert" >&2
    missing=1
  fi
done
[ "$missing" -eq 0 ]
echo "prometheus: config, rules and rule tests pass"
