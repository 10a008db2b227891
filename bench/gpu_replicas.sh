#!/usr/bin/env bash
# --split replicas on two GPUs of one host (issue 43's acceptance): aggregate tokens/s of one
# GPU against two replicas at the same per-device settings, deltaserve-load at 128 concurrent
# streams (and 1 and 16); then the replicated soak on the two GPUs (tests/soak/soak_ci.sh with
# two engines: every slot, KV block and pinned byte back at the end, both engines served).
# Usage (repository root, on a host with two GPUs): bench/gpu_replicas.sh BUILD_OR_BUNDLE_DIR OUT_DIR
# Prints a table; exits 1 if the soak fails. Not a ctest test (it needs two GPUs).
# Environment: DEVICES (default cuda:0,cuda:1; cpu:0,cpu:1 works for a dry run), MODEL (a
# --model path; default the embedded model), STREAMS (default "1 16 128").
set -euo pipefail
build=${1:?build or bundle dir}
out=${2:?out dir}
mkdir -p "$out"
export DELTASERVE_BUILD_DIR="$build"
source tests/soak/daemon_lib.bash
trap stop_daemon EXIT
load="$build/loadtest/deltaserve-load"
devices=${DEVICES:-cuda:0,cuda:1}
first=${devices%%,*}
[[ $first == cpu:* ]] && first=cpu
model_args=()
[[ -n ${MODEL:-} ]] && model_args=(--model "$MODEL")

for setup in one two; do
  if [[ $setup == one ]]; then
    start_daemon --device "$first" "${model_args[@]}" --max-streams 64 --max-waiting 512 --log-level warn
  else
    start_daemon --devices "$devices" --split replicas "${model_args[@]}" --max-streams 64 --max-waiting 512 --log-level warn
  fi
  for c in ${STREAMS:-1 16 128}; do
    n=$((c * 4)); ((n < 32)) && n=32
    "$load" --url "$DAEMON_URL" --concurrency "$c" --requests "$n" --input-tokens 128 --output-tokens 128 \
      --temperature 0 --ignore-eos --seed 5 --quiet --json "$out/load_${setup}_c$c.json" >"$out/load_${setup}_c$c.txt" 2>&1
  done
  curl -s "$DAEMON_URL/metrics" | grep -E '^deltaserve_(engine_|router_)' >"$out/metrics_$setup.txt" || true
  stop_daemon
done
trap - EXIT

/usr/bin/env python3 - "$out" ${STREAMS:-1 16 128} <<'PY'
import json, os, sys
out = sys.argv[1]
print("| streams | one device tok/s | replicas tok/s | ratio |")
print("|---|---|---|---|")
for c in sys.argv[2:]:
    one = float(json.load(open(os.path.join(out, f"load_one_c{c}.json")))["output_tokens_per_s"])
    two = float(json.load(open(os.path.join(out, f"load_two_c{c}.json")))["output_tokens_per_s"])
    print(f"| {c} | {one:.1f} | {two:.1f} | {two / one:.2f} |")
PY

DELTASERVE_SOAK_DEVICES="$devices" DELTASERVE_SOAK_SERVE_ARGS="${MODEL:+--model $MODEL}" \
  DELTASERVE_SOAK_OUT="$out/soak" DELTASERVE_SOAK_REQUESTS="${SOAK_REQUESTS:-2000}" \
  bash tests/soak/soak_replicas_ci.sh
