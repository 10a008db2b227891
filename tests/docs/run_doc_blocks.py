#!/usr/bin/env python3
"""Runs the code blocks of a Markdown file that are marked runnable, in order, as a reader
would: from a copy of the repository's top level (symlinks) as working directory.

Marking (the fence's info string; GitHub highlights by its first word and ignores the rest):
  ```sh runnable              run with bash -euo pipefail; must exit 0 within the time limit
  ```sh runnable background   started and left running (a server): it must answer GET
                              http://127.0.0.1:PORT/ready with 200 before the next block runs,
                              must still be running at the end, and must exit 0 on SIGTERM
  ```js runnable file=NAME    not run: written to NAME in the working directory, for a later
                              block to run (`node NAME`)
Unmarked blocks are text only.

The port 8000 of the blocks (`127.0.0.1:8000`, `--port 8000`) is replaced by a free port, so
the check can run beside other tests; `build/release/` is replaced by --build-dir when that
is another folder. Exit status 0 only if every block passed; each failure names the block's
line in the file and shows its output.

Usage: run_doc_blocks.py FILE.md --build-dir DIR [--root DIR] [--timeout-s N]
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

FENCE = re.compile(r"^```(\S*)(.*)$")


def parse_blocks(path):
    """Yields (line, language, attributes, text) of every runnable fenced block."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        start, lang, words = i + 1, m.group(1), m.group(2).split()
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        if "runnable" not in words:
            continue
        attrs = {}
        for w in words:
            key, _, value = w.partition("=")
            attrs[key] = value if value else True
        yield start, lang, attrs, "\n".join(body) + "\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ready(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
            return r.status == 200
    except Exception:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("markdown")
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--root", default=os.getcwd())
    ap.add_argument("--timeout-s", type=float, default=120)
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    build = os.path.abspath(args.build_dir)
    port = free_port()

    work = tempfile.mkdtemp(prefix="doc_blocks_")
    for name in os.listdir(root):
        os.symlink(os.path.join(root, name), os.path.join(work, name))

    def rewrite(text):
        text = text.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        text = re.sub(r"--port 8000\b", f"--port {port}", text)
        if build != os.path.join(root, "build", "release"):
            text = text.replace("./build/release/", build + "/").replace("build/release/", build + "/")
        return text

    background = []  # (line, process, log path)
    failures = []
    blocks = list(parse_blocks(args.markdown))
    if not blocks:
        failures.append(f"{args.markdown}: no block is marked runnable")
    for line, lang, attrs, text in blocks:
        where = f"{args.markdown}:{line}"
        text = rewrite(text)
        if "file" in attrs:
            if attrs["file"] is True or "/" in attrs["file"]:
                failures.append(f"{where}: file= needs a plain file name")
                continue
            dest = os.path.join(work, attrs["file"])
            if os.path.lexists(dest):
                os.unlink(dest)
            with open(dest, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"== {where}: wrote {attrs['file']}", flush=True)
            continue
        if lang not in ("sh", "bash", "shell"):
            failures.append(f"{where}: runnable blocks are sh (or file=NAME), not '{lang}'")
            continue
        if "background" in attrs:
            log = os.path.join(work, f"background_{line}.log")
            with open(log, "w") as out:
                proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", "exec " + text.strip()],
                                        cwd=work, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True)
            background.append((line, proc, log))
            print(f"== {where}: started in the background (port {port})", flush=True)
            deadline = time.time() + args.timeout_s
            while not ready(port) and proc.poll() is None and time.time() < deadline:
                time.sleep(0.1)
            if not ready(port):
                failures.append(f"{where}: never answered /ready (exit {proc.poll()})\n" + open(log).read()[-4000:])
                break
            continue
        print(f"== {where}\n{text}", end="", flush=True)
        try:
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=work, timeout=args.timeout_s,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            out, rc = r.stdout, r.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout"
        print(out[-3000:], flush=True)
        if rc != 0:
            failures.append(f"{where}: exit {rc}\n{out[-3000:]}")

    for line, proc, log in background:
        where = f"{args.markdown}:{line}"
        if proc.poll() is not None:
            failures.append(f"{where}: the background block exited early ({proc.returncode})\n" + open(log).read()[-4000:])
            continue
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = "no exit 60 s after SIGTERM"
        if rc != 0:
            failures.append(f"{where}: after SIGTERM: {rc}\n" + open(log).read()[-4000:])
    shutil.rmtree(work, ignore_errors=True)

    for f in failures:
        print(f"FAIL {f}", file=sys.stderr)
    print(f"{len(blocks)} runnable blocks, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
