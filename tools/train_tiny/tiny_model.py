"""Shared pieces of deltaserve-tiny-moe (needs torch + transformers 5.x): the configuration,
the MTP head (model reference 4.1-4.3, composed from transformers' own Qwen3.5-MoE modules as
in 7.3), the weight init, the batched MTP forward, the tokenizer builder, and loading the
weights back from the committed GGUF (so evaluation and fixtures use exactly what deltaserve
serves).
"""

import copy
import gzip
import json
import math
import os
import sys

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gguf"))
sys.path.insert(0, os.path.join(HERE, "..", "convert"))

MODEL_NAME = "deltaserve-tiny-moe"

# Qwen3.5's pre-tokenizer split (the regex llama.cpp hardcodes for tokenizer.ggml.pre
# "qwen35", written in the tokenizer.json dialect) and the added tokens, in id order at
# the end of the vocabulary as in Qwen's tokenizers.
QWEN35_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]   # special (control)
THINK_TOKENS = ["<think>", "</think>"]                               # added, not special (as Qwen3)
EOT, IM_START, IM_END = SPECIAL_TOKENS

ARCH = dict(
    hidden_size=256, num_hidden_layers=8, full_attention_interval=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=64,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64,
    linear_value_head_dim=64, linear_conv_kernel_dim=4,
    num_experts=16, num_experts_per_tok=2, moe_intermediate_size=64,
    shared_expert_intermediate_size=96,
    rms_norm_eps=1e-6, max_position_embeddings=4096, tie_word_embeddings=False,
    hidden_act="silu", attention_bias=False, attention_dropout=0.0,
    router_aux_loss_coef=0.01, mtp_num_hidden_layers=1,
)
ROPE = {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
        "mrope_section": [3, 3, 2], "mrope_interleaved": True}


# ---- configuration ------------------------------------------------------------------------
def config_kwargs(vocab_size, eot_id, im_end_id, **override):
    kw = dict(ARCH)
    kw.update(vocab_size=vocab_size, rope_parameters=copy.deepcopy(ROPE),
              bos_token_id=eot_id, eos_token_id=im_end_id, pad_token_id=None)
    kw.update(override)
    return kw


def make_config(vocab_size, eot_id, im_end_id, **override):
    import transformers
    cfg = transformers.Qwen3_5MoeTextConfig(**config_kwargs(vocab_size, eot_id, im_end_id, **override))
    cfg._attn_implementation = "eager"   # explicit additive masks everywhere, CPU and GPU alike
    return cfg


def config_json(cfg):
    """The text config as written to config.json (private keys dropped)."""
    d = json.loads(cfg.to_json_string(use_diff=False))
    d = {k: v for k, v in d.items() if not k.startswith("_")}
    d["architectures"] = ["Qwen3_5MoeForCausalLM"]
    d["mtp_num_hidden_layers"] = 1
    d["mtp_use_dedicated_embeddings"] = False
    d["dtype"] = "bfloat16"
    return d


def config_from_json(path):
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    return make_config(d["vocab_size"], d["bos_token_id"], d["eos_token_id"])


# ---- MTP head -----------------------------------------------------------------------------
class MTP(nn.Module):
    """The MTP head with the checkpoint's parameter names (prefix "mtp."): model reference
    4.1. One full-attention Qwen3_5MoeDecoderLayer (MoE FFN like the trunk), three
    zero-centred RMSNorms, fc Linear(2H -> H) over [embedding | hidden]. Embedding and LM
    head are the trunk's."""

    def __init__(self, cfg):
        super().__init__()
        from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as m
        lcfg = make_config(cfg.vocab_size, cfg.bos_token_id, cfg.eos_token_id,
                           num_hidden_layers=1, layer_types=["full_attention"])
        H, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.pre_fc_norm_embedding = m.Qwen3_5MoeRMSNorm(H, eps=eps)
        self.pre_fc_norm_hidden = m.Qwen3_5MoeRMSNorm(H, eps=eps)
        self.norm = m.Qwen3_5MoeRMSNorm(H, eps=eps)
        self.layers = nn.ModuleList([m.Qwen3_5MoeDecoderLayer(lcfg, 0)])
        self.layer_config = lcfg


def build(cfg):
    import transformers
    model = transformers.Qwen3_5MoeForCausalLM(cfg)
    mtp = MTP(cfg)
    return model, mtp


