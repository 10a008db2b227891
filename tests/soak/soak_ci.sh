#!/usr/bin/env bash
# The CI soak: one daemon lifetime (CPU backend, the embedded tiny model) under
# deltaserve-load --soak: at least 2,000 requests mixing normal streams with client
# disconnects (before the first token, mid-stream, the instant a chunk lands), slow
# readers, invalid JSON and UTF-8, oversize bodies, absurd and missing parameters, prompts
# over the context, malformed HTTP and bursts over the queue limit. The tool fails on any
# leak (state slots, KV blocks, pinned memory, sockets, threads, RSS growth past the bound),
# on any unearned 5xx and on any well-formed request that did not finish. Beside it,
# tests/soak/hostile_mix.py sends nesting bombs (each must be a 400 json_too_deep) and waves
# of idle connections that exhaust the daemon's descriptors (it runs under `ulimit -n 192`
# so its accept loop must back off and recover while the soak's requests wait and finish).
# At the end a stream keeps the drain busy: SIGTERM starts the drain and a second SIGTERM
# must end the daemon at once with status 143 (128 + SIGTERM).
#
# Small limits make the abuse cheap: 4 streams, 8 waiting, 512-token context, 64 KiB bodies.
# Environment: DELTASERVE_BUILD_DIR (ctest sets it), DELTASERVE_SOAK_REQUESTS (default 2000),
# DELTASERVE_SOAK_OUT (report folder; default $DELTASERVE_BUILD_DIR/soak),
# DELTASERVE_SOAK_SERVE_ARGS (extra daemon flags, e.g. "--device cuda" for the GPU soak),
# DELTASERVE_SOAK_CONCURRENCY (default 6), DELTASERVE_SOAK_MAX_S (the tool's own limit, 420),
# DELTASERVE_SOAK_MAX_WAITING (the daemon's --max-waiting and the tool's model of it, default 8;
# set it here rather than in the serve flags, or the tool judges 429s against the wrong bound),
# DELTASERVE_SOAK_MAX_FDS (`ulimit -n` of the daemon and the tools, default 192),
# DELTASERVE_SOAK_ENGINES (engines the serve flags start, default 1: with --split replicas each
# engine has its own --max-waiting places, so the tool's model of the queue is that many times
# larger, and every engine must have served requests).
# Loopback only; bounded: the tool stops itself after 420 s, the whole test after ~8 min.
set -euo pipefail
source "$(dirname "$0")/daemon_lib.bash"
trap stop_daemon EXIT

requests="${DELTASERVE_SOAK_REQUESTS:-2000}"
out="${DELTASERVE_SOAK_OUT:-$DELTASERVE_BUILD_DIR/soak}"
load="$DELTASERVE_BUILD_DIR/loadtest/deltaserve-load"
[[ -x "$load" ]] || { echo "no deltaserve-load at $load" >&2; exit 1; }
mkdir -p "$out"

concurrency="${DELTASERVE_SOAK_CONCURRENCY:-6}"
max_s="${DELTASERVE_SOAK_MAX_S:-420}"
max_waiting="${DELTASERVE_SOAK_MAX_WAITING:-8}"
engines="${DELTASERVE_SOAK_ENGINES:-1}"
# The daemon inherits the limit, so the descriptor pressure below is reachable.
ulimit -n "${DELTASERVE_SOAK_MAX_FDS:-192}"
# shellcheck disable=SC2086  # extra flags are meant to split
start_daemon --max-streams 4 --max-waiting "$max_waiting" --context-tokens 512 --max-body-bytes 65536 \
  --log-level warn ${DELTASERVE_SOAK_SERVE_ARGS:-}
echo "soak_ci: daemon pid $DAEMON_PID on $DAEMON_URL; $requests requests"

