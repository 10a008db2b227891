#!/usr/bin/env bash
# Device-side profile of the decode kernels (Nsight Compute): per-kernel durations of one eager
# batch-1 decode step of the 35B-A3B (ranked in kernels_b1.txt by bench/tools/kernel_table.py;
# MATVEC=fma|staged|tensor picks the decode matvec, default auto: staged at one stream),
# plus stall reasons / occupancy of the matvec at two shapes. Usage on the GPU host, from the repository root: bench/tools/profile_decode.sh BUNDLE OUT
set -u
bundle=${1:?bundle}; out=${2:?out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cuobjdump --dump-sass "$bundle/kernels/gpu_kernel_tests" > "$out/sass_all.txt" 2>&1
awk '/Function : .*matvec_kernel.*DecodeQ4_0ELi1E/{on=1} on&&/Function : /&&!/DecodeQ4_0ELi1E/{on=0} on' "$out/sass_all.txt" > "$out/sass_q4_0_r1.txt"
rm -f "$out/sass_all.txt"
cuobjdump --dump-resource-usage "$bundle/kernels/gpu_kernel_tests" 2>&1 | grep -A1 matvec > "$out/resources.txt"
# Durations of every kernel of a short eager run; the last LAUNCHES (default 297, the bench's
# launches/step at one stream) are the timed decode step: kernels_b1.txt ranks them.
timeout 300 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  "$bundle/cli/deltaserve" bench decode --preset qwen3.6-35b-a3b --weights q4_0 --device cuda --batch 1 --context 1024 \
  --steps 1 --warmup 1 --matvec "${MATVEC:-auto}" --step-graphs off > "$out/ncu_decode_b1.csv" 2> "$out/ncu_decode_b1.err"
echo "ncu decode rc=$?"
python3 bench/tools/kernel_table.py "$out/ncu_decode_b1.csv" "${LAUNCHES:-297}" > "$out/kernels_b1.txt"
# Matvec detail: the kernel bench's qkv rows=1 launches (skip warmups), full-ish sections.
timeout 150 ncu --clock-control none --kernel-name regex:matvec --launch-skip 5 --launch-count 3 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --section MemoryWorkloadAnalysis \
  "$bundle/kernels/gpu_kernel_tests" --bench > "$out/ncu_matvec.txt" 2>&1
echo "ncu matvec rc=$?"
