#!/usr/bin/env bash
# Two builds side by side in one device session: `deltaserve bench decode|prefill` of bundle A,
# then B, then B, then A (one process each), the table rows labelled by the bundle's name, so
# drift on the device shows as a difference between a bundle's two runs. Bundles are made by
# scripts/bundle_gpu.sh. Usage, from the repository root on the GPU host:
#   bench/tools/binary_ab.sh BUNDLE_A BUNDLE_B decode|prefill "BENCH ARGS"
#   bench/tools/binary_ab.sh base new decode "--preset qwen3.6-27b --weights q4_0 --device cuda --batch 1,16,64 --steps 10"
set -uo pipefail
bundle_a=${1:?bundle A}
bundle_b=${2:?bundle B}
mode=${3:?decode or prefill}
args=${4:?bench arguments}
for bundle in "$bundle_a" "$bundle_b" "$bundle_b" "$bundle_a"; do
  # shellcheck disable=SC2086
  LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$bundle/cli/deltaserve" bench "$mode" $args 2>&1 |
    grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+ ' | sed "s|^|[$(basename "$bundle")] |"
done
