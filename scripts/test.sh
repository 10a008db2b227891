#!/usr/bin/env bash
# Installs every dependency, builds, and runs every test: the release build runs all suites
# (unit, model-vs-transformers fixtures, tools, server end-to-end), then the ASan+UBSan
# build runs the unit suites again. CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/setup_npm.sh
jobs=$(nproc)

echo "== release build"
cmake --preset release >/dev/null
cmake --build --preset release -j"$jobs"
ctest --preset release -j"$jobs"

echo "== sanitizer build (ASan + UBSan), unit tests"
cmake --preset asan >/dev/null
cmake --build --preset asan -j"$jobs"
ctest --preset asan -j"$jobs"
