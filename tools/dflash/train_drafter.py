#!/usr/bin/env python3
"""Trains a small DFlash drafter for the embedded model on the CPU (torch 1.13, Debian's
python3-torch) from dflash_features' output, and writes it in the published format
(dflash_format.py: config.json + model.safetensors, BF16).

usage: train_drafter.py DATA_DIR OUT_DIR [--minutes M] [--threads N] [--seed S]

Training (the DFlash recipe, tools/dflash/README.md): pick anchor positions a in each
sequence; a block is [token a, mask x (B - 1)] at positions a .. a + B - 1; its rows attend to
the context rows of positions < a (hidden_norm(fc(target layers' outputs))) and to every row of
their own block; row k >= 1 learns token a + k (the target's own greedy continuation, so
acceptance is what the drafter learns). Block sizes vary per batch (2..16) because the server
runs a block of 1 + depth rows. The embedding and LM head are the target's, frozen."""
import argparse
import json
import math
import os
import random
import time

import numpy as np
import torch
import torch.nn.functional as F

import dflash_format


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, theta):
    # x [..., T, heads, d]; NeoX pairs (i, i + d/2), as Qwen3's rotate_half and kernels/rope.
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d // 2, dtype=torch.float32) * 2.0 / d)
    ang = pos.to(torch.float32)[..., None] * inv  # [..., T, d/2]
    cos, sin = ang.cos()[..., None, :], ang.sin()[..., None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Drafter(torch.nn.Module):
    def __init__(self, c, feature_width):
        super().__init__()
        self.c = c
        h, q = c["hidden_size"], c["num_attention_heads"] * c["head_dim"]
        kv, i = c["num_key_value_heads"] * c["head_dim"], c["intermediate_size"]
        lin = lambda o, n: torch.nn.Parameter(torch.randn(o, n) * n ** -0.5)
        one = lambda n: torch.nn.Parameter(torch.ones(n))
        self.p = torch.nn.ParameterDict()
        for name, shape in dflash_format.tensor_shapes(c).items():
            if name == "fc.weight":
                shape = [h, feature_width]
            self.p[name.replace(".", "__")] = one(shape[0]) if len(shape) == 1 else lin(*shape)

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def forward(self, features, block_tokens, block_pos, visible, embedding):
        """features [S, T, F]; block_tokens, block_pos [S, R]; visible [S, R, T + R] bool."""
        c, eps = self.c, self.c["rms_norm_eps"]
        nh, nkv, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        S, T = features.shape[:2]
        R = block_tokens.shape[1]
        ctx = rms(features @ self.w("fc.weight").t(), self.w("hidden_norm.weight"), eps)
        ctx_pos = torch.arange(T).expand(S, T)
        x = embedding[block_tokens]
        for l in range(c["num_hidden_layers"]):
            p = f"layers.{l}."
            a = rms(x, self.w(p + "input_layernorm.weight"), eps)
            q = (a @ self.w(p + "self_attn.q_proj.weight").t()).view(S, R, nh, d)
            q = rope(rms(q, self.w(p + "self_attn.q_norm.weight"), eps), block_pos, c["rope_theta"])
            def kv_of(src, pos):
                k = (src @ self.w(p + "self_attn.k_proj.weight").t()).view(S, -1, nkv, d)
                k = rope(rms(k, self.w(p + "self_attn.k_norm.weight"), eps), pos, c["rope_theta"])
                v = (src @ self.w(p + "self_attn.v_proj.weight").t()).view(S, -1, nkv, d)
                return k, v
            kc, vc = kv_of(ctx, ctx_pos)
            kb, vb = kv_of(a, block_pos)
            k = torch.cat([kc, kb], 1).repeat_interleave(nh // nkv, dim=2)
            v = torch.cat([vc, vb], 1).repeat_interleave(nh // nkv, dim=2)
            scores = torch.einsum("srhd,sthd->shrt", q, k) / math.sqrt(d)
            scores = scores.masked_fill(~visible[:, None], float("-inf"))
            attn = torch.einsum("shrt,sthd->srhd", scores.softmax(-1), v).reshape(S, R, nh * d)
            x = x + attn @ self.w(p + "self_attn.o_proj.weight").t()
            a = rms(x, self.w(p + "post_attention_layernorm.weight"), eps)
            g = F.silu(a @ self.w(p + "mlp.gate_proj.weight").t()) * (a @ self.w(p + "mlp.up_proj.weight").t())
            x = x + g @ self.w(p + "mlp.down_proj.weight").t()
        return rms(x, self.w("norm.weight"), eps)


def make_batch(tokens, features, rng, c, seqs, blocks_per_seq, block):
    """Anchors, block rows, labels and the visibility mask for a batch of sequences."""
    S, T = len(seqs), tokens.shape[1]
    R = blocks_per_seq * block
    bt = torch.full((S, R), c["mask_token_id"], dtype=torch.long)
    bp = torch.zeros((S, R), dtype=torch.long)
    labels = torch.full((S, R), -100, dtype=torch.long)
    weight = torch.zeros((S, R))
    visible = torch.zeros((S, R, T + R), dtype=torch.bool)
    for si, s in enumerate(seqs):
        for b in range(blocks_per_seq):
            a = rng.randrange(4, T - block)
            r0 = b * block
            bt[si, r0] = int(tokens[s, a])
            for k in range(block):
                bp[si, r0 + k] = a + k
                if k > 0:
                    labels[si, r0 + k] = int(tokens[s, a + k])
                    weight[si, r0 + k] = math.exp(-(k - 1) / 6.0)  # early positions matter most
            visible[si, r0:r0 + block, :a] = True
            visible[si, r0:r0 + block, T + r0:T + r0 + block] = True
    return torch.from_numpy(features[seqs]), bt, bp, visible, labels, weight


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--minutes", type=float, default=6.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--init", help="start from this drafter's weights (a previous run's OUT_DIR)")
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    meta = json.load(open(os.path.join(args.data, "meta.json")))
    N, T, H, V = meta["sequences"], meta["tokens"], meta["hidden"], meta["vocab"]
    c = dict(dflash_format.TINY)
    assert c["target_layer_ids"] == meta["layers"] and c["hidden_size"] == H and c["vocab_size"] == V
    tokens = np.fromfile(os.path.join(args.data, "tokens.i32"), dtype=np.int32).reshape(N, T)
    width = len(meta["layers"]) * H
    features = np.fromfile(os.path.join(args.data, "features.f32"), dtype=np.float32).reshape(N, T, width)
    embedding = torch.from_numpy(np.fromfile(os.path.join(args.data, "embedding.f32"), dtype=np.float32).reshape(V, H))
    output = torch.from_numpy(np.fromfile(os.path.join(args.data, "output.f32"), dtype=np.float32).reshape(V, H))
    heldout = list(range(N - N // 16, N))
    train = list(range(0, N - N // 16))

    model = Drafter(c, width)
    if args.init:
        for name, (shape, raw) in dflash_format.read_bf16(args.init).items():
            bits = torch.from_numpy(np.frombuffer(raw, dtype=np.int16).astype(np.int32) << 16)
            model.w(name).data.copy_(bits.view(torch.float32).view(shape))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    start, step, log = time.time(), 0, []
    budget = args.minutes * 60
    while time.time() - start < budget:
        block = rng.choice([2, 4, 8, 16, 16])
        seqs = rng.sample(train, 8)
        f, bt, bp, vis, labels, weight = make_batch(tokens, features, rng, c, seqs, 32 // block, block)
        x = model(f, bt, bp, vis, embedding)
        # The LM head (the step's largest product) only over the rows that learn a token.
        keep = labels.view(-1) >= 0
        logits = x.reshape(-1, H)[keep] @ output.t()
        loss_rows = F.cross_entropy(logits, labels.view(-1)[keep], reduction="none")
        loss = (loss_rows * weight.view(-1)[keep]).sum() / weight.sum()
        lr = args.lr * min(1.0, (step + 1) / 50) * max(0.1, 1.0 - (time.time() - start) / budget)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 20 == 0:
            print(f"step {step} block {block} loss {loss.item():.3f} ({time.time() - start:.0f} s)", flush=True)
            log.append({"step": step, "loss": round(loss.item(), 4)})

    # Held-out acceptance by position: greedy drafts of a 16-block against the target's tokens.
    with torch.no_grad():
        accepted = [0] * 15
        reached = [0] * 15
        hrng = random.Random(7)
        for _ in range(8):
            seqs = hrng.sample(heldout, min(16, len(heldout)))
            f, bt, bp, vis, labels, _ = make_batch(tokens, features, hrng, c, seqs, 4, 16)
            pred = (model(f, bt, bp, vis, embedding) @ output.t()).argmax(-1)
            for si in range(len(seqs)):
                for b in range(4):
                    ok = True
                    for k in range(1, 16):
                        if not ok:
                            break
                        reached[k - 1] += 1
                        ok = bool(pred[si, b * 16 + k] == labels[si, b * 16 + k])
                        accepted[k - 1] += int(ok)
        rates = [round(a / r, 3) if r else 0.0 for a, r in zip(accepted, reached)]
        print("held-out acceptance by position (given the previous accepted):", rates)

    raw = {}
    for name in dflash_format.tensor_shapes(c):
        t = model.w(name).detach().to(torch.bfloat16).contiguous()
        raw[name] = t.view(torch.int16).numpy().tobytes()
    dflash_format.write(args.out, c, None, raw=raw)
    with open(os.path.join(args.out, "train_log.json"), "w") as fh:
        json.dump({"steps": step, "seconds": round(time.time() - start), "threads": args.threads, "sequences": N,
                   "tokens_per_sequence": T, "heldout_acceptance_by_position": rates, "loss": log}, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
