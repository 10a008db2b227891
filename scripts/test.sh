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

# The sanitizer run leaves out the longest tests of this stage (CMakePresets.json's asan
# filter): the DFlash block-size sweep and five of the sampled-draws probes (preemption, DFlash,
# one-token parameters, context end, the randomised load), whose code paths the other DFlash
# and sampled-draws tests run under the sanitizers too; the release stage runs them all.
echo "== sanitizer build (ASan + UBSan), unit tests"
cmake --preset asan >/dev/null
cmake --build --preset asan -j"$jobs"
ctest --preset asan -j"$jobs"
