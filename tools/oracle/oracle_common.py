"""Shared pieces of the HF transformers numerical oracle (needs torch + transformers 5.x).

The two tiny models (model reference 7.2; weights from tiny_weights.py), the 80-token protocol
(64-token prefill with cache + 16 single-token decode steps + one uncached full forward)
and the MTP oracle composed from HF modules (model reference 7.3 / 4.2).
Everything runs on the CPU in float32 with eager attention, deterministic for a fixed seed.
"""

import json

import numpy as np
import torch
from torch import nn

import tiny_weights as tw

PREFILL_TOKENS = 64
DECODE_STEPS = 16
NUM_TOKENS = PREFILL_TOKENS + DECODE_STEPS
MTP_ROWS = PREFILL_TOKENS - 1

SPECS = tw.SPECS


def classes(moe):
    """(config class, causal LM class, decoder layer class, zero-centred RMSNorm class)."""
    import transformers
    if moe:
        from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as m
        return (transformers.Qwen3_5MoeTextConfig, transformers.Qwen3_5MoeForCausalLM,
                m.Qwen3_5MoeDecoderLayer, m.Qwen3_5MoeRMSNorm)
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m
    return (transformers.Qwen3_5TextConfig, transformers.Qwen3_5ForCausalLM,
            m.Qwen3_5DecoderLayer, m.Qwen3_5RMSNorm)


def make_config(name, **override):
    kw = tw.config_kwargs(name)
    kw.update(override)
    cfg = classes(SPECS[name]["moe"])[0](**kw)
    cfg._attn_implementation = "eager"
    return cfg


def config_json(cfg, moe):
    """The text config as written to hf/config.json (private keys dropped)."""
    d = json.loads(cfg.to_json_string(use_diff=False))
    d = {k: v for k, v in d.items() if not k.startswith("_")}
    d["architectures"] = ["Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM"]
    d["mtp_num_hidden_layers"] = 1
    d["dtype"] = "float32"
    return d


class MTP(nn.Module):
    """The MTP head with the checkpoint's parameter names (prefix "mtp.")."""

    def __init__(self, name):
        super().__init__()
        moe = SPECS[name]["moe"]
        _, _, layer_cls, norm_cls = classes(moe)
        cfg = make_config(name, num_hidden_layers=1, layer_types=["full_attention"])
        H, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.pre_fc_norm_embedding = norm_cls(H, eps=eps)
        self.pre_fc_norm_hidden = norm_cls(H, eps=eps)
        self.norm = norm_cls(H, eps=eps)
        self.layers = nn.ModuleList([layer_cls(cfg, 0)])


def build(name):
    """Fresh (model, mtp, config) with the model's default init (to be overwritten)."""
    torch.manual_seed(SPECS[name]["seed"])
    cfg = make_config(name)
    model = classes(SPECS[name]["moe"])[1](cfg).float().eval()
    mtp = MTP(name).float().eval()
    return model, mtp, cfg


def check_names(model, mtp, name):
    """The HF classes must hold exactly the tensors tiny_weights.tensor_shapes lists."""
    have = {k: tuple(v.shape) for k, v in model.state_dict().items() if "rotary_emb" not in k}
    have.update({"mtp." + k: tuple(v.shape) for k, v in mtp.state_dict().items()})
    want = {k: tuple(v) for k, v in tw.tensor_shapes(name).items()}
    if have != want:
        diff = sorted(set(have.items()) ^ set(want.items()))
        raise RuntimeError(f"{name}: HF state_dict differs from tiny_weights: {diff[:8]}")


@torch.no_grad()
def load_state(model, mtp, tensors):
    """Load HF-named numpy tensors into model and mtp (strict: every name must match)."""
    main = {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32))
            for k, v in tensors.items() if not k.startswith("mtp.")}
    head = {k[4:]: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32))
            for k, v in tensors.items() if k.startswith("mtp.")}
    missing, unexpected = model.load_state_dict(main, strict=False)
    missing = [m for m in missing if "rotary_emb" not in m]
    if missing or unexpected:
        raise ValueError(f"trunk state mismatch: missing {missing[:5]} unexpected {unexpected[:5]}")
    mtp.load_state_dict(head, strict=True)


def _rotary(model, x, positions):
    """cos/sin for 1-D text positions (all three M-RoPE components equal)."""
    pos3 = positions.view(1, 1, -1).expand(3, 1, -1)
    return model.model.rotary_emb(x, pos3)


