#!/usr/bin/env bash
# The speculation policy on a GPU (docs/speculation.md): `deltaserve bench decode` with simulated
# acceptance on the 35B-A3B preset (synthetic q4_0 weights), speculation off vs fixed depths
# 0-3 vs the policy over the costs it measures first, at 1/4/16/64/128 streams; then the
# embedded model served with the policy at 32 concurrent streams, whose metrics must show
# drafting (deltaserve_spec_decode_draft_depth above 0) and the cost model's prediction ratio.
# Usage (repository root, on a GPU host): bench/gpu_speculation_policy.sh BUILD_OR_BUNDLE_DIR OUT_DIR
# Prints the tables; writes JSON, the daemon's metrics and the start-up log to OUT_DIR.
# Then the same policy replayed on the table bench measured (`bench policy`, no device): where
# the replay and the timed cells agree, the policy's choices are what it costs; where they
# disagree, the table mispredicts the device.
# Environment: DEVICE (default cuda), PRESET (default qwen3.6-35b-a3b), ACCEPTANCE (default
# 0.8,0.6,0.45), BATCH (default 1,4,16,64,128; 1,4,16,64 on a GPU of under 100 GiB, where 128
# streams' f32 recurrent states, 64 GB, do not fit beside the weights), STEPS (timed steps per
# cell, default 256: at one stream a step emits 1-4 tokens, and 32 steps left the cells' rates
# a few % apart from run to run, as much as the depths differ).
set -euo pipefail
build=${1:?build or bundle dir}
out=${2:?out dir}
mkdir -p "$out"
device=${DEVICE:-cuda}
default_batch=1,4,16,64,128
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 || true)
if [[ -n "$gpu_mib" && "$gpu_mib" -lt 102400 ]]; then default_batch=1,4,16,64; fi

# 40 warm-up steps: the kind's estimate starts at the optimistic prior (1.0 at every position,
# scheduler/draft_policy.h) and a deep position is reached in only some steps, so the policy
# needs a few dozen steps to settle; the table shows its settled choice.
"$build/cli/deltaserve" bench decode --preset "${PRESET:-qwen3.6-35b-a3b}" --weights q4_0 --device "$device" \
  --batch "${BATCH:-$default_batch}" --context 512 --steps "${STEPS:-256}" --warmup 40 \
  --acceptance "${ACCEPTANCE:-0.8,0.6,0.45}" --depths off,0,1,2,3,policy \
  --json "$out/speculation_policy.json" | tee "$out/speculation_policy.txt"
echo
"$build/cli/deltaserve" bench policy --step-costs "$out/speculation_policy.json" \
  --batch "${BATCH:-$default_batch}" --acceptance "${ACCEPTANCE:-0.8,0.6,0.45}" | tee "$out/speculation_policy_replay.txt"

# Served: the embedded model, the policy on (default depth), 32 streams under deltaserve-load.
export DELTASERVE_BUILD_DIR="$build"
source tests/soak/daemon_lib.bash
trap stop_daemon EXIT
start_daemon --device "$device" --max-streams 64 --max-waiting 256 --log-level info \
  --step-costs-file "$out/step_costs.json"
"$build/loadtest/deltaserve-load" --url "$DAEMON_URL" --concurrency 32 --requests 256 --input-tokens 64 \
  --output-tokens 128 --temperature 0 --ignore-eos --seed 5 --quiet --json "$out/load_c32.json" >"$out/load_c32.txt" 2>&1
curl -s "$DAEMON_URL/metrics" | grep -E '^deltaserve_(spec_decode|step_duration)' >"$out/metrics_c32.txt"
cp "$DAEMON_LOG" "$out/daemon.log"
stop_daemon
trap - EXIT
echo
echo "served, 32 streams: $(grep -E 'output_tokens_per_s' "$out/load_c32.json" | head -1)"
grep -E '^deltaserve_spec_decode_(draft_depth_(sum|count)|num_draft_tokens_total|num_accepted_tokens_total|step_time_ratio_(sum|count))' \
  "$out/metrics_c32.txt"
/usr/bin/env python3 - "$out/metrics_c32.txt" <<'PY'
import re, sys
m = {}
for line in open(sys.argv[1]):
    k, _, v = line.rpartition(" ")
    m[k] = float(v)
count = m.get("deltaserve_spec_decode_draft_depth_count", 0)
mean = m.get("deltaserve_spec_decode_draft_depth_sum", 0) / count if count else 0
ratio_n = m.get("deltaserve_spec_decode_step_time_ratio_count", 0)
ratio = m.get("deltaserve_spec_decode_step_time_ratio_sum", 0) / ratio_n if ratio_n else 0
print(f"mean chosen depth {mean:.2f} over {count:.0f} stream-steps; measured/predicted step time {ratio:.2f} (mean)")
sys.exit(0 if mean > 0 else 1)
PY
