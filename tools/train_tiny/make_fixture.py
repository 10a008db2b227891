#!/usr/bin/env python3
"""Logits fixture of the trained deltaserve-tiny-moe on held-out text, from the weights as
stored in its GGUF (every tensor decoded to float32 and mapped back to HF layout), computed
with transformers' Qwen3_5MoeForCausalLM on the CPU in float32 (eager attention, one thread:
reruns reproduce bit for bit). Protocol of tools/oracle (oracle_common.run_protocol):
tokens[0:64] in one prefill with the cache, then 16 single-token decode steps.

Writes to --out (default tests/fixtures/tiny_trained):
  logits.f32       float32 [80][V]: row t = logits after token t (rows 0..63 prefill,
                   64..79 decode steps); little-endian, C order, no header
  reference.json   the text, its 80 tokens, shapes, protocol, GGUF sha256, diagnostics
  tokenizer_cases.json  strings (held-out code, prose, chat with special tokens, odd
                   whitespace and Unicode) and the ids transformers' tokenizer gives them

Usage: make_fixture.py --gguf models/deltaserve-tiny-moe.gguf --hf-dir models/deltaserve-tiny-moe-hf
                       --corpus carry/corpus [--out tests/fixtures/tiny_trained]
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
import oracle_common as oc  # noqa: E402
import tiny_model as tm  # noqa: E402

EXTRA_CASES = [
    "", " ", "\n\n\n", "   indented\n\tand tabbed\r\n", "x = [i ** 2 for i in range(10)]  # squares\n",
    "Hello, World! It's 2026 and we're testing: 1234567890.",
    "naïve café, Ünïcödé — “quotes” … 日本語テキスト 🚀",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n",
    "text<|endoftext|>more text", "<think>reasoning</think>answer", "e\u0301 vs \u00e9 (NFC)",
]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def pick_text(corpus, tok, n_tokens):
    """The first held-out code document long enough, from its first function or class."""
    for d in tm.read_docs(os.path.join(corpus, "heldout_code.jsonl.gz")):
        text = d["text"]
        cut = min((i for i in (text.find("\ndef "), text.find("\nclass ")) if i >= 0), default=-1)
        snippet = text[cut + 1:cut + 1 + 4000] if cut >= 0 else text[:4000]
        if len(tok.encode(snippet).ids) >= n_tokens:
            return d["id"], snippet
    raise SystemExit("no held-out code document is long enough")


def tokenizer_cases(tok, corpus):
    cases = list(EXTRA_CASES)
    for domain in ("code", "prose", "chat"):
        docs = tm.read_docs(os.path.join(corpus, f"heldout_{domain}.jsonl.gz"))
        for d in docs[:: max(1, len(docs) // 6)][:6]:
            cases.append(d["text"][:1500])
    return [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in cases]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", default=os.path.join("models", "deltaserve-tiny-moe.gguf"))
    ap.add_argument("--hf-dir", default=os.path.join("models", "deltaserve-tiny-moe-hf"))
    ap.add_argument("--corpus", default=os.path.join("carry", "corpus"))
    ap.add_argument("--out", default=os.path.join("tests", "fixtures", "tiny_trained"))
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    torch.set_num_threads(1)
    import transformers
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(args.hf_dir, "tokenizer.json"))
    model, mtp, cfg, reader = tm.load_from_gguf(args.gguf, args.hf_dir, "cpu")
    doc_id, text = pick_text(args.corpus, tok, oc.NUM_TOKENS)
    all_ids = tok.encode(text).ids
    tokens = [int(t) for t in all_ids[:oc.NUM_TOKENS]]
    res = oc.run_protocol(model, mtp, tokens)
    logits = res["logits"]
    os.makedirs(args.out, exist_ok=True)
    np.ascontiguousarray(logits, dtype="<f4").tofile(os.path.join(args.out, "logits.f32"))
    V = cfg.vocab_size
    ref = {
        "model": tm.MODEL_NAME,
        "arch": "qwen35moe",
        "gguf": "models/" + os.path.basename(args.gguf),
        "gguf_sha256": sha256(args.gguf),
        "weights": "every GGUF tensor decoded to float32 (Q8_0 blocks dequantised) and mapped back "
                   "to HF layout; float32 compute on the CPU, eager attention",
        "text_source": f"held-out code document {doc_id}",
        "text": text,
        "text_num_tokens": len(all_ids),
        "tokens": tokens,
        "prefill_tokens": oc.PREFILL_TOKENS,
        "decode_steps": oc.DECODE_STEPS,
        "num_tokens": oc.NUM_TOKENS,
        "num_vocab": V,
        "hidden_size": cfg.hidden_size,
        "num_layers": cfg.num_hidden_layers,
        "files": {"logits.f32": {"dtype": "float32", "shape": [oc.NUM_TOKENS, V],
                                 "rows": "0..63 one prefill forward of tokens[0:64] (use_cache=True); "
                                         "64..79 one single-token decode step each with the cache; "
                                         "row t = logits after token t"}},
        "byte_order": "little-endian, C order, no header",
        "decode_variant": res["decode_variant"],
        "decode_vs_full_max_abs_diff": res["decode_vs_full_max_abs_diff"],
        "prefill_vs_full_max_abs_diff": res["prefill_vs_full_max_abs_diff"],
        "logits_max_abs": float(np.abs(logits).max()),
        "logits_std": float(logits.std()),
        "argmax": [int(i) for i in logits.argmax(-1)],
        "argmax_matches_next_token": int((logits[:-1].argmax(-1) == np.asarray(tokens[1:])).sum()),
        "acceptance": "max|diff|/max|ref| <= 1e-4 for an engine that dequantises the Q8_0 weights and "
                      "computes in float32",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__},
    }
    with open(os.path.join(args.out, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")
    cases = tokenizer_cases(tok, args.corpus)
    with open(os.path.join(args.out, "tokenizer_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer": "models/deltaserve-tiny-moe-hf/tokenizer.json (= the GGUF's vocabulary)",
                   "add_special_tokens": False, "cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"fixture: {len(tokens)} tokens of {doc_id}; logits max|.| {ref['logits_max_abs']:.3f}, "
          f"decode vs full {ref['decode_vs_full_max_abs_diff']:.3g} ({ref['decode_variant']}), "
          f"next-token argmax hits {ref['argmax_matches_next_token']}/79; {len(cases)} tokenizer cases")


if __name__ == "__main__":
    main()
