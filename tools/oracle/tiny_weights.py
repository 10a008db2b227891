"""The two tiny Qwen3.5 test models: configuration and random weights (numpy only).

Shared by make_fixtures.py (on the torch machine, where the HF model's own state_dict
must list exactly these names and shapes) and search_seed.py (here, numpy only).
Every tensor is drawn from its own generator seeded by (model seed, crc32(name)), so the
weights do not depend on iteration order.

Model reference 7.2 values: vocab 97, hidden 64, heads 4/2, head_dim 64, partial rotary 0.25
with mrope_section [3,3,2], GDN heads 2/4 of dim 16, conv 4; dense FFN 96 (4 layers);
MoE 8 experts top-2, expert 32, shared 48 (8 layers, so two attention layers exist).
Randomisation (model reference 7.2 caveats): zero-centred norms N(0, 0.2); the GDN gated
norm 1 + N(0, 0.1); A_log = log U(1, 8); dt_bias N(0, 0.5); conv taps N(0, 0.5); embeddings
N(0, 1); every other matrix N(0, gain/sqrt(fan_in)) so activations stay O(1); lm_head
N(0, 2/sqrt(H)) so logits are ~N(0, 2); router N(0, 2/sqrt(H)).
"""

import math
import zlib

import numpy as np

COMMON = dict(
    vocab_size=97, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
    linear_value_head_dim=16, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
    max_position_embeddings=512, tie_word_embeddings=False, hidden_act="silu",
    mtp_num_hidden_layers=1,
)
ROPE = {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
        "mrope_section": [3, 3, 2], "mrope_interleaved": True}
# seed: weights; token_seed: the 80-token sequence; out_gain: std multiplier of the matrices
# that write into the residual stream (o_proj, out_proj, down projections); 0.5 keeps the
# random models less chaotic. The MoE seed was picked by search_seed.py (seeds 3000-3029):
# smallest router top-k gap 1.4e-3 over all tokens, layers and the f32/bf16/q8_0/q4_0 weights.
SPECS = {
    "tiny_dense": dict(moe=False, seed=1001, token_seed=1100, out_gain=0.5,
                       num_hidden_layers=4, intermediate_size=96),
    "tiny_moe": dict(moe=True, seed=3026, token_seed=2101, out_gain=0.5,
                     num_hidden_layers=8, num_experts=8, num_experts_per_tok=2,
                     moe_intermediate_size=32, shared_expert_intermediate_size=48),
}
NUM_TOKENS = 80
RESIDUAL_WRITERS = ("o_proj.weight", "out_proj.weight", "down_proj.weight", "experts.down_proj")


def config_kwargs(name):
    spec = SPECS[name]
    kw = dict(COMMON)
    kw.update({k: v for k, v in spec.items() if k not in ("moe", "seed", "token_seed", "out_gain")})
    kw["rope_parameters"] = dict(ROPE, mrope_section=list(ROPE["mrope_section"]))
    return kw


