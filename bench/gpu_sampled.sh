#!/usr/bin/env bash
# Served decode with sampling on the GPU: the daemon (default flags) serving the preset's
# synthetic weights written as a GGUF, deltaserve-load at 1 and 16 streams, greedy and with
# the sampling clients send (temperature 0.7, top_p 0.95: drawn on the device by the draw rule,
# kernels/sampling/draw_gpu.h; only ids leave it). Also `bench decode --sampled-streams` (the
# device draw inside the step, and the host draw from copied logits) next to the device-greedy
# step. Prints one table.
# Usage (repository root, on a GPU host): bench/gpu_sampled.sh BUILD_OR_BUNDLE_DIR OUT_DIR
# Environment: PRESET (qwen3.6-35b-a3b), WEIGHTS (q4_0), DEVICE (cuda), GGUF (default
# OUT_DIR/model.gguf, removed after).
set -euo pipefail
build=${1:?build or bundle dir}
out=${2:?out dir}
mkdir -p "$out"
preset=${PRESET:-qwen3.6-35b-a3b}
weights=${WEIGHTS:-q4_0}
device=${DEVICE:-cuda}
gguf=${GGUF:-$out/model.gguf}
export DELTASERVE_BUILD_DIR="$build"
source tests/soak/daemon_lib.bash
trap 'stop_daemon; rm -f "$gguf"' EXIT
cli="$build/cli/deltaserve"
load="$build/loadtest/deltaserve-load"

for mode in greedy sampled host; do
  extra=()
  [[ $mode == sampled ]] && extra=(--sampled-streams 16)
  [[ $mode == host ]] && extra=(--sampled-streams 16 --sampled-on-host)
  "$cli" bench decode --preset "$preset" --weights "$weights" --device "$device" --batch 16 --context 128 --steps 32 \
    --json "$out/bench_$mode.json" "${extra[@]}" >"$out/bench_$mode.txt" 2>&1
done

"$cli" bench write-gguf --preset "$preset" --weights "$weights" --out "$gguf" >"$out/write_gguf.txt"
start_daemon --model "$gguf" --device "$device" --log-level warn
for c in 1 16; do
  n=$((c * 2))
  "$load" --url "$DAEMON_URL" --endpoint completions --concurrency "$c" --requests "$n" --input-tokens 128 \
    --output-tokens 256 --temperature 0 --ignore-eos --seed 7 --quiet --json "$out/served_greedy_c$c.json" >/dev/null 2>&1
  "$load" --url "$DAEMON_URL" --endpoint completions --concurrency "$c" --requests "$n" --input-tokens 128 \
    --output-tokens 256 --temperature 0.7 --top-p 0.95 --ignore-eos --seed 7 --quiet \
    --json "$out/served_sampled_c$c.json" >/dev/null 2>&1
done

/usr/bin/env python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def bench(mode):
    return json.load(open(os.path.join(out, f"bench_{mode}.json")))["results"][0]["tokens_per_s"]
print(f"bench decode, 16 streams: device greedy {bench('greedy'):.1f} tok/s; 16 rows drawn on the device {bench('sampled'):.1f} tok/s; "
      f"16 rows sampled on the host {bench('host'):.1f} tok/s")
print("| sampling | streams | served tok/s | per-stream tok/s p50 | TTFT p50 ms |")
print("|---|---|---|---|---|")
for mode, label in (("greedy", "greedy"), ("sampled", "temperature 0.7, top_p 0.95")):
    for c in (1, 16):
        j = json.load(open(os.path.join(out, f"served_{mode}_c{c}.json")))
        per = j.get("stream_output_tokens_per_s", {}).get("p50", float("nan"))
        ttft = j.get("ttft_ms", {}).get("p50", float("nan"))
        print(f"| {label} | {c} | {float(j['output_tokens_per_s']):.1f} | {per:.1f} | {ttft:.1f} |")
PY
