#!/usr/bin/env python3
"""Train deltaserve-tiny-moe: a ~13M-parameter qwen35moe model (8 layers, 3:1 Gated DeltaNet :
gated attention, 16 experts top-2 + shared expert) with an MTP head, from scratch, with
transformers' own Qwen3_5MoeForCausalLM on one GPU.

Steps: train the byte-level BPE tokenizer on the corpus' training split (code + prose),
tokenize everything into one stream (documents separated by <|endoftext|>, chat samples
repeated --chat-repeat times), then train trunk and MTP jointly on random windows:
  loss = CE(trunk, t+1) + mtp_weight * CE(MTP(h_t, x_{t+1}), x_{t+2})
       + mtp2_weight * CE(MTP(m_t, x_{t+2}), x_{t+3})   (chained depth 2, m = post-mtp.norm)
       + aux_weight * switch load-balancing loss of every router
h_t is the post-final-norm trunk hidden (model reference 4.3). bf16 autocast, AdamW, linear
warmup then cosine decay, fixed seed.

Writes OUT/hf/: config.json, model.safetensors (matrices bf16, small tensors f32),
tokenizer.json, tokenizer_config.json (with the ChatML template), chat_template.jinja,
train_log.json.

Usage: train.py --corpus carry/corpus --out /tmp/train_tiny [--steps N --batch B ...]
       train.py --corpus carry/corpus --out /tmp/train_tiny --probe   (speed probe only)
"""

import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny_model as tm  # noqa: E402

F32_NAMES = ("mlp.gate.weight", "shared_expert_gate.weight", "conv1d.weight")


def log(msg):
    print(msg, flush=True)


