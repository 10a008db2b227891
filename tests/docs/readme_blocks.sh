#!/usr/bin/env bash
# The README works as written on a fresh build: its blocks marked `runnable` (the daemon on
# the embedded model, the first requests with curl and the official OpenAI Node client, the
# other commands) run against this build's binary (tests/docs/run_doc_blocks.py says how
# blocks are marked and run). Also: the runner fails on a block that fails; the README stays
# short; every relative link of the top-level docs resolves; every serve option is documented.
# A ctest test (every tests/<folder>/*.sh is); needs DELTASERVE_BUILD_DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${DELTASERVE_BUILD_DIR:?set DELTASERVE_BUILD_DIR to the build folder}
bin="$build/cli/deltaserve"
[[ -x "$bin" ]] || { echo "FAIL: $bin not built"; exit 1; }
fail=0

echo "== the runner catches a failing block"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '# t\n\n```sh runnable\ntrue\n```\n\n```sh runnable\nls no-such-file-here\n```\n' > "$tmp/bad.md"
if python3 tests/docs/run_doc_blocks.py "$tmp/bad.md" --build-dir "$build" > "$tmp/bad.log" 2>&1; then
  echo "FAIL: the runner passed a block that exits 1"; cat "$tmp/bad.log"; fail=1
elif ! grep -q "bad.md:7: exit 2" "$tmp/bad.log"; then
  echo "FAIL: the runner did not name the failing block"; cat "$tmp/bad.log"; fail=1
fi

echo "== README.md's runnable blocks"
python3 tests/docs/run_doc_blocks.py README.md --build-dir "$build" || fail=1

echo "== README.md length"
lines=$(wc -l < README.md)
if ((lines > 160)); then echo "FAIL: README.md has $lines lines (details belong in docs/)"; fail=1; fi

echo "== relative links of the docs"
python3 - README.md DESIGN.md docs/*.md bench/README.md bench/RESULTS.md tests/gpu/README.md <<'PY' || fail=1
import os, re, sys
# Pages that DESIGN.md links as placeholders while other work writes them.
pending = {"docs/prefix-cache.md", "docs/constrained-decoding.md"}
bad = 0
for path in sys.argv[1:]:
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        file = target.split("#")[0]
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file))
        if resolved in pending:
            continue
        if not os.path.exists(resolved):
            print(f"FAIL: {path}: link to {target} does not resolve")
            bad = 1
sys.exit(bad)
PY

echo "== every serve option is documented"
keys=$("$bin" serve --dump-config | python3 -c 'import json,sys; print("\n".join(json.load(sys.stdin)))')
for key in $keys; do
  grep -q "\`$key\`" docs/configuration.md docs/gpu-tuning.md ||
    { echo "FAIL: option '$key' (deltaserve serve --dump-config) is in neither docs/configuration.md nor docs/gpu-tuning.md"; fail=1; }
done

((fail == 0)) && echo "PASS"
exit "$fail"
