#!/usr/bin/env python3
"""Independent float64 numpy forward pass of a qwen35 / qwen35moe GGUF (numpy only).

Written from the model reference (sections 2 and 4) using the GGUF conventions the engine
uses: norms hold 1+w, ssm_a = -exp(A_log), value heads in tiled order (value head n reads
key head n mod Hk), experts split. It replays the fixture protocol (64-token prefill, 16
single-token decode steps with the recurrent/conv state and KV cache, an uncached 80-token
forward, the MTP rows) and compares with the HF transformers references, so it checks the
fixtures, the converter and the GGUF semantics against each other.

Usage: numpy_reference.py FIXTURE_DIR [--types f32,bf16,q8_0,q4_0]
  compares model-f32.gguf with logits.f32 / prefill_full.f32 / hidden.f32 / mtp_logits.f32 /
  mtp_hidden.f32 and model-<t>.gguf with logits_<t>.f32 / mtp_logits_<t>.f32.
Exit status 0 when every relative error (max|diff| / max|ref|) is below 1e-4.
"""

import argparse
import json
import os
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "gguf"))
sys.path.insert(0, os.path.join(_HERE, "..", "convert"))

import hf_to_gguf as conv  # noqa: E402
from gguf_constants import GGMLType  # noqa: E402
from gguf_reader import GGUFReader  # noqa: E402


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


