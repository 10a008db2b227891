#!/usr/bin/env bash
# Served figures at a preset's real shapes: `bench write-gguf` writes the preset's synthetic
# weights (bench's own) as a GGUF, the daemon serves it, deltaserve-load measures it. Prints,
# side by side in one run:
#  1. `bench decode` at the same streams and context (the bench figure of the same shape);
#  2. served decode: 128-token prompts, 256 output tokens, greedy, EOS ignored, at each stream
#     count, with the daemon's default flags (DEFAULT_ARGS) and with --max-streams 64
#     (the slot count that decides the decode form today, issue 44);
#  3. the prefix cache's cost when nothing hits: the 64-slot daemon at 64 streams again with
#     --prefix-cache=false;
#  4. the prefix cache on the GPU: the multi-turn workload of issue 38 (8 conversations x 10
#     turns, 2,048 new tokens a turn, the history resent as token ids), TTFT per turn with the cache on and
#     off; and the shared-prefix workload (64 requests, 16 at a time, an 8k-token common prefix).
# Usage (repository root, on a GPU host): bench/gpu_served.sh BUILD_OR_BUNDLE_DIR OUT_DIR
# Environment: PRESET (qwen3.6-35b-a3b), WEIGHTS (q4_0), DEVICE (cuda), STREAMS ("1 4 16"),
# WIDE_STREAMS ("1 64"), GGUF (where the file goes; default OUT_DIR/model.gguf, removed after),
# PARTS ("decode prefix": parts 1-3 are "decode", part 4 is "prefix"), TURNS (10).
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

"$cli" bench write-gguf --preset "$preset" --weights "$weights" --out "$gguf" | tee "$out/write_gguf.txt"
parts=${PARTS:-decode prefix}
if [[ $parts == *decode* ]]; then
  batches=$(echo "${STREAMS:-1 4 16} ${WIDE_STREAMS:-1 64}" | tr ' ' '\n' | sort -n -u | paste -sd,)
  "$cli" bench decode --preset "$preset" --weights "$weights" --device "$device" --batch "$batches" --context 128 \
    --steps 20 --json "$out/bench_decode.json" >"$out/bench_decode.txt" 2>&1

  served() {  # served LABEL STREAMS...: deltaserve-load at each stream count against the running daemon
    local label=$1 c n
    shift
    for c in "$@"; do
      n=$((c * 2)); ((n < 4)) && n=4
      "$load" --url "$DAEMON_URL" --endpoint completions --concurrency "$c" --requests "$n" --input-tokens 128 \
        --output-tokens 256 --temperature 0 --ignore-eos --seed 7 --quiet \
        --json "$out/served_${label}_c$c.json" >"$out/served_${label}_c$c.txt" 2>&1
    done
  }

  start_daemon --model "$gguf" --device "$device" --log-level warn ${DEFAULT_ARGS:-}
  served default ${STREAMS:-1 4 16}
  curl -s "$DAEMON_URL/metrics" >"$out/metrics_default.txt" || true
  stop_daemon
  start_daemon --model "$gguf" --device "$device" --log-level warn --max-streams 64
  served slots64 ${WIDE_STREAMS:-1 64}
  stop_daemon
  start_daemon --model "$gguf" --device "$device" --log-level warn --max-streams 64 --prefix-cache=false
  served slots64_nocache 64
  stop_daemon
fi

if [[ $parts == *prefix* ]]; then
  for cache in on off; do
    start_daemon --model "$gguf" --device "$device" --log-level warn --prefix-cache="$([[ $cache == on ]] && echo true || echo false)" --max-streams 16 \
      --context-tokens 32768
    # The conversations as token ids (--endpoint completions): synthetic weights' answers
    # re-tokenise differently from their ids, which a chat history would hit inside the answer.
    "$load" --url "$DAEMON_URL" --workload multi-turn --endpoint completions --turns "${TURNS:-10}" --concurrency 8 \
      --input-tokens 2048 --output-tokens 64 --temperature 0 --ignore-eos --seed 7 --json "$out/multiturn_$cache.json" \
      >"$out/multiturn_$cache.txt" 2>&1
    if [[ $cache == on ]]; then
      "$load" --url "$DAEMON_URL" --workload shared-prefix --shared-prefix-tokens 8192 --concurrency 16 --requests 64 \
        --input-tokens 256 --output-tokens 32 --temperature 0 --ignore-eos --seed 8 --json "$out/shared_prefix.json" \
        >"$out/shared_prefix.txt" 2>&1
      curl -s "$DAEMON_URL/metrics" | grep -E '^deltaserve_prefix_cache|^deltaserve_prompt_tokens' >"$out/metrics_prefix.txt" || true
    fi
    stop_daemon
  done
fi

/usr/bin/env python3 - "$out" "${STREAMS:-1 4 16}" "${WIDE_STREAMS:-1 64}" <<'PY'
import json, os, re, sys
out, streams, wide = sys.argv[1], [int(x) for x in sys.argv[2].split()], [int(x) for x in sys.argv[3].split()]
bench = {r["streams"]: r for r in json.load(open(os.path.join(out, "bench_decode.json")))["results"]} \
    if os.path.exists(os.path.join(out, "bench_decode.json")) else {}
def bench_tok_s(c):
    r = bench.get(c)
    return f"{r['tokens_per_s']:.1f}" if r else "-"
print("| daemon | streams | served tok/s | served tok/s/stream p50 | TTFT p50 ms | bench tok/s (same shape) |")
print("|---|---|---|---|---|---|")
for label, counts in (("default", streams), ("slots64", wide), ("slots64_nocache", [64])):
    for c in counts:
        path = os.path.join(out, f"served_{label}_c{c}.json")
        if not os.path.exists(path):
            continue
        j = json.load(open(path))
        per = j.get("stream_output_tokens_per_s", {}).get("p50", float("nan"))
        ttft = j.get("ttft_ms", {}).get("p50", float("nan"))
        print(f"| {label} | {c} | {float(j['output_tokens_per_s']):.1f} | {per:.1f} | {ttft:.1f} | {bench_tok_s(c)} |")
for name in ("multiturn_on", "multiturn_off", "shared_prefix"):
    path = os.path.join(out, f"{name}.txt")
    if os.path.exists(path):
        print(f"\n{name}:")
        for line in open(path):
            if re.match(r"\s*turn \d+:", line) or re.search(r"ideal|cached|TTFT|tok/s", line):
                print("  " + line.strip())
PY
