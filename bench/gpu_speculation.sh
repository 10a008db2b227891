#!/usr/bin/env bash
# Speculation on the GPU backend, served end to end (the embedded model, greedy):
#  1. token identity: 24 greedy chat and completion requests, 16 at a time, give the same text
#     with --draft-depth 0, 1, 2 and 3 (adaptive up to the depth); and one request alone;
#  2. throughput side by side: deltaserve-load at 1, 4, 16, 64 concurrent streams, depth 0 vs 3,
#     same daemon settings, one run after the other.
# Usage (repository root, on a GPU host): bench/gpu_speculation.sh BUILD_OR_BUNDLE_DIR OUT_DIR
# Prints a table; exits 1 if any greedy output differs. Not a ctest test (it needs a GPU).
# Environment: DEVICE (default cuda; cpu works for a dry run), STREAMS (default "1 4 16 64").
set -euo pipefail
build=${1:?build or bundle dir}
out=${2:?out dir}
mkdir -p "$out"
export DELTASERVE_BUILD_DIR="$build"
source tests/soak/daemon_lib.bash
trap stop_daemon EXIT
load="$build/loadtest/deltaserve-load"

greedy_outputs() {  # greedy_outputs FILE: 24 requests, 8 at a time, answers as JSON lines
  /usr/bin/env python3 - "$DAEMON_URL" "$1" <<'PY'
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
url, path = sys.argv[1], sys.argv[2]
prompts = ["def parse(self, text):\n", "The quick brown fox", "for i in range(10):\n    ",
           "import os\nimport sys\n\n", "Once upon a time", "class Stack:\n    def __init__(self):\n"]
def ask(i):
    p = prompts[i % len(prompts)]
    if i % 2:
        body = {"prompt": p, "max_tokens": 64, "temperature": 0}
        ep = "/v1/completions"
    else:
        body = {"messages": [{"role": "user", "content": p}], "max_tokens": 64, "temperature": 0}
        ep = "/v1/chat/completions"
    req = urllib.request.Request(url + ep, json.dumps(body).encode(), {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req, timeout=120))
    c = r["choices"][0]
    return {"i": i, "text": c.get("text", c.get("message", {}).get("content")), "usage": r["usage"]}
with ThreadPoolExecutor(16) as pool:
    results = list(pool.map(ask, range(24)))
results.append(dict(ask(0), i="alone"))
with open(path, "w") as f:
    for r in results:
        f.write(json.dumps(r) + "\n")
PY
}

for depth in 0 1 2 3; do
  start_daemon --device "${DEVICE:-cuda}" --draft-depth "$depth" --max-streams 64 --max-waiting 256 --log-level warn
  greedy_outputs "$out/greedy_depth$depth.jsonl"
  for c in ${STREAMS:-1 4 16 64}; do
    [[ $depth == 0 || $depth == 3 ]] || break  # throughput: depth 0 vs 3 only
    n=$((c * 8)); ((n < 32)) && n=32
    "$load" --url "$DAEMON_URL" --concurrency "$c" --requests "$n" --input-tokens 64 --output-tokens 128 \
      --temperature 0 --ignore-eos --seed 5 --quiet --json "$out/load_depth${depth}_c$c.json" >"$out/load_depth${depth}_c$c.txt" 2>&1
  done
  curl -s "$DAEMON_URL/metrics" | grep -E '^deltaserve_(draft|spec)' >"$out/metrics_depth$depth.txt" || true
  stop_daemon
done
trap - EXIT

status=0
for depth in 1 2 3; do
  if cmp -s "$out/greedy_depth0.jsonl" "$out/greedy_depth$depth.jsonl"; then
    echo "greedy outputs: identical with --draft-depth 0 and $depth (24 requests 16 at a time + 1 alone)"
  else
    echo "greedy outputs: DIFFER between --draft-depth 0 and $depth" >&2
    status=1
  fi
done
/usr/bin/env python3 - "$out" ${STREAMS:-1 4 16 64} <<'PY'
import json, sys, os
out = sys.argv[1]
streams = [int(c) for c in sys.argv[2:]]
def agg(d, c):
    j = json.load(open(os.path.join(out, f"load_depth{d}_c{c}.json")))
    return j
print("| streams | depth 0 tok/s | depth 3 tok/s | ratio | depth 0 per-stream p50 | depth 3 per-stream p50 |")
print("|---|---|---|---|---|---|")
for c in streams:
    tot, per = [], []
    for d in (0, 3):
        j = agg(d, c)
        tot.append(float(j["output_tokens_per_s"]))
        per.append(float(j.get("stream_output_tokens_per_s", {}).get("p50", float("nan"))))
    print(f"| {c} | {tot[0]:.1f} | {tot[1]:.1f} | {tot[1] / tot[0]:.2f} | {per[0]:.1f} | {per[1]:.1f} |")
PY
exit $status
