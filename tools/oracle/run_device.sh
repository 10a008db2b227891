#!/usr/bin/env bash
# Regenerates every oracle fixture on a machine with torch + transformers 5.x (the GPU test
# machine; everything runs on its CPU in float32). Run from the repository root:
#     OUT=/some/dir bash tools/oracle/run_device.sh
# Leaves the fixtures in tests/fixtures/tiny_{dense,moe}/ and, when OUT is set, one tarball
# per model in $OUT (plus the tokenizer helper's reference ids when its script exists).
set -euo pipefail
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
FIX=tests/fixtures
MODELS="tiny_dense tiny_moe"

$PY -c "import torch, transformers, numpy; print('torch', torch.__version__, 'transformers', transformers.__version__, 'numpy', numpy.__version__)"
$PY tools/oracle/make_fixtures.py --out "$FIX"
for m in $MODELS; do
  for t in f32 bf16 q8_0 q4_0; do
    $PY tools/convert/hf_to_gguf.py "$FIX/$m/hf" --outfile "$FIX/$m/model-$t.gguf" --outtype "$t" --name "$m"
    $PY tools/oracle/check_gguf_roundtrip.py "$FIX/$m/model-$t.gguf" "$FIX/$m/hf"
  done
done
$PY tools/oracle/requant_reference.py --fixtures "$FIX"
for m in $MODELS; do
  $PY tools/oracle/numpy_reference.py "$FIX/$m" || echo "numpy float64 cross-check FAILED for $m"
done
sha256sum "$FIX"/tiny_*/model-*.gguf "$FIX"/tiny_*/*.f32
du -sh "$FIX"/tiny_*
if [ -n "${OUT:-}" ]; then
  for m in $MODELS; do
    tar czf "$OUT/fixtures_$m.tgz" -C "$FIX" "$m"
  done
  if [ -f tools/tokenizer_oracle/make_reference.py ]; then
    $PY tools/tokenizer_oracle/make_reference.py || echo "tokenizer oracle FAILED (rc $?)"
  fi
  ls -la "$OUT"
fi