class Model:
    def __init__(self, path):
        r = GGUFReader(path)
        self.arch = r.kv["general.architecture"]
        a = self.arch
        kv = r.kv
        self.L = kv[f"{a}.block_count"] - kv.get(f"{a}.nextn_predict_layers", 0)
        self.H = kv[f"{a}.embedding_length"]
        self.nh = kv[f"{a}.attention.head_count"]
        self.nkv = kv[f"{a}.attention.head_count_kv"]
        self.hd = kv[f"{a}.attention.key_length"]
        self.eps = kv[f"{a}.attention.layer_norm_rms_epsilon"]
        self.R = kv[f"{a}.rope.dimension_count"]
        self.base = kv[f"{a}.rope.freq_base"]
        self.Kc = kv[f"{a}.ssm.conv_kernel"]
        self.dk = kv[f"{a}.ssm.state_size"]
        self.Hk = kv[f"{a}.ssm.group_count"]
        self.Hv = kv[f"{a}.ssm.time_step_rank"]
        self.dv = kv[f"{a}.ssm.inner_size"] // self.Hv
        self.interval = kv.get(f"{a}.full_attention_interval", 4)
        self.top_k = kv.get(f"{a}.expert_used_count")
        self.router_gaps = []   # per MoE call: min over tokens of (k-th - (k+1)-th router logit)
        self.w = {}
        for name, t in r.tensors.items():
            if t.ggml_type in (GGMLType.F32, GGMLType.F16, GGMLType.BF16):
                arr = r.array(name)
            else:
                arr = conv.decode_tensor(t.ggml_type, r.raw(name), t.shape)
            self.w[name] = np.asarray(arr, dtype=np.float64)
        if self.eps > 1e-3 or self.eps <= 0:
            raise ValueError("implausible rms eps")

    def is_recurrent(self, i):
        return i < self.L and (i + 1) % self.interval != 0

    # ---- blocks -------------------------------------------------------------------------
    def rope(self, x, positions):
        """NeoX rotation of the first R dims of x [T, heads, hd]."""
        half = self.R // 2
        inv = self.base ** (-np.arange(half, dtype=np.float64) * 2.0 / self.R)
        ang = positions[:, None].astype(np.float64) * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x1, x2 = x[..., :half], x[..., half:self.R]
        out = x.copy()
        out[..., :half] = x1 * cos - x2 * sin
        out[..., half:self.R] = x2 * cos + x1 * sin
        return out

    def attention(self, b, a, positions, cache):
        W = self.w
        T = a.shape[0]
        qg = (a @ W[b + "attn_q.weight"].T).reshape(T, self.nh, 2 * self.hd)
        q, gate = qg[..., :self.hd], qg[..., self.hd:].reshape(T, -1)
        k = (a @ W[b + "attn_k.weight"].T).reshape(T, self.nkv, self.hd)
        v = (a @ W[b + "attn_v.weight"].T).reshape(T, self.nkv, self.hd)
        q = self.rope(rmsnorm(q, W[b + "attn_q_norm.weight"], self.eps), positions)
        k = self.rope(rmsnorm(k, W[b + "attn_k_norm.weight"], self.eps), positions)
        cache.setdefault("k", []).append(k)
        cache.setdefault("v", []).append(v)
        cache.setdefault("pos", []).append(positions)
        K, V, P = np.concatenate(cache["k"]), np.concatenate(cache["v"]), np.concatenate(cache["pos"])
        group = self.nh // self.nkv
        out = np.empty((T, self.nh, self.hd))
        for h in range(self.nh):
            s = q[:, h, :] @ K[:, h // group, :].T / np.sqrt(self.hd)
            s = np.where(P[None, :] <= positions[:, None], s, -np.inf)
            s = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, h, :] = (s / s.sum(axis=1, keepdims=True)) @ V[:, h // group, :]
        out = out.reshape(T, -1) * sigmoid(gate)
        return out @ W[b + "attn_output.weight"].T

    def gdn(self, b, a, state):
        W = self.w
        T = a.shape[0]
        Dk = self.Hk * self.dk
        x = a @ W[b + "attn_qkv.weight"].T                  # [T, Dc]
        z = (a @ W[b + "attn_gate.weight"].T).reshape(T, self.Hv, self.dv)
        beta = sigmoid(a @ W[b + "ssm_beta.weight"].T)       # [T, Hv]
        g = W[b + "ssm_a"] * softplus(a @ W[b + "ssm_alpha.weight"].T + W[b + "ssm_dt.bias"])
        conv_w = W[b + "ssm_conv1d.weight"]                  # [Dc, Kc], column Kc-1 = current
        hist = state.get("conv", np.zeros((self.Kc - 1, x.shape[1])))
        xs = np.concatenate([hist, x])
        u = np.stack([(xs[t:t + self.Kc] * conv_w.T).sum(axis=0) for t in range(T)])
        u = silu(u)
        state["conv"] = xs[-(self.Kc - 1):]
        q = u[:, :Dk].reshape(T, self.Hk, self.dk)
        k = u[:, Dk:2 * Dk].reshape(T, self.Hk, self.dk)
        v = u[:, 2 * Dk:].reshape(T, self.Hv, self.dv)
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) / np.sqrt(self.dk)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
        kmap = np.arange(self.Hv) % self.Hk                  # tiled order: key head n mod Hk
        S = state.get("S", np.zeros((self.Hv, self.dk, self.dv)))
        o = np.empty((T, self.Hv, self.dv))
        for t in range(T):
            kt, qt = k[t, kmap], q[t, kmap]                  # [Hv, dk]
            S = S * np.exp(g[t])[:, None, None]
            e = np.einsum("hkv,hk->hv", S, kt)
            delta = beta[t][:, None] * (v[t] - e)
            S = S + kt[:, :, None] * delta[:, None, :]
            o[t] = np.einsum("hkv,hk->hv", S, qt)
        state["S"] = S
        o = rmsnorm(o, W[b + "ssm_norm.weight"], self.eps) * silu(z)
        return o.reshape(T, -1) @ W[b + "ssm_out.weight"].T

    def ffn(self, b, x):
        W = self.w
        if b + "ffn_gate_inp.weight" not in W:
            return (silu(x @ W[b + "ffn_gate.weight"].T) * (x @ W[b + "ffn_up.weight"].T)) @ W[b + "ffn_down.weight"].T
        logits = x @ W[b + "ffn_gate_inp.weight"].T          # [T, E]
        top = -np.sort(-logits, axis=-1)
        self.router_gaps.append(float((top[:, self.top_k - 1] - top[:, self.top_k]).min()))
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            sel = np.argsort(-p[t], kind="stable")[:self.top_k]
            wsel = p[t, sel] / p[t, sel].sum()
            for e, we in zip(sel, wsel):
                h = silu(W[b + "ffn_gate_exps.weight"][e] @ x[t]) * (W[b + "ffn_up_exps.weight"][e] @ x[t])
                out[t] += we * (W[b + "ffn_down_exps.weight"][e] @ h)
        shared = (silu(x @ W[b + "ffn_gate_shexp.weight"].T) * (x @ W[b + "ffn_up_shexp.weight"].T)) @ W[b + "ffn_down_shexp.weight"].T
        gate = sigmoid(x @ W[b + "ffn_gate_inp_shexp.weight"].reshape(-1))
        return out + gate[:, None] * shared

    def block(self, i, h, positions, state):
        b = f"blk.{i}."
        a = rmsnorm(h, self.w[b + "attn_norm.weight"], self.eps)
        if self.is_recurrent(i):
            h = h + self.gdn(b, a, state)
        else:
            h = h + self.attention(b, a, positions, state)
        return h + self.ffn(b, rmsnorm(h, self.w[b + "post_attention_norm.weight"], self.eps))

    # ---- whole model ----------------------------------------------------------------------
    def forward(self, tokens, positions, states, want_hidden=False):
        h = self.w["token_embd.weight"][tokens]
        hidden = [h]
        for i in range(self.L):
            h = self.block(i, h, positions, states[i])
            hidden.append(h)
        hf = rmsnorm(h, self.w["output_norm.weight"], self.eps)
        hidden[-1] = hf
        out_w = self.w.get("output.weight", self.w["token_embd.weight"])
        return hf @ out_w.T, hf, (np.stack(hidden) if want_hidden else None)

    def mtp(self, hf, next_tokens, positions):
        n = self.L
        b = f"blk.{n}."
        e = self.w["token_embd.weight"][next_tokens]
        x = np.concatenate([rmsnorm(e, self.w[b + "nextn.enorm.weight"], self.eps),
                            rmsnorm(hf, self.w[b + "nextn.hnorm.weight"], self.eps)], axis=-1)
        u = x @ self.w[b + "nextn.eh_proj.weight"].T
        u = self.block(n, u, positions, {})
        m = rmsnorm(u, self.w[b + "nextn.shared_head_norm.weight"], self.eps)
        out_w = self.w.get("output.weight", self.w["token_embd.weight"])
        return m @ out_w.T, m


