#!/usr/bin/env bash
# The main job: installs, builds, and serves the embedded default model with the daemon on
# http://127.0.0.1:${PORT:-8000}; sends one chat request to show it answering, then keeps
# serving until Ctrl-C (SIGTERM drains in-flight requests and exits 0).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)" --target deltaserve

port="${PORT:-8000}"
./build/release/cli/deltaserve serve --port "$port" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null; wait "$pid"' INT TERM
for _ in $(seq 1 200); do
  curl -sf "http://127.0.0.1:$port/ready" >/dev/null && break
  sleep 0.1
done

echo "== POST /v1/chat/completions"
curl -s "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"messages":[{"role":"user","content":"Write a Python function that reverses a list."}],
       "max_tokens":64,"temperature":0.7,"seed":1}'
echo
echo "deltaserve is serving on http://127.0.0.1:$port (chat page at /, metrics at /metrics); Ctrl-C stops it"
wait "$pid"