def tensor_shapes(name):
    """HF name -> shape of every checkpoint tensor (trunk, then mtp.*), from the model
    reference (sections 2.3-2.6, 4.1)."""
    c = config_kwargs(name)
    H, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    Hk, Hv, dk, dv = (c["linear_num_key_heads"], c["linear_num_value_heads"],
                      c["linear_key_head_dim"], c["linear_value_head_dim"])
    Dc, Dv = 2 * Hk * dk + Hv * dv, Hv * dv
    out = {"model.embed_tokens.weight": (V, H)}

    def attn(p):
        out.update({p + "self_attn.q_proj.weight": (2 * nh * hd, H), p + "self_attn.k_proj.weight": (nkv * hd, H),
                    p + "self_attn.v_proj.weight": (nkv * hd, H), p + "self_attn.o_proj.weight": (H, nh * hd),
                    p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})

    def ffn(p):
        if SPECS[name]["moe"]:
            E, Ie, Is = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
            out.update({p + "mlp.gate.weight": (E, H), p + "mlp.experts.gate_up_proj": (E, 2 * Ie, H),
                        p + "mlp.experts.down_proj": (E, H, Ie),
                        p + "mlp.shared_expert.gate_proj.weight": (Is, H),
                        p + "mlp.shared_expert.up_proj.weight": (Is, H),
                        p + "mlp.shared_expert.down_proj.weight": (H, Is),
                        p + "mlp.shared_expert_gate.weight": (1, H)})
        else:
            I = c["intermediate_size"]
            out.update({p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
                        p + "mlp.down_proj.weight": (H, I)})

    for i in range(L):
        p = f"model.layers.{i}."
        if (i + 1) % 4 == 0:
            attn(p)
        else:
            out.update({p + "linear_attn.in_proj_qkv.weight": (Dc, H), p + "linear_attn.in_proj_z.weight": (Dv, H),
                        p + "linear_attn.in_proj_b.weight": (Hv, H), p + "linear_attn.in_proj_a.weight": (Hv, H),
                        p + "linear_attn.conv1d.weight": (Dc, 1, c["linear_conv_kernel_dim"]),
                        p + "linear_attn.dt_bias": (Hv,), p + "linear_attn.A_log": (Hv,),
                        p + "linear_attn.norm.weight": (dv,), p + "linear_attn.out_proj.weight": (H, Dv)})
        ffn(p)
        out[p + "input_layernorm.weight"] = (H,)
        out[p + "post_attention_layernorm.weight"] = (H,)
    out["model.norm.weight"] = (H,)
    out["lm_head.weight"] = (V, H)
    out.update({"mtp.fc.weight": (H, 2 * H), "mtp.pre_fc_norm_embedding.weight": (H,),
                "mtp.pre_fc_norm_hidden.weight": (H,), "mtp.norm.weight": (H,)})
    attn("mtp.layers.0.")
    ffn("mtp.layers.0.")
    out["mtp.layers.0.input_layernorm.weight"] = (H,)
    out["mtp.layers.0.post_attention_layernorm.weight"] = (H,)
    return out


def init_tensor(name, shape, seed, hidden, out_gain=1.0):
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])

    def normal(std, mean=0.0):
        return (rng.standard_normal(shape) * std + mean).astype(np.float32)
    module = name.split(".")[-2]
    if name.endswith("linear_attn.norm.weight"):
        return normal(0.1, 1.0)
    if name.endswith(".weight") and "norm" in module:
        return normal(0.2)
    if name.endswith("A_log"):
        return np.log(rng.uniform(1.0, 8.0, shape)).astype(np.float32)
    if name.endswith("dt_bias"):
        return normal(0.5)
    if name.endswith("conv1d.weight"):
        return normal(0.5)
    if name.endswith("embed_tokens.weight"):
        return normal(1.0)
    if name == "lm_head.weight":
        return normal(2.0 / math.sqrt(hidden))
    if name.endswith("mlp.gate.weight"):
        return normal(2.0 / math.sqrt(shape[-1]))
    if len(shape) >= 2:
        gain = out_gain if name.endswith(RESIDUAL_WRITERS) else 1.0
        return normal(gain / math.sqrt(shape[-1]))
    raise ValueError(f"no init rule for {name} {tuple(shape)}")


def make_weights(name, seed=None, out_gain=None):
    spec = SPECS[name]
    seed = spec["seed"] if seed is None else seed
    out_gain = spec["out_gain"] if out_gain is None else out_gain
    H = COMMON["hidden_size"]
    return {n: init_tensor(n, s, seed, H, out_gain) for n, s in tensor_shapes(name).items()}


def make_tokens(name, token_seed=None):
    token_seed = SPECS[name]["token_seed"] if token_seed is None else token_seed
    rng = np.random.default_rng(token_seed)
    return [int(t) for t in rng.integers(0, COMMON["vocab_size"], NUM_TOKENS)]