def causal_mask(T, device):
    """Additive float32 mask [1, 1, T, T] (the layer builds none itself)."""
    return torch.full((T, T), torch.finfo(torch.float32).min, device=device).triu(1).view(1, 1, T, T)


def mtp_forward(model, mtp, hidden, next_ids):
    """One MTP pass over T rows of a batch. Row t takes hidden[:, t] (the post-final-norm
    trunk hidden of position t, or the chained post-mtp.norm output) and the embedding of
    next_ids[:, t] (the token at t+1); causal attention over rows 0..t, RoPE position t.
    Returns (logits [B, T, V] for the token at t+2, m [B, T, H] post-mtp.norm)."""
    B, T, _ = hidden.shape
    e = model.model.embed_tokens(next_ids)
    u = mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(e), mtp.pre_fc_norm_hidden(hidden)], dim=-1))
    pos = torch.arange(T, device=u.device)
    cos, sin = model.model.rotary_emb(u, pos.view(1, 1, T).expand(3, B, T))
    out = mtp.layers[0](u, position_embeddings=(cos, sin), attention_mask=causal_mask(T, u.device),
                        position_ids=pos.view(1, T).expand(B, T))
    if isinstance(out, tuple):
        out = out[0]
    m = mtp.norm(out)
    return model.lm_head(m), m


# ---- init ---------------------------------------------------------------------------------
@torch.no_grad()
def init_weights(model, mtp, seed, std=0.02):
    """Explicit, seed-determined init of every parameter (independent of transformers'
    own init): zero-centred norms 0, GDN gated norm 1, A_log = log U(1, 16), dt_bias the
    inverse softplus of a log-uniform step in [1e-3, 1e-1] (Mamba-2 / FLA style, so the
    delta-rule decays start between 0.2 and 0.999 per token), conv taps U(-0.5, 0.5),
    everything else N(0, std), output projections scaled by 1/sqrt(2 * layers)."""
    gen = torch.Generator().manual_seed(seed)
    n_layers = model.config.num_hidden_layers + 1
    for prefix, module in (("", model), ("mtp.", mtp)):
        for name, p in sorted(module.named_parameters()):
            full = prefix + name
            shape = p.shape
            if full.endswith("linear_attn.norm.weight"):
                v = torch.ones(shape)
            elif full.endswith("norm.weight"):
                v = torch.zeros(shape)
            elif full.endswith("A_log"):
                v = torch.log(torch.rand(shape, generator=gen) * 15.0 + 1.0)
            elif full.endswith("dt_bias"):   # softplus(dt_bias) = dt, log-uniform in [1e-3, 1e-1]
                dt = torch.exp(torch.rand(shape, generator=gen) * math.log(100.0) + math.log(1e-3))
                v = dt + torch.log(-torch.expm1(-dt))
            elif full.endswith("conv1d.weight"):
                v = torch.rand(shape, generator=gen) - 0.5
            else:
                s = std
                if full.endswith(("o_proj.weight", "out_proj.weight", "down_proj.weight",
                                  "experts.down_proj")):
                    s = std / math.sqrt(2 * n_layers)
                v = torch.randn(shape, generator=gen) * s
            p.copy_(v.to(p.dtype))


# ---- checkpoint ---------------------------------------------------------------------------
def state_tensors(model, mtp):
    """HF-named tensors, trunk then mtp.*; no rotary buffers."""
    out = {}
    for k, v in model.state_dict().items():
        if "rotary_emb" not in k:
            out[k] = v
    for k, v in mtp.state_dict().items():
        out["mtp." + k] = v
    return out


@torch.no_grad()
def load_tensors(model, mtp, tensors):
    """Load HF-named float32 numpy tensors into model and mtp (strict). A tensor whose
    GGUF form dropped a unit dimension (shared_expert_gate [1, H] is {H}) is reshaped to
    the parameter's shape when the element counts agree."""
    shapes = {k: tuple(v.shape) for k, v in state_tensors(model, mtp).items()}

    def as_torch(k, v):
        v = np.ascontiguousarray(v, dtype=np.float32)
        if k in shapes and v.shape != shapes[k] and v.size == int(np.prod(shapes[k])):
            v = v.reshape(shapes[k])
        return torch.from_numpy(v)
    main = {k: as_torch(k, v) for k, v in tensors.items() if not k.startswith("mtp.")}
    head = {k[4:]: as_torch(k, v) for k, v in tensors.items() if k.startswith("mtp.")}
    missing, unexpected = model.load_state_dict(main, strict=False)
    missing = [m for m in missing if "rotary_emb" not in m]
    if missing or unexpected:
        raise ValueError(f"trunk state mismatch: missing {missing[:5]} unexpected {unexpected[:5]}")
    mtp.load_state_dict(head, strict=True)


