#!/usr/bin/python3
"""bench/tools/kernel_table.py on a small Nsight Compute-style CSV: program output lines
ignored (among them a settings line of more than ten fields), only the last LAUNCHES rows
counted, kernels grouped by name and grid, nanoseconds with thousands separators read as
microseconds; a file without the header is refused.

  /usr/bin/python3 tests/tools/test_kernel_table.py
"""

import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOL = os.path.join(ROOT, "bench", "tools", "kernel_table.py")
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
          '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(i: int, name: str, grid: str, ns: str) -> str:
    return (f'"{i}","1","deltaserve","host","{name}","1","13","(128, 1, 1)","{grid}","0","9.0","Command line profiler '
            f'metrics","gpu__time_duration.sum","nsecond","{ns}"')


def run(text: str, launches: int) -> subprocess.CompletedProcess:
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(text)
    try:
        return subprocess.run([sys.executable, TOOL, f.name, str(launches)], capture_output=True, text=True)
    finally:
        os.unlink(f.name)


def main() -> int:
    # The daemon's settings line has more than ten commas: a CSV row of its own to the reader.
    settings = "settings   " + ", ".join(f"switch {i} on" for i in range(14))
    lines = ["model      synthetic, program output", settings, HEADER,
             row(0, "warmup_kernel(Args)", "(1, 1, 1)", "99,000"),  # before the step: not counted
             row(1, "void deltaserve::kernels::(anonymous namespace)::matvec_kernel<1>(P)", "(256, 1, 1)", "10,000"),
             row(2, "router_kernel(Args)", "(33, 1, 1)", "14,000"),
             row(3, "void deltaserve::kernels::(anonymous namespace)::matvec_kernel<1>(P)", "(256, 1, 1)", "12,000"),
             row(4, "void deltaserve::kernels::(anonymous namespace)::matvec_kernel<1>(P)", "(512, 1, 1)", "5,000"),
             "  streams  rows/step  (the bench table)"]
    got = run("\n".join(lines) + "\n", 4)
    failures = []
    if got.returncode != 0:
        failures.append(f"exit {got.returncode}: {got.stderr}")
    out = got.stdout.splitlines()
    if not out or out[0] != "4 launches, 41.0 us of kernels (serialised)":
        failures.append(f"summary line: {out[:1]}")
    body = [line.split() for line in out[2:]]
    want = [["2", "22.0", "11.00", "void", "matvec_kernel<1>", "grid", "(256,", "1,", "1)"],
            ["1", "14.0", "14.00", "router_kernel", "grid", "(33,", "1,", "1)"],
            ["1", "5.0", "5.00", "void", "matvec_kernel<1>", "grid", "(512,", "1,", "1)"]]
    if body != want:
        failures.append(f"table: {body}")
    refused = run("no header here\n", 3)
    if refused.returncode == 0 or "no Nsight Compute CSV header" not in refused.stderr:
        failures.append(f"a file without the header: exit {refused.returncode}, {refused.stderr!r}")
    for f in failures:
        print("FAIL", f)
    print("kernel_table:", "ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
