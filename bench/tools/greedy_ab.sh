#!/usr/bin/env bash
# Same bits from two builds: each bundle's daemon serves MODEL, and 32 greedy completions
# (16 at a time, then one alone, speculation at the daemon's default) are compared text for
# text. Any difference in a logit that moves an argmax shows; identical text over thousands of
# tokens of random weights is the check that a refactor kept the default paths' arithmetic.
# Usage (repository root, on a GPU host):
#   bench/tools/greedy_ab.sh BUNDLE_A BUNDLE_B MODEL OUT_DIR [serve flags...]
# Exits 1 when the outputs differ.
set -euo pipefail
bundle_a=${1:?bundle A}
bundle_b=${2:?bundle B}
model=${3:?model file}
out=${4:?out dir}
shift 4
mkdir -p "$out"
source tests/soak/daemon_lib.bash
trap stop_daemon EXIT

greedy_outputs() {  # greedy_outputs FILE
  /usr/bin/env python3 - "$DAEMON_URL" "$1" <<'PY'
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
url, path = sys.argv[1], sys.argv[2]
prompts = ["def parse(self, text):\n", "The quick brown fox", "for i in range(10):\n    ",
           "import os\nimport sys\n\n", "Once upon a time", "class Stack:\n    def __init__(self):\n"]
def ask(i):
    body = {"prompt": prompts[i % len(prompts)] + str(i), "max_tokens": 96, "temperature": 0, "ignore_eos": True}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req, timeout=300))
    return {"i": i, "text": r["choices"][0]["text"], "tokens": r["usage"]["completion_tokens"]}
with ThreadPoolExecutor(16) as pool:
    results = list(pool.map(ask, range(32)))
results.append(dict(ask(0), i="alone"))
with open(path, "w") as f:
    for r in results:
        f.write(json.dumps(r) + "\n")
PY
}

for bundle in "$bundle_a" "$bundle_b"; do
  name=$(basename "$bundle")
  DAEMON_BIN="$bundle/cli/deltaserve" LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    start_daemon --model "$model" --log-level warn "$@"
  greedy_outputs "$out/greedy_$name.jsonl"
  stop_daemon
done
a="$out/greedy_$(basename "$bundle_a").jsonl"
b="$out/greedy_$(basename "$bundle_b").jsonl"
if cmp -s "$a" "$b"; then
  echo "greedy outputs: identical ($(wc -l <"$a") completions, $(basename "$bundle_a") vs $(basename "$bundle_b"))"
else
  echo "greedy outputs: DIFFER ($(basename "$bundle_a") vs $(basename "$bundle_b")):"
  diff <(python3 -c 'import json,sys; [print(json.loads(l)["i"], repr(json.loads(l)["text"][:80])) for l in open(sys.argv[1])]' "$a") \
       <(python3 -c 'import json,sys; [print(json.loads(l)["i"], repr(json.loads(l)["text"][:80])) for l in open(sys.argv[1])]' "$b") | head -20
  exit 1
fi
