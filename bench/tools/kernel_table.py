#!/usr/bin/env python3
"""Per-kernel table of one decode step from Nsight Compute's CSV (--metrics
gpu__time_duration.sum --csv): the last LAUNCHES rows of the file (the step timed last), grouped
by kernel name and grid, with launches, microseconds per step and per launch.

    python3 bench/tools/kernel_table.py ncu_decode_b1.csv 297

Serialised kernel times (no overlap of kernel edges), so the sum exceeds a graph step's time;
the table ranks where the chains are, it does not time the step."""
import collections
import csv
import sys


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], newline="") as f:
        rows = [r for r in csv.reader(f) if len(r) > 10]
    # The program's own output shares stdout with the CSV (its settings line alone has a dozen
    # commas), so the header is the first row that names the kernel column.
    start = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if start is None:
        print(f"{sys.argv[1]}: no Nsight Compute CSV header", file=sys.stderr)
        return 1
    header, data = rows[start], [r for r in rows[start + 1:] if len(r) == len(rows[start])]
    name_at, value_at, grid_at = header.index("Kernel Name"), header.index("Metric Value"), header.index("Grid Size")
    launches = int(sys.argv[2])
    step = data[-launches:]
    totals = collections.defaultdict(lambda: [0, 0.0])
    for r in step:
        name = r[name_at].replace("(anonymous namespace)::", "").replace("deltaserve::kernels::", "")
        key = f"{name.split('(')[0][:70]} grid {r[grid_at]}"
        totals[key][0] += 1
        totals[key][1] += float(r[value_at].replace(",", "")) / 1000.0  # ns -> us
    print(f"{len(step)} launches, {sum(t for _, t in totals.values()):.1f} us of kernels (serialised)")
    print(f"{'launches':>8} {'us/step':>9} {'us each':>8}  kernel")
    for key, (n, us) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print(f"{n:8d} {us:9.1f} {us / n:8.2f}  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
