#!/usr/bin/env bash
# Trains, converts, checks, evaluates deltaserve-tiny-moe and writes its logits fixture, on a
# machine with one CUDA GPU, torch, transformers 5.x and tokenizers. The corpus is built
# beforehand on a Debian machine by tools/train_tiny/make_corpus.sh (carry/corpus).
# From the repository root:
#     OUT=/some/dir bash tools/train_tiny/run_all.sh [train.py options]
# The exact command used for the committed model is in models/README.md. Results land in
# $WORK (default /tmp/train_tiny) and, when OUT is set, are packed into $OUT.
set -euo pipefail
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
CORPUS=${CORPUS:-carry/corpus}
WORK=${WORK:-/tmp/train_tiny}
NAME=deltaserve-tiny-moe
T=tools/train_tiny

pack() {
  [ -n "${OUT:-}" ] || return 0
  set +e
  [ -f "$WORK/$NAME.gguf" ] && cp "$WORK/$NAME.gguf" "$OUT/"
  (cd "$WORK/hf" 2>/dev/null && tar czf "$OUT/hf_meta.tgz" config.json tokenizer.json \
      tokenizer_config.json chat_template.jinja train_log.json 2>/dev/null)
  [ -d "$WORK/fixture" ] && tar czf "$OUT/fixture.tgz" -C "$WORK" fixture
  (cd "$WORK" && tar czf "$OUT/logs.tgz" ./*.log ./*.json 2>/dev/null)
  [ -f "$WORK/hf/model.safetensors" ] && split -b 15m "$WORK/hf/model.safetensors" "$OUT/ckpt.safetensors.part-"
  ls -la "$OUT"
}
trap pack EXIT

mkdir -p "$WORK"
rm -rf "$WORK/hf" "$WORK/fixture" "$WORK/$NAME.gguf"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
$PY $T/train.py --corpus "$CORPUS" --out "$WORK" "$@" 2>&1 | tee "$WORK/train.log"
$PY tools/convert/hf_to_gguf.py "$WORK/hf" --outfile "$WORK/$NAME.gguf" --outtype q8_0 --name "$NAME"
# (its F32 norm check is relative to max|w| of zero-centred weights and flags the float32
# rounding of w + 1, which transformers computes identically; so it only warns here)
$PY tools/oracle/check_gguf_roundtrip.py "$WORK/$NAME.gguf" "$WORK/hf" --quiet \
    || echo "WARNING: check_gguf_roundtrip reported differences (see above)"
$PY $T/make_fixture.py --gguf "$WORK/$NAME.gguf" --hf-dir "$WORK/hf" --corpus "$CORPUS" \
    --out "$WORK/fixture" 2>&1 | tee "$WORK/fixture.log"
$PY $T/evaluate.py --gguf "$WORK/$NAME.gguf" --hf-dir "$WORK/hf" --corpus "$CORPUS" \
    --out "$WORK/eval.json" 2>&1 | tee "$WORK/eval.log"
# Served with Qwen3.5's real template (tools, tool role); trained and evaluated on ChatML.
$PY $T/set_chat_template.py --template tests/fixtures/chat_templates/qwen3_5.jinja \
    --gguf "$WORK/$NAME.gguf" --hf-dir "$WORK/hf"
sha256sum "$WORK/$NAME.gguf" "$WORK/hf/model.safetensors"
