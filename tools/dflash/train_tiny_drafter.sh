#!/usr/bin/env bash
# Trains the DFlash drafter of the embedded model on the CPU (minutes, 2 cores) and writes it to
# models/deltaserve-tiny-moe-dflash/ (tools/dflash/README.md).
#     as root, from the repository root, after a release build with benchmarks (dflash_features):
#         bash tools/dflash/train_tiny_drafter.sh [WORK_DIR]
# Installs Debian's python3-torch (CPU) and numpy; the corpus is the embedded model's own
# (tools/train_tiny/make_corpus.sh); the targets are the model's greedy continuations of its
# prompts, so the drafter learns what the verifier accepts.
set -euo pipefail
WORK=${1:-carry/dflash}
OUT=models/deltaserve-tiny-moe-dflash
for p in python3-torch python3-numpy; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$p"
done
[ -f "$WORK/corpus/train.jsonl.gz" ] || bash tools/train_tiny/make_corpus.sh "$WORK/corpus"
# Prompts: the start of 512 training documents (seeded choice), NUL-separated.
/usr/bin/python3 - "$WORK" <<'PY'
import gzip, json, random, sys
work = sys.argv[1]
docs = [json.loads(line)["text"] for line in gzip.open(f"{work}/corpus/train.jsonl.gz", "rt", encoding="utf-8")]
random.Random(20261207).shuffle(docs)
with open(f"{work}/prompts.bin", "wb") as f:
    n = 0
    for text in docs:
        if len(text) < 400:
            continue
        f.write(text[:400].encode("utf-8") + b"\0")
        n += 1
        if n == 512:
            break
PY
build/release/tools/dflash/dflash_features models/deltaserve-tiny-moe.gguf "$WORK/prompts.bin" "$WORK/features" 1,3,5,7 32 96 2
# Two runs, as the committed drafter was made (the second resumes the first at a higher rate).
cd tools/dflash
/usr/bin/python3 train_drafter.py "../../$WORK/features" "../../$WORK/run1" --minutes 10 --threads 2
/usr/bin/python3 train_drafter.py "../../$WORK/features" "../../$OUT" --minutes 13 --threads 2 --init "../../$WORK/run1" --lr 5e-3 --seed 2
cp "../../$WORK/run1/train_log.json" "../../$OUT/train_log_run1.json"
