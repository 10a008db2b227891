#!/usr/bin/env bash
# Regression: a generation answered with "Connection: close" must not leave its socket open
# in the daemon (the soak found one leaked fd per such request: the session closed
# gracefully while its disconnect-watch read was still pending, and the linger read that
# followed never completed). Runs the fake engine on loopback for a few seconds.
set -euo pipefail
source "$(dirname "$0")/daemon_lib.bash"
trap stop_daemon EXIT

start_daemon --fake-engine --log-level warn
baseline=$(server_sockets)
/usr/bin/python3 - "$DAEMON_PORT" <<'PY'
import json, socket, sys
port = int(sys.argv[1])

def request(stream, read_all=True):
    body = json.dumps({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8,
                       "stream": stream}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    data = b""
    while read_all:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    if read_all and not data.startswith(b"HTTP/1.1 200"):
        sys.exit("unexpected answer: %r" % data[:200])

for _ in range(5):
    request(stream=True)
    request(stream=False)
PY
after=$baseline
for _ in $(seq 1 50); do  # a graceful close lingers up to 2 s
  after=$(server_sockets)
  ((after <= baseline)) && break
  sleep 0.1
done
echo "daemon sockets: $baseline before, $after after 10 Connection: close generations"
if ((after > baseline)); then
  echo "FAIL: $((after - baseline)) socket(s) leaked" >&2
  exit 1
fi
stop_daemon
trap - EXIT
echo "PASS"
