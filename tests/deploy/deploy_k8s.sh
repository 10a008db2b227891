#!/usr/bin/env bash
# Kubernetes manifests (deploy/k8s): schema validation (npm kubernetes-models), strict
# unknown-field check and the wiring between the objects. See tests/deploy/k8s_validate.mjs.
set -euo pipefail
cd "$(dirname "$0")/../.."
node tests/deploy/k8s_validate.mjs
