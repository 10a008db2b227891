# Shared by the tests/soak/*.sh tests (sourced, not a test itself): start the real daemon
# on a free loopback port and stop it with SIGTERM, checking that it exits 0.
#
#   start_daemon [serve flags...]   sets DAEMON_PID, DAEMON_PORT, DAEMON_URL, DAEMON_LOG;
#                                   returns once GET /ready answers 200 (60 s at most)
#   stop_daemon                     SIGTERM, waits up to 40 s, fails unless the exit status is 0
#   server_sockets                  socket fds the daemon holds (listener + connections)
#
# Needs DELTASERVE_BUILD_DIR (ctest sets it) or the default build/release.

DELTASERVE_BUILD_DIR="${DELTASERVE_BUILD_DIR:-build/release}"
DAEMON_BIN="$DELTASERVE_BUILD_DIR/cli/deltaserve"

http_status() {  # http_status PATH: the status code of GET PATH, or 000
  local line
  exec 3<>"/dev/tcp/127.0.0.1/$DAEMON_PORT" 2>/dev/null || { echo 000; return; }
  printf 'GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' "$1" >&3
  IFS=' ' read -r -t 5 _ line _ <&3 || line=000
  exec 3<&- 3>&-
  echo "${line:-000}"
}

start_daemon() {
  DAEMON_DIR=$(mktemp -d)
  DAEMON_LOG="$DAEMON_DIR/daemon.log"
  [[ -x "$DAEMON_BIN" ]] || { echo "no daemon binary at $DAEMON_BIN" >&2; return 1; }
  "$DAEMON_BIN" serve --port 0 --port-file "$DAEMON_DIR/port" "$@" >"$DAEMON_LOG" 2>&1 &
  DAEMON_PID=$!
  for _ in $(seq 1 600); do
    [[ -s "$DAEMON_DIR/port" ]] && break
    kill -0 "$DAEMON_PID" 2>/dev/null || { echo "daemon exited at start:" >&2; cat "$DAEMON_LOG" >&2; return 1; }
    sleep 0.1
  done
  DAEMON_PORT=$(cat "$DAEMON_DIR/port")
  DAEMON_URL="http://127.0.0.1:$DAEMON_PORT"
  for _ in $(seq 1 600); do
    [[ "$(http_status /ready)" == 200 ]] && return 0
    sleep 0.1
  done
  echo "daemon not ready after 60 s:" >&2
  cat "$DAEMON_LOG" >&2
  return 1
}

stop_daemon() {
  [[ -n "${DAEMON_PID:-}" ]] || return 0
  kill -TERM "$DAEMON_PID" 2>/dev/null || true
  local status=0
  for _ in $(seq 1 400); do
    kill -0 "$DAEMON_PID" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$DAEMON_PID" 2>/dev/null; then
    echo "daemon did not exit 40 s after SIGTERM; killing it" >&2
    kill -KILL "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
    DAEMON_PID=
    return 1
  fi
  wait "$DAEMON_PID" || status=$?
  DAEMON_PID=
  if ((status != 0)); then
    echo "daemon exited with status $status after SIGTERM; log tail:" >&2
    tail -n 30 "$DAEMON_LOG" >&2
    return 1
  fi
}

server_sockets() {
  local n=0 fd
  for fd in /proc/"$DAEMON_PID"/fd/*; do
    [[ "$(readlink "$fd" 2>/dev/null)" == socket:* ]] && n=$((n + 1))
  done
  echo "$n"
}
