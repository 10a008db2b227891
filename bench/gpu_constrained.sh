#!/usr/bin/env bash
# The constrained sampler's cost on the GPU (docs/constrained-decoding.md): decode steps of
# the 35B-A3B preset at 16 streams, every stream sampled on the host at temperature 1, without
# and with a JSON-object grammar constraint on each; the tok/s ratio is the constraint's cost
# (target: the constrained run keeps at least 90% of the unconstrained tok/s). The device-greedy
# run (no host sampling at all) and the device-drawn run (the daemon's path for plain sampled
# requests: only ids leave the device; constrained rows need their logits on the host) are
# printed for reference.
# Usage (repository root, on a GPU host): bench/gpu_constrained.sh BUILD_DIR OUT_DIR
# Environment: PRESET (default qwen3.6-35b-a3b), STREAMS (default 16), DEVICE (default cuda).
set -euo pipefail
build=${1:?build dir}
out=${2:?out dir}
mkdir -p "$out"
preset=${PRESET:-qwen3.6-35b-a3b}
streams=${STREAMS:-16}
device=${DEVICE:-cuda}
bench() {  # bench NAME EXTRA_ARGS...
  local name=$1
  shift
  "$build/cli/deltaserve" bench decode --preset "$preset" --device "$device" --batch "$streams" --context 1024 \
    --steps 64 --json "$out/$name.json" "$@" | tee "$out/$name.txt"
}
bench greedy
bench sampled --sampled-streams "$streams" --sampled-on-host
bench drawn --sampled-streams "$streams"
bench constrained --sampled-streams "$streams" --constrained
/usr/bin/env python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def tok_s(name):
    return json.load(open(f"{out}/{name}.json"))["results"][0]["tokens_per_s"]
s, c, g, d = tok_s("sampled"), tok_s("constrained"), tok_s("greedy"), tok_s("drawn")
print(f"tok/s: device greedy {g:.1f}; drawn on the device {d:.1f}; host-sampled {s:.1f}; host-sampled and constrained {c:.1f}")
print(f"constrained / sampled = {c / s:.3f}, constrained / device greedy = {c / g:.3f} (target >= 0.90)")
PY
