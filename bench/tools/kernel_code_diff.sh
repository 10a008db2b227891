#!/usr/bin/env bash
# Compares the machine code of one GPU kernel file at two commits, kernel by kernel: each
# commit's file is compiled to a cubin (nvcc -O3, the build's flags) and every kernel's .text is
# compared byte for byte (names demangled, so the anonymous namespace's per-file hash does not
# count). A kernel whose bytes are equal runs exactly as it did; this bisects a speed change of
# the GPU path on a machine without a GPU. Needs nvcc and python3. Usage, from the repository root:
#   bench/tools/kernel_code_diff.sh OLD_COMMIT NEW_COMMIT kernels/matmul/matmul_mma_staged.cu [OLD_PATH]
# OLD_PATH: the file's path at OLD_COMMIT when it moved since. ARCH (default 90) picks sm_ARCH.
set -euo pipefail
old=${1:?old commit}
new=${2:?new commit}
file=${3:?kernel file}
old_file=${4:-$file}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
work=$(mktemp -d)
trap 'git worktree remove --force "$work/old" >/dev/null 2>&1; git worktree remove --force "$work/new" >/dev/null 2>&1; rm -rf "$work"' EXIT
for side in old new; do
  commit=$old path=$old_file
  [[ $side == new ]] && commit=$new path=$file
  git worktree add -q --detach "$work/$side" "$commit"
  (cd "$work/$side" && "$nvcc" -I. -O3 -DNDEBUG -std=c++17 -arch=sm_${ARCH:-90} -cubin -x cu "$path" -o "$work/$side.cubin")
done
python3 - "$work/old.cubin" "$work/new.cubin" <<'PY'
import re, struct, subprocess, sys

def kernels(path):
    b = open(path, "rb").read()
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    entsize, count, names_index = struct.unpack_from("<HHH", b, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * entsize) for i in range(count)]
    names_at = headers[names_index][4]
    def name(offset):
        end = b.index(b"\0", names_at + offset)
        return b[names_at + offset:end].decode()
    text = {name(h[0])[6:]: b[h[4]:h[4] + h[5]] for h in headers if name(h[0]).startswith(".text.")}
    mangled = list(text)
    plain = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True).stdout.split("\n")
    return {re.sub(r"\(anonymous namespace\)::", "", p): text[m] for m, p in zip(mangled, plain)}

old, new = kernels(sys.argv[1]), kernels(sys.argv[2])
same = 0
for k in sorted(set(old) | set(new)):
    if old.get(k) == new.get(k):
        same += 1
    else:
        print(f"differs: {k[:140]} ({len(old.get(k, b''))} -> {len(new.get(k, b''))} bytes)")
print(f"{same} of {len(set(old) | set(new))} kernels byte-identical")
PY