def gguf_hf_tensors(gguf_path, hf_config_path):
    """Every tensor of the GGUF decoded to float32 and mapped back to HF names and layout
    (the converter's inverse: -1 on the norms, log(-ssm_a), V-head order, expert fusion)."""
    import hf_to_gguf as conv
    from gguf_constants import GGMLType
    from gguf_reader import GGUFReader
    r = GGUFReader(gguf_path)
    decoded = {}
    for name, t in r.tensors.items():
        if t.ggml_type in (GGMLType.F32, GGMLType.F16, GGMLType.BF16):
            decoded[name] = np.asarray(r.array(name), dtype=np.float32).reshape(t.shape)
        else:
            decoded[name] = conv.decode_tensor(t.ggml_type, r.array(name), t.shape)
    with open(hf_config_path, encoding="utf-8") as f:
        hp = json.load(f)
    return conv.gguf_to_hf_tensors(decoded, conv.Dims(hp), True), r


def set_experts_impl(modules, impl):
    """Point the experts modules' configs at `impl` (eager, grouped_mm, batched_mm)."""
    configs = [module.config if hasattr(module, "config") else module.layer_config
               for module in modules]
    for module in modules:
        for sub in module.modules():
            if type(sub).__name__.endswith("Experts") and getattr(sub, "config", None) is not None:
                configs.append(sub.config)
    seen = {}
    for cfg in configs:
        if id(cfg) not in seen:
            seen[id(cfg)] = cfg
            cfg._experts_implementation = impl
    return len(seen)


def load_from_gguf(gguf_path, hf_dir, device="cpu"):
    """(model, mtp, cfg, reader) in float32 eval mode with the GGUF's weights, eager
    attention and the eager (per-expert loop) MoE: the plainest reference."""
    cfg = config_from_json(os.path.join(hf_dir, "config.json"))
    tensors, reader = gguf_hf_tensors(gguf_path, os.path.join(hf_dir, "config.json"))
    check_gguf_metadata(reader, cfg)
    model, mtp = build(cfg)
    load_tensors(model, mtp, tensors)
    set_experts_impl([model, mtp], "eager")
    return model.float().eval().to(device), mtp.float().eval().to(device), cfg, reader


def check_gguf_metadata(reader, cfg):
    kv = reader.kv
    want = {"general.architecture": "qwen35moe",
            "qwen35moe.block_count": cfg.num_hidden_layers + 1,
            "qwen35moe.nextn_predict_layers": 1,
            "qwen35moe.embedding_length": cfg.hidden_size,
            "qwen35moe.expert_count": cfg.num_experts,
            "qwen35moe.expert_used_count": cfg.num_experts_per_tok}
    for k, v in want.items():
        if kv.get(k) != v:
            raise ValueError(f"GGUF {k} = {kv.get(k)!r}, config says {v!r}")
    if len(kv["tokenizer.ggml.tokens"]) != cfg.vocab_size:
        raise ValueError("GGUF vocabulary size differs from the config")


# ---- tokenizer ----------------------------------------------------------------------------
def read_docs(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def train_tokenizer(texts, vocab_size):
    """Byte-level BPE in Qwen's layout: NFC, Qwen3.5 split regex, ByteLevel; 256 byte
    tokens + merges, then the added tokens at the end (ids V-5 .. V-1)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    n_added = len(SPECIAL_TOKENS) + len(THINK_TOKENS)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - n_added, min_frequency=2,
                                  show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    return tok


def tokenizer_config(tok, chat_template):
    added = {}
    for t in SPECIAL_TOKENS + THINK_TOKENS:
        added[str(tok.token_to_id(t))] = {
            "content": t, "lstrip": False, "rstrip": False, "normalized": False,
            "single_word": False, "special": t in SPECIAL_TOKENS}
    return {
        "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added,
        "additional_special_tokens": [IM_START, IM_END], "bos_token": None,
        "chat_template": chat_template, "clean_up_tokenization_spaces": False,
        "eos_token": IM_END, "errors": "replace", "model_max_length": ARCH["max_position_embeddings"],
        "pad_token": EOT, "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