# Over well before the tool's closing leak checks (sockets, RSS), which must see it gone.
hostile_s=30
# Started a few seconds in, after the tool has taken its baseline (sockets, RSS).
(sleep 3 && exec python3 tests/soak/hostile_mix.py bombs "$DAEMON_PORT" "$hostile_s") >"$out/bombs.log" 2>&1 &
bombs_pid=$!
(sleep 3 && exec python3 tests/soak/hostile_mix.py pressure "$DAEMON_PORT" "$hostile_s" 200) >"$out/pressure.log" 2>&1 &
pressure_pid=$!

status=0
timeout $((max_s + 60)) "$load" --url "$DAEMON_URL" --soak --concurrency "$concurrency" --requests "$requests" \
  --input-tokens 24 --output-tokens 12 --seed 7 \
  --server-pid "$DAEMON_PID" --server-max-waiting $((max_waiting * engines)) --server-max-body-bytes 65536 \
  --rss-growth-bound-mib 64 --settle-timeout-s 20 --max-duration-s "$max_s" \
  --idle-timeout-s 60 --request-timeout-s 120 \
  --json "$out/soak.json" --plot "$out/plots" || status=$?

hostile_status=0
wait "$bombs_pid" || hostile_status=1
wait "$pressure_pid" || hostile_status=1
cat "$out/bombs.log" "$out/pressure.log"
if ((status != 0 || hostile_status != 0)); then
  echo "soak_ci: deltaserve-load exited with $status, hostile traffic with $hostile_status; daemon log tail:" >&2
  tail -n 40 "$DAEMON_LOG" >&2
  exit 1
fi
# Replicas: every engine served part of the soak (its own series on /metrics).
if ((engines > 1)); then
  metrics=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1] + "/metrics").read().decode())' "$DAEMON_URL")
  for ((e = 0; e < engines; ++e)); do
    served=$(grep -E "^deltaserve_engine_requests_total\{[^}]*engine=\"$e\"" <<<"$metrics" | awk '{print $2}')
    if [[ -z "$served" ]] || ! awk -v n="$served" 'BEGIN { exit !(n > 0) }'; then
      echo "soak_ci: engine $e served no request (deltaserve_engine_requests_total: '${served}')" >&2
      exit 1
    fi
    echo "soak_ci: engine $e served $served requests"
  done
fi
log_lines=$(wc -l <"$DAEMON_LOG")
if ((log_lines > 2000)); then
  echo "soak_ci: the daemon wrote $log_lines log lines (descriptor pressure must not flood the log)" >&2
  exit 1
fi

# The second signal: 12 long streams (4 running, 8 queued) keep the drain waiting for
# seconds; the second SIGTERM ends it at once.
python3 tests/soak/hostile_mix.py stream "$DAEMON_PORT" 12 & stream_pid=$!
sleep 3  # the streams are admitted (a loaded machine starts python slowly)
kill -TERM "$DAEMON_PID"
sleep 0.3
kill -0 "$DAEMON_PID" 2>/dev/null || { echo "soak_ci: the drain ended before the second signal" >&2; exit 1; }
kill -TERM "$DAEMON_PID"
exit_status=0
for _ in $(seq 1 50); do
  kill -0 "$DAEMON_PID" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$DAEMON_PID" 2>/dev/null; then
  echo "soak_ci: the daemon still runs 5 s after a second SIGTERM" >&2
  exit 1
fi
wait "$DAEMON_PID" || exit_status=$?
DAEMON_PID=
kill "$stream_pid" 2>/dev/null || true
wait "$stream_pid" 2>/dev/null || true
if ((exit_status != 143)); then
  echo "soak_ci: exit status $exit_status after a second SIGTERM, expected 143; log tail:" >&2
  tail -n 20 "$DAEMON_LOG" >&2
  exit 1
fi
grep -q "during the drain: exiting now" "$DAEMON_LOG" || { echo "soak_ci: the forced exit was not logged" >&2; exit 1; }
trap - EXIT
echo "soak_ci: PASS (report: $out/soak.json)"
