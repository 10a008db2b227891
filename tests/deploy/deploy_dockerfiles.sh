#!/usr/bin/env bash
# Container files (deploy/docker): no container engine runs in CI, so the Dockerfiles are
# linted (hadolint when installed; dockerfile-utils and the project's hadolint-style rules
# always). See tests/deploy/dockerfile_check.mjs.
set -euo pipefail
cd "$(dirname "$0")/../.."
node tests/deploy/dockerfile_check.mjs
