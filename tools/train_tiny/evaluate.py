#!/usr/bin/env python3
"""Evaluate deltaserve-tiny-moe from its GGUF (the weights deltaserve serves, dequantised to
float32 and run with transformers' Qwen3_5MoeForCausalLM + the MTP head of tiny_model.py).

Metrics, per held-out domain of the corpus (make_corpus.py: code, prose, chat):
  perplexity   the domain's held-out documents, each tokenized and followed by
               <|endoftext|>, concatenated (at most --max-tokens), cut into consecutive
               non-overlapping windows of --ctx + 1 tokens; every window is one forward from
               an empty state and scores its last --ctx tokens. ppl = exp(mean NLL);
               bits_per_byte = sum NLL / ln 2 / UTF-8 bytes of the scored tokens.
  MTP acceptance (code and prose) under greedy verification with a 3-token draft:
               at --mtp-positions evenly spaced positions t of the same stream, with the
               --mtp-context true tokens up to x_{t+1} as context, the MTP head (prefilled over
               the context rows as in the model reference 4.5) drafts d1 from (h_t, x_{t+1}),
               d2 from (m1, d1), d3 from (m2, d2) (greedy, chained post-mtp.norm, 4.4); the
               trunk then runs over context + d1 d2 d3 and gives its greedy tokens g1 g2 g3 at
               the three draft positions. Draft k is accepted when d1..dk all equal g1..gk.
               acceptance at depth k = P(draft k accepted | drafts 1..k-1 accepted), i.e.
               #accepted(k) / #accepted(k-1) (#accepted(0) = all positions); also the
               unconditional rates and the mean number of accepted drafts.
  samples      greedy completions (no cache: every step re-runs the whole sequence) of a few
               Python prompts and of two chat prompts rendered with the chat template.

Usage: evaluate.py --gguf models/deltaserve-tiny-moe.gguf --hf-dir models/deltaserve-tiny-moe-hf
                   --corpus carry/corpus --out eval.json [--device cuda]
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny_model as tm  # noqa: E402

PY_PROMPTS = [
    "def fibonacci(n):\n",
    "import os\nimport sys\n\n\ndef main():\n",
    "class Stack:\n    \"\"\"A simple stack.\"\"\"\n\n    def __init__(self):\n",
    "def read_lines(path):\n    \"\"\"Return the lines of the file at path.\"\"\"\n",
    "    for key, value in sorted(d.items()):\n",
]
CHAT_PROMPTS = [
    [{"role": "user", "content": "Write a Python function is_even(n): return True if n is even."}],
    [{"role": "user", "content": "Tell me a fortune about computers."}],
]


def byte_lengths(tok):
    """UTF-8 byte length of every token id (byte-level alphabet undone)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    char_bytes = {chr(c): 1 for c in cs}
    out = np.zeros(tok.get_vocab_size(), dtype=np.int64)
    added = {t.content for t in tok.get_added_tokens_decoder().values()}
    for piece, i in tok.get_vocab().items():
        out[i] = len(piece.encode("utf-8")) if piece in added else sum(char_bytes.get(c, 1) for c in piece)
    return out


def domain_stream(tok, corpus, domain, max_tokens):
    docs = tm.read_docs(os.path.join(corpus, f"heldout_{domain}.jsonl.gz"))
    eot = tok.token_to_id(tm.EOT)
    ids = []
    for e in tok.encode_batch([d["text"] for d in docs], add_special_tokens=False):
        ids += e.ids + [eot]
        if len(ids) >= max_tokens:
            break
    return np.asarray(ids[:max_tokens], dtype=np.int64), len(docs)


@torch.no_grad()
def perplexity(model, stream, ctx, nbytes, device, batch=64):
    n_win = (len(stream) - 1) // ctx
    wins = np.stack([stream[i * ctx:i * ctx + ctx + 1] for i in range(n_win)])
    nll, count, scored_bytes = 0.0, 0, 0
    for b in range(0, n_win, batch):
        w = torch.from_numpy(wins[b:b + batch]).to(device)
        logits = model(input_ids=w[:, :-1], use_cache=False).logits.float()
        nll += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                                     reduction="sum"))
        count += w[:, 1:].numel()
        scored_bytes += int(nbytes[wins[b:b + batch, 1:]].sum())
    return {"tokens_scored": count, "windows": n_win, "ppl": math.exp(nll / count),
            "nll_per_token": nll / count, "bits_per_byte": nll / math.log(2) / max(1, scored_bytes)}


