#!/usr/bin/env bash
# CI compile check of the single-source GPU kernels (no GPU needed): every kernels/<op>/*.cu is
# compiled (-c only) by nvcc for sm_90 and sm_80, and by Debian's hipcc (ROCm 5.2) for gfx906
# and gfx90a, warnings as errors. The two halves run side by side (CI has 2 cores). Fails if
# either compiler is missing: CI machines carry both (nvcc in the CUDA toolkit, hipcc from
# scripts/setup.sh). Run from the repository root.
set -euo pipefail

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
HIPCC=${HIPCC:-$(command -v hipcc || true)}
if [[ ! -x "$NVCC" ]]; then echo "compile_check: nvcc not found (set NVCC)"; exit 1; fi
if [[ -z "$HIPCC" || ! -x "$HIPCC" ]]; then echo "compile_check: hipcc not found (scripts/setup.sh installs it)"; exit 1; fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
sources=(kernels/*/*.cu)

# nvcc unoptimised (-O0 through its front end, cicc and ptxas): the check is about the source
# compiling for each target, not about the generated code, and the optimisers are most of its
# time. hipcc stays at -O1: at -O0 the GDN step's register arrays go to the stack and exceed
# the 64 KB local-memory limit.
compile_cuda() {
  for src in "${sources[@]}"; do
    "$NVCC" -std=c++17 -O0 -I. -Werror all-warnings -Xcicc -O0 -Xptxas -O0 \
      -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 \
      -c "$src" -o "$out/$(basename "$src" .cu).cuda.o" || return 1
  done
}

compile_hip() {
  for src in "${sources[@]}"; do
    # rocm_agent_enumerator (no AMD GPU here) may print a traceback; targets are explicit.
    "$HIPCC" -std=c++17 -O1 -x hip --offload-arch=gfx906 --offload-arch=gfx90a -I. -Wall -Werror \
      -c "$src" -o "$out/$(basename "$src" .cu).hip.o" 2> >(grep -v -e rocm_agent_enumerator -e '^Traceback' -e '^  File' -e '^    ' >&2) \
      || return 1
  done
}

start=$SECONDS
compile_cuda > "$out/cuda.log" 2>&1 &
cuda_pid=$!
compile_hip > "$out/hip.log" 2>&1 &
hip_pid=$!
status=0
if ! wait "$cuda_pid"; then echo "compile_check: nvcc FAILED"; cat "$out/cuda.log"; status=1; fi
if ! wait "$hip_pid"; then echo "compile_check: hipcc FAILED"; cat "$out/hip.log"; status=1; fi
if [[ $status -eq 0 ]]; then
  echo "compile_check: ${#sources[@]} kernel sources compiled for sm_90, sm_80 (nvcc) and gfx906, gfx90a (hipcc) in $((SECONDS - start)) s"
fi
exit $status
