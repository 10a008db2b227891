#!/usr/bin/env bash
# CI check of the dependent-launch rule (kernels/gpu/gpu_compat.h, gpu::begin_kernel): on sm_90
# a kernel may start while the previous one is still running, so every kernel launched by
# gpu::launch must wait in gpu::begin_kernel() before it touches memory the previous kernels
# write. This fails when a kernels/**/*.cu launches with <<<>>> (bypassing gpu::launch) or when
# a __global__ function's body does not call gpu::begin_kernel() first; the only code allowed
# before it is a prefetch block (L2 prefetches, safe on any address; or the staged matvec's
# branch that copies its first weight chunks into shared memory and waits inside staged_group,
# matmul_mma_staged.cu; or the GDN step's loads of what earlier forwards wrote, gdn.cu). No GPU
# needed. Run from the root.
set -euo pipefail
/usr/bin/python3 - <<'PY'
import glob, re, sys
bad = []
for path in sorted(glob.glob("kernels/**/*.cu", recursive=True)):
    src = open(path).read()
    code = re.sub(r"//[^\n]*", "", src)
    if "<<<" in code:
        bad.append(f"{path}: launches with <<<>>> instead of gpu::launch")
    if path.endswith("launch.cu"):
        continue  # its probe kernel is never launched
    for m in re.finditer(r"__global__[^;{]*?(\w+)\s*\([^)]*\)\s*\{", code):
        body = code[m.end():]
        head = body[: body.find("gpu::begin_kernel();")] if "gpu::begin_kernel();" in body else None
        nxt = body.find("__global__")
        if head is None or (nxt != -1 and len(head) > nxt):
            bad.append(f"{path}: kernel {m.group(1)} never calls gpu::begin_kernel()")
        elif head.strip() and "prefetch" not in head and "load_inputs_of_earlier_forwards" not in head:
            bad.append(f"{path}: kernel {m.group(1)} runs code before gpu::begin_kernel(): {head.strip()[:80]!r}")
for line in bad:
    print("launch_rule_check:", line)
if bad:
    sys.exit(1)
print("launch_rule_check: every kernel launches through gpu::launch and waits in gpu::begin_kernel() first")
PY