@torch.no_grad()
def mtp_acceptance(model, mtp, stream, C, n_pos, device, depth=3, batch=256):
    last = len(stream) - depth - 2          # x_{t+1} index must leave room for nothing else
    ts = np.linspace(C - 1, last - 1, n_pos).astype(np.int64)
    acc = np.zeros((0, depth), dtype=bool)
    for b in range(0, len(ts), batch):
        S = torch.from_numpy(np.stack([stream[t - C + 1:t + 2] for t in ts[b:b + batch]])).to(device)
        h = model.model(input_ids=S, use_cache=False).last_hidden_state     # [B, C+1, H]
        rows_h, rows_tok = h[:, :C], S[:, 1:C + 1]
        drafts = []
        for _ in range(depth):
            logits, m = tm.mtp_forward(model, mtp, rows_h, rows_tok)
            d = logits[:, -1].argmax(-1)
            drafts.append(d)
            rows_h = torch.cat([rows_h, m[:, -1:]], dim=1)
            rows_tok = torch.cat([rows_tok, d[:, None]], dim=1)
        D = torch.stack(drafts, dim=1)                                       # [B, depth]
        vlog = model(input_ids=torch.cat([S, D], dim=1), use_cache=False).logits
        G = vlog[:, C:C + depth].argmax(-1)                                  # trunk greedy
        ok = torch.cumprod((D == G).int(), dim=1).bool()
        acc = np.concatenate([acc, ok.cpu().numpy()])
    n = acc.sum(axis=0)
    prev = np.concatenate([[len(acc)], n[:-1]])
    return {"positions": int(len(acc)), "context_tokens": C,
            "accepted_counts": [int(x) for x in n],
            "acceptance_conditional": [float(a / p) if p else None for a, p in zip(n, prev)],
            "acceptance_unconditional": [float(a / len(acc)) for a in n],
            "mean_accepted_drafts": float(acc.sum(axis=1).mean())}


@torch.no_grad()
def greedy(model, tok, ids, n_new, device, stop_id=None):
    ids = list(ids)
    out = []
    for _ in range(n_new):
        logits = model(input_ids=torch.tensor([ids], device=device), use_cache=False).logits
        nxt = int(logits[0, -1].argmax())
        if stop_id is not None and nxt == stop_id:
            break
        ids.append(nxt)
        out.append(nxt)
    return tok.decode(out, skip_special_tokens=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", default=os.path.join("models", "deltaserve-tiny-moe.gguf"))
    ap.add_argument("--hf-dir", default=os.path.join("models", "deltaserve-tiny-moe-hf"))
    ap.add_argument("--corpus", default=os.path.join("carry", "corpus"))
    ap.add_argument("--out", default="eval.json")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=131072)
    ap.add_argument("--mtp-context", type=int, default=128)
    ap.add_argument("--mtp-positions", type=int, default=2048)
    ap.add_argument("--new-tokens", type=int, default=64)
    args = ap.parse_args()
    t0 = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(args.hf_dir, "tokenizer.json"))
    model, mtp, cfg, reader = tm.load_from_gguf(args.gguf, args.hf_dir, args.device)
    gguf_tokens = reader.kv["tokenizer.ggml.tokens"]
    vocab = tok.get_vocab(with_added_tokens=True)
    mismatch = sum(1 for t, i in vocab.items() if gguf_tokens[i] != t)
    if mismatch:
        raise SystemExit(f"GGUF vocabulary differs from tokenizer.json in {mismatch} tokens")
    nbytes = byte_lengths(tok)
    res = {"gguf": os.path.basename(args.gguf), "file_type": reader.kv.get("general.file_type"),
           "device": args.device, "weights": "dequantised from the GGUF, float32 compute", "domains": {}}
    for domain in ("code", "prose", "chat"):
        stream, n_docs = domain_stream(tok, args.corpus, domain, args.max_tokens)
        entry = {"documents": n_docs, "stream_tokens": int(len(stream))}
        entry["perplexity"] = perplexity(model, stream, args.ctx, nbytes, args.device)
        if domain != "chat":
            entry["mtp"] = mtp_acceptance(model, mtp, stream, args.mtp_context, args.mtp_positions,
                                          args.device)
        res["domains"][domain] = entry
        p, m = entry["perplexity"], entry.get("mtp")
        print(f"{domain:6s} ppl {p['ppl']:8.3f} bpb {p['bits_per_byte']:.3f} over {p['tokens_scored']} tokens"
              + (f" | MTP acceptance d1 {m['acceptance_conditional'][0]:.3f} d2|1 "
                 f"{m['acceptance_conditional'][1]:.3f} d3|2 {m['acceptance_conditional'][2]:.3f} "
                 f"mean accepted {m['mean_accepted_drafts']:.3f}" if m else ""), flush=True)
    import jinja2
    with open(os.path.join(args.hf_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        template = jinja2.Environment().from_string(json.load(f)["chat_template"])
    samples = []
    for prompt in PY_PROMPTS:
        text = greedy(model, tok, tok.encode(prompt).ids, args.new_tokens, args.device)
        samples.append({"prompt": prompt, "completion": text})
    im_end = tok.token_to_id(tm.IM_END)
    for messages in CHAT_PROMPTS:
        prompt = template.render(messages=messages, add_generation_prompt=True)
        text = greedy(model, tok, tok.encode(prompt).ids, 96, args.device, stop_id=im_end)
        samples.append({"prompt": prompt, "completion": text})
    res["samples"] = samples
    for s in samples:
        print("---- prompt:\n" + s["prompt"] + "\n---- completion:\n" + s["completion"], flush=True)
    res["seconds"] = round(time.time() - t0, 1)
    res["settings"] = {k: v for k, v in vars(args).items() if k not in ("out",)}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
