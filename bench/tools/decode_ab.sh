#!/usr/bin/env bash
# Side-by-side decode settings in one device session: each setting's `deltaserve bench decode`
# in order, then again in reverse (A B C C B A), one process each, the table rows labelled by
# setting, so drift on the device shows as a difference between a setting's two runs. A
# setting is a space-separated list of environment assignments ("-" for none). Usage, from the
# repository root on the GPU host (a bundle made by scripts/bundle_gpu.sh):
#   bench/tools/decode_ab.sh BUNDLE "BENCH ARGS" SETTING...
#   bench/tools/decode_ab.sh gpu_bundle "--preset qwen3.6-27b --weights q4_0 --device cuda --context 512 --steps 5 --batch 1" \
#     - CUDA_DEVICE_MAX_CONNECTIONS=1
set -uo pipefail
bundle=${1:?bundle}
args=${2:?bench decode arguments}
shift 2
(($# > 0)) || { echo "decode_ab: no settings" >&2; exit 2; }
export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
settings=("$@")
order=()
for ((i = 0; i < ${#settings[@]}; ++i)); do order+=("$i"); done
for ((i = ${#settings[@]} - 1; i >= 0; --i)); do order+=("$i"); done
for i in "${order[@]}"; do
  setting=${settings[$i]}
  assignments=()
  [[ "$setting" == "-" ]] || read -r -a assignments <<< "$setting"
  # shellcheck disable=SC2086
  env "${assignments[@]}" "$bundle/cli/deltaserve" bench decode $args 2>&1 |
    grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+ ' | sed "s|^|[$setting] |"
done