def run_protocol(model, tokens, prefill, full=True):
    tokens = np.asarray(tokens)
    states = [dict() for _ in range(model.L)]
    logits_p, hf, hidden = model.forward(tokens[:prefill], np.arange(prefill), states, want_hidden=True)
    rows = [logits_p]
    for t in range(prefill, len(tokens)):
        lg, _, _ = model.forward(tokens[t:t + 1], np.array([t]), states)
        rows.append(lg)
    res = {"logits": np.concatenate(rows), "hidden": hidden}
    if full:
        res["prefill_full"] = model.forward(tokens, np.arange(len(tokens)), [dict() for _ in range(model.L)])[0]
    T = prefill - 1
    res["mtp_logits"], res["mtp_hidden"] = model.mtp(hf[:T], tokens[1:T + 1], np.arange(T))
    return res


def rel(a, ref):
    return float(np.abs(a - ref).max() / np.abs(ref).max())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fixture_dir")
    ap.add_argument("--types", default="f32,bf16,q8_0,q4_0")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    args = ap.parse_args(argv)
    with open(os.path.join(args.fixture_dir, "reference.json"), encoding="utf-8") as f:
        ref = json.load(f)
    V, H, L = ref["num_vocab"], ref["hidden_size"], ref["num_layers"]
    load = lambda n, *shape: np.fromfile(os.path.join(args.fixture_dir, n), dtype="<f4").reshape(shape)  # noqa: E731
    worst = 0.0
    for t in args.types.split(","):
        model = Model(os.path.join(args.fixture_dir, f"model-{t}.gguf"))
        res = run_protocol(model, ref["tokens"], ref["prefill_tokens"], full=(t == "f32"))
        sfx = "" if t == "f32" else "_" + t
        checks = {"logits": rel(res["logits"], load(f"logits{sfx}.f32", -1, V)),
                  "mtp_logits": rel(res["mtp_logits"], load(f"mtp_logits{sfx}.f32", -1, V))}
        if t == "f32":
            checks["prefill_full"] = rel(res["prefill_full"], load("prefill_full.f32", -1, V))
            checks["hidden"] = rel(res["hidden"], load("hidden.f32", L + 1, -1, H))
            checks["mtp_hidden"] = rel(res["mtp_hidden"], load("mtp_hidden.f32", -1, H))
        print(f"{os.path.basename(os.path.normpath(args.fixture_dir))} {t}: " +
              ", ".join(f"{k} {v:.2e}" for k, v in checks.items()))
        worst = max(worst, max(checks.values()))
    ok = worst <= args.tolerance
    print(("OK" if ok else "FAIL") + f": worst relative error {worst:.2e} (tolerance {args.tolerance:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
