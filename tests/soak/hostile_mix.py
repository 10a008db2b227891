#!/usr/bin/python3
"""Hostile traffic mixed into the CI soak (tests/soak/soak_ci.sh), beside deltaserve-load:

  hostile_mix.py bombs PORT SECONDS       nesting bombs (every one must be a 400 json_too_deep)
  hostile_mix.py pressure PORT SECONDS N  waves of N idle connections held ~2 s, so a daemon
                                          started under a low `ulimit -n` runs out of descriptors
  hostile_mix.py stream PORT N            N long streamed completions at once (running and
                                          queued), so a drain has work to wait for

Prints one summary line; exits 1 on any unexpected answer. Loopback only; stdlib only."""

import socket
import sys
import threading
import time


def request(port, body, timeout=30.0):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk


def bombs(port, seconds):
    prefix = b'{"messages":[{"role":"user","content":"hi"}],"metadata":'
    shapes = [b"[" * 60000, b'{"a":' * 12000, b"[{}," * 15000, b'[[["x",' * 8000]
    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        body = prefix + shapes[sent % len(shapes)]
        start = time.monotonic()
        answer = request(port, body)
        took = time.monotonic() - start
        if not answer.startswith(b"HTTP/1.1 400") or b"json_too_deep" not in answer:
            print(f"hostile_mix bombs: unexpected answer after {sent}: {answer[:300]!r}")
            return 1
        if took > 5.0:
            print(f"hostile_mix bombs: a bomb took {took:.1f} s")
            return 1
        sent += 1
        time.sleep(0.1)
    print(f"hostile_mix bombs: {sent} nesting bombs, each a 400 json_too_deep")
    return 0


def pressure(port, seconds, count):
    waves = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        held = []
        for _ in range(count):
            try:
                held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                break
        time.sleep(2.0)
        for s in held:
            s.close()
        waves += 1
        time.sleep(3.0)
    print(f"hostile_mix pressure: {waves} waves of {count} idle connections")
    return 0


def stream(port, count):
    body = (b'{"messages":[{"role":"user","content":"tell a long story"}],"max_tokens":480,'
            b'"stream":true,"ignore_eos":true}')

    def one():
        try:
            request(port, body, timeout=120)
        except OSError:
            pass

    threads = [threading.Thread(target=one) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "bombs":
        return bombs(port, float(sys.argv[3]))
    if mode == "pressure":
        return pressure(port, float(sys.argv[3]), int(sys.argv[4]))
    return stream(port, int(sys.argv[3]))


if __name__ == "__main__":
    sys.exit(main())