# ---- data ---------------------------------------------------------------------------------
def build_tokenizer(args, train_docs, hf_dir):
    texts = [d["text"] for d in train_docs if d["domain"] != "chat"]
    t0 = time.time()
    if args.tokenizer:   # reuse one trained before on the same corpus (saves a minute)
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    else:
        tok = tm.train_tokenizer(texts, args.vocab)
    with open(os.path.join(HERE, "chat_template.jinja"), encoding="utf-8") as f:
        template = f.read()
    tok.save(os.path.join(hf_dir, "tokenizer.json"))
    with open(os.path.join(hf_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tm.tokenizer_config(tok, template), f, indent=2, ensure_ascii=False)
        f.write("\n")
    shutil.copy(os.path.join(HERE, "chat_template.jinja"), os.path.join(hf_dir, "chat_template.jinja"))
    log(f"tokenizer: {tok.get_vocab_size()} tokens from {len(texts)} documents "
        f"in {time.time() - t0:.1f} s")
    return tok


def token_stream(tok, docs, chat_repeat):
    eot = tok.token_to_id(tm.EOT)
    encs = tok.encode_batch([d["text"] for d in docs], add_special_tokens=False)
    parts = []
    for d, e in zip(docs, encs):
        ids = np.asarray(e.ids, dtype=np.int32)
        for _ in range(chat_repeat if d["domain"] == "chat" else 1):
            parts += [ids, np.array([eot], dtype=np.int32)]
    return np.concatenate(parts)


# ---- model helpers ------------------------------------------------------------------------
class RouterTap:
    """Collects (router logits, top-k indices) of every router call for the aux loss."""

    def __init__(self, modules):
        self.records = []
        self.handles = [m.register_forward_hook(self._hook) for module in modules
                        for m in module.modules() if type(m).__name__.endswith("TopKRouter")]

    def _hook(self, _module, _inp, out):
        self.records.append((out[0], out[2]))

    def aux_loss(self, num_experts):
        """Switch-Transformer balance loss E * sum_e f_e * P_e, averaged over router calls."""
        total, n = 0.0, len(self.records)
        for logits, idx in self.records:
            probs = logits.float().softmax(-1)
            counts = torch.zeros(num_experts, device=probs.device).scatter_add_(
                0, idx.reshape(-1), torch.ones(idx.numel(), device=probs.device))
            f = counts / idx.numel()
            total = total + num_experts * (f * probs.mean(0)).sum()
        self.records.clear()
        return total / max(1, n)


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


def losses(model, mtp, tap, w, args, V):
    """w: [B, T+1] token windows. Returns (total, dict of parts)."""
    T = w.shape[1] - 1
    x = w[:, :T]
    h = model.model(input_ids=x, use_cache=False).last_hidden_state
    logits = model.lm_head(h)
    main = F.cross_entropy(logits.float().reshape(-1, V), w[:, 1:].reshape(-1))
    l1, m1 = tm.mtp_forward(model, mtp, h[:, :-1], w[:, 1:T])
    mtp1 = F.cross_entropy(l1.float().reshape(-1, V), w[:, 2:].reshape(-1))
    total = main + args.mtp_weight * mtp1
    parts = {"main": main, "mtp1": mtp1}
    if args.mtp2_weight > 0:
        l2, _ = tm.mtp_forward(model, mtp, m1[:, :-1], w[:, 2:T])
        mtp2 = F.cross_entropy(l2.float().reshape(-1, V), w[:, 3:].reshape(-1))
        total = total + args.mtp2_weight * mtp2
        parts["mtp2"] = mtp2
    aux = tap.aux_loss(model.config.num_experts)
    parts["aux"] = aux
    return total + args.aux_weight * aux, parts


def batch_at(stream, rng, B, T, device):
    starts = rng.integers(0, len(stream) - T - 1, size=B)
    w = np.stack([stream[s:s + T + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(w).pin_memory().to(device, non_blocking=True)


def make_optimizer(model, mtp, args):
    decay, no_decay = [], []
    for module in (model, mtp):
        for n, p in module.named_parameters():
            (decay if p.ndim >= 2 and "embed_tokens" not in n else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": args.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)


def save_checkpoint(model, mtp, cfg, hf_dir):
    from safetensors.torch import save_file
    tensors = {}
    for k, v in tm.state_tensors(model, mtp).items():
        v = v.detach().float().cpu().contiguous()
        if v.ndim >= 2 and not k.endswith(F32_NAMES):
            v = v.to(torch.bfloat16)
        tensors[k] = v
    save_file(tensors, os.path.join(hf_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(hf_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(tm.config_json(cfg), f, indent=2, sort_keys=True)
        f.write("\n")
    return sum(v.numel() for v in tensors.values())


def count_params(model, mtp):
    trunk = sum(p.numel() for p in model.parameters())
    head = sum(p.numel() for p in mtp.parameters())
    E, k = model.config.num_experts, model.config.num_experts_per_tok
    experts = sum(p.numel() for n, p in list(model.named_parameters()) + list(mtp.named_parameters())
                  if ".experts." in n)
    active = trunk + head - experts + experts * k // E
    return {"trunk": trunk, "mtp": head, "total": trunk + head, "active_per_token": active}


# ---- probe --------------------------------------------------------------------------------
def probe(model, mtp, stream, args, V, device):
    """ms per optimizer step for each experts implementation and a few batch sizes."""
    tap = RouterTap([model, mtp])
    opt = make_optimizer(model, mtp, args)
    rng = np.random.default_rng(0)
    ref_loss, results = None, {}
    for impl in ("eager", "grouped_mm", "batched_mm"):
        for B in (args.batch // 2, args.batch, args.batch * 2):
            try:
                tm.set_experts_impl([model, mtp], impl)
                times = []
                for i in range(5):
                    w = batch_at(stream, np.random.default_rng(i % 2), B, args.seq, device)
                    torch.cuda.synchronize()
                    t0 = time.time()
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        loss, parts = losses(model, mtp, tap, w, args, V)
                    loss.backward()
                    opt.zero_grad(set_to_none=True)   # no update: every config sees the same weights
                    torch.cuda.synchronize()
                    times.append(time.time() - t0)
                    if i == 0 and B == args.batch:
                        if impl == "eager":
                            ref_loss = float(loss.detach())
                        log(f"  probe {impl} B={B}: loss {float(loss.detach()):.5f} (eager {ref_loss})")
                ms = 1000 * float(np.median(times[2:]))
                results[f"{impl}/B{B}"] = ms
                log(f"  probe {impl:10s} B={B:4d}: {ms:8.1f} ms/step, "
                    f"{B * args.seq / ms * 1000:10.0f} tok/s, peak mem "
                    f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
            except Exception as e:  # noqa: BLE001 - report and go on with the next variant
                log(f"  probe {impl} B={B}: FAILED {type(e).__name__}: {str(e)[:300]}")
                tap.records.clear()
                opt.zero_grad(set_to_none=True)
                break
    tm.set_experts_impl([model, mtp], "eager")
    del rng
    return results


# ---- main ---------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=os.path.join("carry", "corpus"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--vocab", type=int, default=5632)
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2.5e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--mtp2-weight", type=float, default=0.1)
    ap.add_argument("--aux-weight", type=float, default=0.01)
    ap.add_argument("--chat-repeat", type=int, default=3)
    ap.add_argument("--experts-impl", default="grouped_mm", help="eager | grouped_mm | batched_mm")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--max-minutes", type=float, default=0.0,
                    help="stop early (and still save) once training has run this long; 0 = never")
    ap.add_argument("--probe", action="store_true", help="only time steps and exit")
    ap.add_argument("--tokenizer", default="", help="folder with a tokenizer.json to reuse")
    args = ap.parse_args()

    t_start = time.time()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    import tokenizers
    import transformers
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__, "numpy": np.__version__,
                "gpu": torch.cuda.get_device_name(0)}
    log(f"versions {versions}")

    hf_dir = os.path.join(args.out, "hf")
    os.makedirs(hf_dir, exist_ok=True)
    train_docs = tm.read_docs(os.path.join(args.corpus, "train.jsonl.gz"))
    tok = build_tokenizer(args, train_docs, hf_dir)
    V = tok.get_vocab_size()
    t0 = time.time()
    stream = token_stream(tok, train_docs, args.chat_repeat)
    n_bytes = sum(len(d["text"].encode("utf-8")) for d in train_docs)
    log(f"stream: {len(stream)} tokens ({n_bytes / len(stream):.2f} bytes/token before chat "
        f"repeats) in {time.time() - t0:.1f} s")

    cfg = tm.make_config(V, tok.token_to_id(tm.EOT), tok.token_to_id(tm.IM_END))
    model, mtp = tm.build(cfg)
    tm.init_weights(model, mtp, args.seed)
    model.to(device).train()
    mtp.to(device).train()
    params = count_params(model, mtp)
    log(f"params {params}")

    if args.probe:
        probe(model, mtp, stream, args, V, device)
        return

    n_impl = tm.set_experts_impl([model, mtp], args.experts_impl)
    log(f"experts implementation {args.experts_impl} on {n_impl} configs")
    tap = RouterTap([model, mtp])
    opt = make_optimizer(model, mtp, args)
    rng = np.random.default_rng(args.seed)
    all_params = [p for m in (model, mtp) for p in m.parameters()]
    history, acc, n_acc = [], {}, 0
    torch.cuda.synchronize()
    t_train = time.time()
    step = 0
    for step in range(args.steps):
        lr = lr_at(step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        w = batch_at(stream, rng, args.batch, args.seq, device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, parts = losses(model, mtp, tap, w, args, V)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(all_params, args.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        for k, v in parts.items():
            acc[k] = acc.get(k, 0.0) + v.detach()
        acc["gnorm"] = acc.get("gnorm", 0.0) + gnorm.detach()
        n_acc += 1
        last = step == args.steps - 1
        if (step + 1) % args.log_every == 0 or last:
            torch.cuda.synchronize()
            el = time.time() - t_train
            row = {k: float(v) / n_acc for k, v in acc.items()}
            row.update(step=step + 1, lr=lr, elapsed_s=round(el, 1),
                       tokens=(step + 1) * args.batch * args.seq)
            history.append(row)
            log(f"step {step + 1:5d} lr {lr:.2e} loss {row['main']:.4f} mtp1 {row['mtp1']:.4f} "
                f"mtp2 {row.get('mtp2', 0):.4f} aux {row['aux']:.3f} gnorm {row['gnorm']:.2f} "
                f"| {row['tokens'] / el:,.0f} tok/s, {el:.0f} s")
            acc, n_acc = {}, 0
            if args.max_minutes and el > args.max_minutes * 60 and not last:
                log(f"stopping early at step {step + 1}: --max-minutes {args.max_minutes} reached")
                break
    torch.cuda.synchronize()
    train_s = time.time() - t_train
    n_saved = save_checkpoint(model, mtp, cfg, hf_dir)
    summary = {"args": vars(args), "steps_run": step + 1, "train_seconds": round(train_s, 1),
               "total_seconds": round(time.time() - t_start, 1), "stream_tokens": int(len(stream)),
               "vocab_size": V, "params": params, "saved_elements": n_saved, "versions": versions,
               "history": history}
    with open(os.path.join(hf_dir, "train_log.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    log(f"trained {step + 1} steps in {train_s:.0f} s; saved {n_saved} elements to {hf_dir}")


if __name__ == "__main__":
    main()
