#!/usr/bin/env bash
# Runs gpu_backend_tests (GpuBackend vs CpuBackend) on a GPU machine, from the repository root,
# with output for a log: device, binary, every test line, the summary, exit status.
#   tests/gpu/run_backend_checks.sh [build dir] [extra gtest args...]
# The build dir defaults to $DELTASERVE_BUILD_DIR, else build/gpubackend. CTest registers every
# tests/<folder>/*.sh; without a GPU build or a device this prints SKIP and exits 0 (CI).
set -u
cd "$(dirname "$0")/../.."
build="${1:-${DELTASERVE_BUILD_DIR:-build/gpubackend}}"
[ $# -gt 0 ] && shift
bin="$build/tests/gpu_backend_tests"
if [ ! -x "$bin" ]; then
  echo "SKIP: $bin not built (configure with -DDELTASERVE_CUDA=ON or -DDELTASERVE_HIP=ON)"
  exit 0
fi
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; } &&
   ! { command -v rocm-smi >/dev/null 2>&1 && rocm-smi >/dev/null 2>&1; }; then
  echo "SKIP: no GPU device on this machine"
  exit 0
fi
echo "== gpu_backend_tests $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
command -v rocm-smi >/dev/null 2>&1 && rocm-smi --showproductname 2>/dev/null | head -5
echo "== $bin $*"
start=$(date +%s)
"$bin" --gtest_color=no --gtest_print_time=1 "$@"
status=$?
echo "== exit status $status after $(( $(date +%s) - start )) s"
exit $status