@torch.no_grad()
def run_mtp(model, mtp, final_hidden, ids):
    """MTP oracle over the prefill: row t uses the post-final-norm trunk hidden at position t
    and the embedding of token t+1, causal attention over rows 0..t, RoPE position t.
    Returns (logits [T, V], m = post-mtp.norm output [T, H]) with T = MTP_ROWS."""
    T = MTP_ROWS
    h = final_hidden[:T].unsqueeze(0)
    e = model.model.embed_tokens(ids[1:T + 1].unsqueeze(0))
    u = mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(e), mtp.pre_fc_norm_hidden(h)], dim=-1))
    positions = torch.arange(T)
    cos, sin = _rotary(model, u, positions)
    mask = torch.full((T, T), torch.finfo(torch.float32).min).triu(1).view(1, 1, T, T)
    out = mtp.layers[0](u, position_embeddings=(cos, sin), attention_mask=mask,
                        position_ids=positions.view(1, T))
    if isinstance(out, tuple):
        out = out[0]
    m = mtp.norm(out)
    return model.lm_head(m)[0].float(), m[0].float()


@torch.no_grad()
def _decode_rows(model, ids, past, variant):
    rows = []
    for t in range(PREFILL_TOKENS, NUM_TOKENS):
        kw = {}
        if variant == "explicit_positions":
            kw["position_ids"] = torch.tensor([[t]])
            kw["cache_position"] = torch.tensor([t])
        o = model(input_ids=ids[:, t:t + 1], past_key_values=past, use_cache=True, **kw)
        past = o.past_key_values
        rows.append(o.logits[0].float())
    return torch.cat(rows)


@torch.no_grad()
def run_protocol(model, mtp, tokens, log=print):
    """The fixture protocol. Returns a dict of numpy float32 arrays plus diagnostics."""
    ids = torch.tensor(tokens, dtype=torch.long).view(1, -1)
    full = model(input_ids=ids, use_cache=False).logits[0].float()
    variants = {}
    for variant in ("default", "explicit_positions"):
        out = model(input_ids=ids[:, :PREFILL_TOKENS], use_cache=True, output_hidden_states=True)
        prefill = out.logits[0].float()
        try:
            dec = _decode_rows(model, ids, out.past_key_values, variant)
        except Exception as e:  # noqa: BLE001 - report and try the other calling convention
            log(f"decode variant {variant} failed: {type(e).__name__}: {e}")
            continue
        diff = float((dec - full[PREFILL_TOKENS:]).abs().max())
        variants[variant] = (diff, prefill, dec, out.hidden_states)
        if diff < 1e-4:
            break
    variant = min(variants, key=lambda v: variants[v][0])
    decode_diff, prefill, dec, hidden_states = variants[variant]
    logits = torch.cat([prefill, dec])
    hidden = torch.stack([h[0].float() for h in hidden_states])
    num_layers = model.config.num_hidden_layers
    if hidden.shape[0] != num_layers + 1:
        raise RuntimeError(f"{hidden.shape[0]} hidden states, expected {num_layers + 1}")
    last_normed = float((model.lm_head(hidden[-1]) - prefill).abs().max()) < 1e-4
    if not last_normed:
        hidden[-1] = model.model.norm(hidden[-1])
        if float((model.lm_head(hidden[-1]) - prefill).abs().max()) > 1e-4:
            raise RuntimeError("neither hidden_states[-1] nor norm(hidden_states[-1]) gives the logits")
    mtp_logits, mtp_hidden = run_mtp(model, mtp, hidden[-1], ids[0])
    return {
        "logits": logits.numpy(), "prefill_full": full.numpy(), "hidden": hidden.numpy(),
        "mtp_logits": mtp_logits.numpy(), "mtp_hidden": mtp_hidden.numpy(),
        "decode_variant": variant, "hf_last_hidden_was_final_normed": last_normed,
        "decode_vs_full_max_abs_diff": decode_diff,
        "prefill_vs_full_max_abs_diff": float((prefill - full[:PREFILL_TOKENS]).abs().max()),
    }


@torch.no_grad()
def router_margins(model, mtp, tokens):
    """Smallest gap between the k-th and (k+1)-th router logit over all tokens and MoE
    layers (trunk full forward + MTP rows): how far the fixture is from a top-k tie."""
    k = model.config.num_experts_per_tok
    gaps = []

    def hook(_module, _inp, out):
        logits = out[0] if isinstance(out, tuple) else out
        top = torch.topk(logits.float(), k + 1, dim=-1).values
        gaps.append(float((top[:, k - 1] - top[:, k]).min()))

    handles = [m.register_forward_hook(hook) for n, m in list(model.named_modules()) + list(mtp.named_modules())
               if n.endswith("mlp.gate") and hasattr(m, "top_k")]
    try:
        ids = torch.tensor(tokens, dtype=torch.long).view(1, -1)
        out = model(input_ids=ids, use_cache=False, output_hidden_states=True)
        run_mtp(model, mtp, out.hidden_states[-1][0].float(), ids[0])
    finally:
        for h in handles:
            h.remove()
    return min(gaps) if gaps else None
