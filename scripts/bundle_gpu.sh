#!/usr/bin/env bash
# Copies the GPU build's programs (daemon, load tool, GPU test programs) with the shared
# libraries they need beyond the C/C++ runtime into one small folder laid out like a build
# folder, for a GPU host without spdlog/fmt/prometheus-cpp. Usage:
#   scripts/bundle_gpu.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=${1:?build dir}
out=${2:?out dir}
rm -rf "$out"
for rel in cli/deltaserve loadtest/deltaserve-load tests/gpu_backend_tests kernels/gpu_kernel_tests; do
  [[ -x "$build/$rel" ]] || { echo "missing $build/$rel" >&2; exit 1; }
  scripts/bundle_libs.sh "$out/$(dirname "$rel")" "$build/$rel" >/dev/null
  if [[ -d "$out/$(dirname "$rel")/lib" ]]; then
    mkdir -p "$out/lib"
    cp -f "$out/$(dirname "$rel")/lib/"* "$out/lib/" 2>/dev/null || true
    rm -rf "$out/$(dirname "$rel")/lib"
  fi
done
strip --strip-debug "$out"/*/* 2>/dev/null || true
du -sh "$out"
