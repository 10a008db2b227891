#!/usr/bin/env python3
"""Convert a Qwen3.5 / Qwen3.6 HF checkpoint (dense or MoE, with MTP) to GGUF, numpy only.

Follows llama.cpp's convert_hf_to_gguf.py for the architectures `qwen35` (dense) and
`qwen35moe` (classes Qwen3_5TextModel / Qwen3_5MoeTextModel): same metadata keys, tensor
names, tensor types and transforms (see the model reference, sections 5.2-5.5):
  * +1 folded into every zero-centred RMSNorm weight (all `*norm.weight` except the GDN
    gated norm `linear_attn.norm.weight`), MTP norms included;
  * ssm_a = -exp(A_log); dt_bias -> ssm_dt.bias; conv1d [Dc,1,K] squeezed to [Dc,K];
  * GDN value heads reordered from grouped-by-key-head to tiled order (only when Hv != Hk):
    V rows of in_proj_qkv, rows of in_proj_z / in_proj_a / in_proj_b, A_log, dt_bias, the V
    channels of conv1d, and the input columns of out_proj;
  * fused experts gate_up_proj [E,2I,H] split into ffn_gate_exps / ffn_up_exps (per-expert
    legacy tensors are stacked);
  * mtp.* -> blk.L.* / blk.L.nextn.*; block_count = L + mtp_num_hidden_layers.
Types: 1-D tensors, *_norm.weight, ffn_gate_inp, ffn_gate_inp_shexp, ssm_conv1d and names not
ending in ".weight" are F32; everything else takes --outtype. Quantized types (q8_0, q4_0)
need ne[0] % 32 == 0; other tensors fall back to F16, as llama.cpp's converter does.

Usage:
    hf_to_gguf.py MODEL_DIR --outfile model.gguf --outtype {f32,f16,bf16,q8_0,q4_0}
                  [--name NAME] [--no-mtp] [--verbose]
MODEL_DIR holds config.json (text config or the multimodal wrapper with text_config),
model.safetensors or shards + model.safetensors.index.json, and optionally tokenizer.json /
tokenizer_config.json / chat_template.jinja.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "gguf"))

import safetensors_np  # noqa: E402
from gguf_constants import FileType, GGML_QUANT_VERSION, GGMLType  # noqa: E402
from gguf_writer import GGUFWriter  # noqa: E402
from tensor_encoding import (  # noqa: E402,F401 (re-exported for the oracle scripts and tests)
    QUANT_BLOCK, ConvertError, _quants, bf16_to_fp32, decode_tensor, dequantize_rows, fp32_to_bf16, quantize_rows)
from tokenizer_metadata import write_tokenizer  # noqa: E402

OUTTYPES = {
    "f32": (GGMLType.F32, FileType.ALL_F32),
    "f16": (GGMLType.F16, FileType.MOSTLY_F16),
    "bf16": (GGMLType.BF16, FileType.MOSTLY_BF16),
    "q8_0": (GGMLType.Q8_0, FileType.MOSTLY_Q8_0),
    "q4_0": (GGMLType.Q4_0, FileType.MOSTLY_Q4_0),
}

ARCH_BY_HF_CLASS = {
    "Qwen3_5ForCausalLM": "qwen35", "Qwen3_5ForConditionalGeneration": "qwen35",
    "Qwen3_5MoeForCausalLM": "qwen35moe", "Qwen3_5MoeForConditionalGeneration": "qwen35moe",
}
ARCH_BY_MODEL_TYPE = {
    "qwen3_5": "qwen35", "qwen3_5_text": "qwen35",
    "qwen3_5_moe": "qwen35moe", "qwen3_5_moe_text": "qwen35moe",
}

# HF suffix inside model.layers.{i}. -> GGUF suffix inside blk.{i}.
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
    "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_b.weight": "ssm_beta.weight",
    "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
    "linear_attn.conv1d.weight": "ssm_conv1d.weight",
    "linear_attn.dt_bias": "ssm_dt.bias",
    "linear_attn.A_log": "ssm_a",
    "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.experts.down_proj": "ffn_down_exps.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
}
MTP_NAMES = {
    "mtp.fc.weight": "nextn.eh_proj.weight",
    "mtp.pre_fc_norm_embedding.weight": "nextn.enorm.weight",
    "mtp.pre_fc_norm_hidden.weight": "nextn.hnorm.weight",
    "mtp.norm.weight": "nextn.shared_head_norm.weight",
}
GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
F32_SUFFIXES = ("ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight", "ssm_conv1d.weight")


# ---- configuration ------------------------------------------------------------------------
def load_hparams(model_dir):
    """config.json with text_config (if any) merged into the root, like llama.cpp does."""
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise ConvertError(f"cannot read {path}: {e}") from e
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    return cfg


def detect_arch(hp):
    for cls in hp.get("architectures") or []:
        if cls in ARCH_BY_HF_CLASS:
            return ARCH_BY_HF_CLASS[cls]
    if hp.get("model_type") in ARCH_BY_MODEL_TYPE:
        return ARCH_BY_MODEL_TYPE[hp["model_type"]]
    raise ConvertError(f"not a Qwen3.5 checkpoint: architectures={hp.get('architectures')} "
                       f"model_type={hp.get('model_type')}")


class Dims:
    """The shape numbers the transforms need, validated once."""

    def __init__(self, hp, use_mtp=True):
        def need(key):
            if key not in hp or hp[key] is None:
                raise ConvertError(f"config.json lacks {key}")
            return int(hp[key])
        self.H = need("hidden_size")
        self.L = need("num_hidden_layers")
        self.V = need("vocab_size")
        self.Hk = need("linear_num_key_heads")
        self.Hv = need("linear_num_value_heads")
        self.dk = need("linear_key_head_dim")
        self.dv = need("linear_value_head_dim")
        if self.Hv % self.Hk != 0:
            raise ConvertError(f"linear_num_value_heads {self.Hv} is not a multiple of "
                               f"linear_num_key_heads {self.Hk}")
        self.r = self.Hv // self.Hk
        self.num_mtp = int(hp.get("mtp_num_hidden_layers") or 0) if use_mtp else 0
        self.num_experts = int(hp.get("num_experts") or 0)


# ---- transforms ---------------------------------------------------------------------------
def v_heads_to_tiled(arr, axis, num_k_heads, num_v_per_k, head_dim):
    """Grouped order (old index j = k*r + p) -> tiled order (new index n = p*Hk + k),
    applied to blocks of `head_dim` along `axis` (llama.cpp _reorder_v_heads)."""
    shape = list(arr.shape)
    a = arr.reshape(shape[:axis] + [num_k_heads, num_v_per_k, head_dim] + shape[axis + 1:])
    return np.ascontiguousarray(np.swapaxes(a, axis, axis + 1)).reshape(shape)


def v_heads_to_grouped(arr, axis, num_k_heads, num_v_per_k, head_dim):
    """Inverse of v_heads_to_tiled."""
    shape = list(arr.shape)
    a = arr.reshape(shape[:axis] + [num_v_per_k, num_k_heads, head_dim] + shape[axis + 1:])
    return np.ascontiguousarray(np.swapaxes(a, axis, axis + 1)).reshape(shape)


def _gdn_reorder(suffix, arr, d, inverse=False):
    """V-head permutation of one GDN tensor (HF layout in, HF-shaped array out)."""
    if d.Hk == d.Hv:
        return arr
    f = v_heads_to_grouped if inverse else v_heads_to_tiled
    qk = 2 * d.Hk * d.dk
    if suffix in ("linear_attn.in_proj_qkv.weight", "linear_attn.conv1d.weight"):
        return np.concatenate([arr[:qk], f(arr[qk:], 0, d.Hk, d.r, d.dv)], axis=0)
    if suffix == "linear_attn.in_proj_z.weight":
        return f(arr, 0, d.Hk, d.r, d.dv)
    if suffix in ("linear_attn.in_proj_a.weight", "linear_attn.in_proj_b.weight",
                  "linear_attn.A_log", "linear_attn.dt_bias"):
        return f(arr, 0, d.Hk, d.r, 1)
    if suffix == "linear_attn.out_proj.weight":
        return f(arr, 1, d.Hk, d.r, d.dv)
    return arr


def normalize_hf_name(name):
    """Strip the multimodal wrapper prefix; None for tensors that are not converted."""
    if name.endswith(".rotary_emb.inv_freq"):
        return None
    for prefix in ("model.language_model.", "language_model.model."):
        if name.startswith(prefix):
            return "model." + name[len(prefix):]
    if name.startswith("language_model.lm_head."):
        return name[len("language_model."):]
    if name.startswith(("model.visual.", "visual.", "model.vision_tower.")):
        return None
    return name


def split_layer_name(name, d):
    """(block index, suffix inside the block) for trunk and MTP layer tensors, else None."""
    for prefix, base in (("model.layers.", 0), ("mtp.layers.", d.L)):
        if name.startswith(prefix):
            idx, _, suffix = name[len(prefix):].partition(".")
            if not idx.isdigit():
                return None
            return base + int(idx), suffix
    return None


def hf_to_gguf_tensors(name, arr, d, expert_buffer):
    """Map one HF tensor (already float32) to a list of (gguf name, float32 array)."""
    if name in GLOBAL_NAMES:
        out = [(GLOBAL_NAMES[name], arr)]
    elif name in MTP_NAMES:
        out = [(f"blk.{d.L}.{MTP_NAMES[name]}", arr)]
    else:
        split = split_layer_name(name, d)
        if split is None:
            raise ConvertError(f"unexpected tensor {name}")
        bid, suffix = split
        out = _layer_tensor(bid, suffix, arr, d, expert_buffer)
    result = []
    for gname, a in out:
        if gname.endswith("norm.weight") and not gname.endswith("ssm_norm.weight"):
            a = a + np.float32(1.0)       # zero-centred RMSNorm: store 1 + w
        result.append((gname, np.ascontiguousarray(a, dtype=np.float32)))
    return result


def hf_to_gguf_name(name, d):
    """GGUF name of an HF tensor (for the fused gate_up_proj: the gate half)."""
    if name in GLOBAL_NAMES:
        return GLOBAL_NAMES[name]
    if name in MTP_NAMES:
        return f"blk.{d.L}.{MTP_NAMES[name]}"
    split = split_layer_name(name, d)
    if split is None:
        raise ConvertError(f"unexpected tensor {name}")
    bid, suffix = split
    if suffix == "mlp.experts.gate_up_proj":
        return f"blk.{bid}.ffn_gate_exps.weight"
    if suffix not in LAYER_NAMES:
        raise ConvertError(f"unexpected tensor {name}")
    return f"blk.{bid}.{LAYER_NAMES[suffix]}"


def _layer_tensor(bid, suffix, arr, d, expert_buffer):
    blk = f"blk.{bid}."
    if suffix.startswith("linear_attn."):
        if suffix == "linear_attn.conv1d.weight":
            arr = arr.reshape(arr.shape[0], arr.shape[-1])   # [Dc, 1, K] -> [Dc, K]
        arr = _gdn_reorder(suffix, arr, d)
        if suffix == "linear_attn.A_log":
            arr = -np.exp(arr)
    if suffix == "mlp.experts.gate_up_proj":
        if arr.ndim != 3 or arr.shape[1] % 2:
            raise ConvertError(f"unexpected gate_up_proj shape {arr.shape} in block {bid}")
        half = arr.shape[1] // 2
        return [(blk + "ffn_gate_exps.weight", arr[:, :half, :]),
                (blk + "ffn_up_exps.weight", arr[:, half:, :])]
    if suffix.startswith("mlp.experts.") and suffix.count(".") == 4:
        return _stack_legacy_expert(bid, suffix, arr, d, expert_buffer)
    if suffix not in LAYER_NAMES:
        raise ConvertError(f"unexpected tensor model.layers.{bid}.{suffix}")
    return [(blk + LAYER_NAMES[suffix], arr)]


def _stack_legacy_expert(bid, suffix, arr, d, expert_buffer):
    """mlp.experts.{e}.{gate,up,down}_proj.weight: emit stacked tensors once all arrived."""
    _, _, eid, proj, _ = suffix.split(".")
    if not eid.isdigit() or proj not in ("gate_proj", "up_proj", "down_proj") or d.num_experts <= 0:
        raise ConvertError(f"unexpected expert tensor {suffix} in block {bid}")
    buf = expert_buffer.setdefault(bid, {})
    buf[(proj, int(eid))] = arr
    if len(buf) < 3 * d.num_experts:
        return []
    out = []
    for proj_name, gname in (("down_proj", "ffn_down_exps"), ("gate_proj", "ffn_gate_exps"),
                             ("up_proj", "ffn_up_exps")):
        try:
            stacked = np.stack([buf[(proj_name, e)] for e in range(d.num_experts)])
        except KeyError as e:
            raise ConvertError(f"block {bid}: expert tensor {e} missing") from e
        out.append((f"blk.{bid}.{gname}.weight", stacked))
    del expert_buffer[bid]
    return out


# ---- types and encoding -------------------------------------------------------------------
def choose_type(gname, arr, outtype):
    """ggml type llama.cpp's converter gives this tensor (before the F16 fallback)."""
    if arr.ndim <= 1 or gname.endswith("_norm.weight"):
        return GGMLType.F32
    if gname.endswith(F32_SUFFIXES) or not gname.endswith(".weight"):
        return GGMLType.F32
    return OUTTYPES[outtype][0]


def encode_tensor(gname, arr, outtype, log=None):
    """(ggml type, data array for GGUFWriter.add_tensor, ne) of one converted tensor."""
    gtype = choose_type(gname, arr, outtype)
    ne = tuple(reversed(arr.shape))
    if gtype in (GGMLType.Q8_0, GGMLType.Q4_0) and arr.shape[-1] % QUANT_BLOCK != 0:
        if log:
            log(f"{gname}: ne[0]={arr.shape[-1]} is not a multiple of {QUANT_BLOCK}, falling back to F16")
        gtype = GGMLType.F16
    if gtype == GGMLType.F32:
        return gtype, arr.astype(np.float32), ne
    if gtype == GGMLType.F16:
        return gtype, arr.astype(np.float16), ne
    if gtype == GGMLType.BF16:
        return gtype, fp32_to_bf16(arr), ne
    return gtype, quantize_rows(arr, gtype), ne


# ---- inverse mapping (GGUF -> HF layout), used by the quantized-reference oracle -----------
def gguf_to_hf_tensors(gguf_arrays, d, moe):
    """Map float32 GGUF arrays (numpy order, transforms applied) back to HF names and layout.

    Only tensors that are not stored F32 need this (norms, ssm_a, conv taps are F32 and
    should be taken from the HF checkpoint directly); +1 and -exp are still inverted here for
    completeness. Returns dict HF name -> float32 array.
    """
    inv_layer = {v: k for k, v in LAYER_NAMES.items()}
    inv_global = {v: k for k, v in GLOBAL_NAMES.items()}
    inv_mtp = {v: k for k, v in MTP_NAMES.items()}
    out, gate_up = {}, {}
    for gname, arr in gguf_arrays.items():
        if gname.endswith("norm.weight") and not gname.endswith("ssm_norm.weight"):
            arr = arr - np.float32(1.0)
        if gname in inv_global:
            out[inv_global[gname]] = arr
            continue
        if not gname.startswith("blk."):
            raise ConvertError(f"unexpected GGUF tensor {gname}")
        bid_s, _, suffix = gname[4:].partition(".")
        bid = int(bid_s)
        prefix = f"model.layers.{bid}." if bid < d.L else f"mtp.layers.{bid - d.L}."
        if suffix.startswith("nextn."):
            out[inv_mtp[suffix]] = arr
            continue
        if suffix in ("ffn_gate_exps.weight", "ffn_up_exps.weight"):
            gate_up.setdefault(prefix, {})[suffix] = arr
            continue
        if suffix not in inv_layer:
            raise ConvertError(f"unexpected GGUF tensor {gname}")
        hf_suffix = inv_layer[suffix]
        if hf_suffix == "linear_attn.A_log":
            arr = np.log(-arr)
        arr = _gdn_reorder(hf_suffix, arr, d, inverse=True)
        if hf_suffix == "linear_attn.conv1d.weight":
            arr = arr.reshape(arr.shape[0], 1, arr.shape[1])
        out[prefix + hf_suffix] = arr
    for prefix, parts in gate_up.items():
        if len(parts) != 2:
            raise ConvertError(f"{prefix}: need both ffn_gate_exps and ffn_up_exps")
        out[prefix + "mlp.experts.gate_up_proj"] = np.concatenate(
            [parts["ffn_gate_exps.weight"], parts["ffn_up_exps.weight"]], axis=1)
    return out


# ---- metadata -----------------------------------------------------------------------------
def write_model_metadata(w, hp, arch, d, file_type, name):
    """Keys in the order llama.cpp writes them (general, TextModel, Qwen2Moe, Qwen3Next,
    MRoPE, MTP mixins)."""
    w.add_string("general.architecture", arch)
    w.add_string("general.type", "model")
    w.add_string("general.name", name)
    w.add_uint32(f"{arch}.block_count", d.L + d.num_mtp)
    for key, gkey in (("max_position_embeddings", "context_length"),
                      ("hidden_size", "embedding_length"),
                      ("intermediate_size", "feed_forward_length"),
                      ("num_attention_heads", "attention.head_count"),
                      ("num_key_value_heads", "attention.head_count_kv")):
        if hp.get(key) is not None:
            w.add_uint32(f"{arch}.{gkey}", int(hp[key]))
    rope = dict(hp.get("rope_parameters") or hp.get("rope_scaling") or {})
    if "rope_theta" not in rope and hp.get("rope_theta") is not None:
        rope["rope_theta"] = hp["rope_theta"]
    if "mrope_section" in rope:
        sections = [int(x) for x in rope["mrope_section"]][:4]
        w.add_array(f"{arch}.rope.dimension_sections", sections + [0] * (4 - len(sections)))
    if rope.get("rope_theta") is not None:
        w.add_float32(f"{arch}.rope.freq_base", float(rope["rope_theta"]))
    if hp.get("rms_norm_eps") is not None:
        w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", float(hp["rms_norm_eps"]))
    if hp.get("num_experts") is not None:
        w.add_uint32(f"{arch}.expert_count", int(hp["num_experts"]))
    if hp.get("num_experts_per_tok") is not None:
        w.add_uint32(f"{arch}.expert_used_count", int(hp["num_experts_per_tok"]))
    if hp.get("head_dim") is not None:
        w.add_uint32(f"{arch}.attention.key_length", int(hp["head_dim"]))
        w.add_uint32(f"{arch}.attention.value_length", int(hp["head_dim"]))
    w.add_uint32("general.file_type", file_type)
    if hp.get("moe_intermediate_size") is not None:
        w.add_uint32(f"{arch}.expert_feed_forward_length", int(hp["moe_intermediate_size"]))
    if hp.get("shared_expert_intermediate_size") is not None:
        w.add_uint32(f"{arch}.expert_shared_feed_forward_length",
                     int(hp["shared_expert_intermediate_size"]))
    w.add_uint32(f"{arch}.ssm.conv_kernel", int(hp["linear_conv_kernel_dim"]))
    w.add_uint32(f"{arch}.ssm.state_size", d.dk)
    w.add_uint32(f"{arch}.ssm.group_count", d.Hk)
    w.add_uint32(f"{arch}.ssm.time_step_rank", d.Hv)
    w.add_uint32(f"{arch}.ssm.inner_size", d.dv * d.Hv)
    w.add_uint32(f"{arch}.full_attention_interval", int(hp.get("full_attention_interval", 4)))
    head_dim = hp.get("head_dim") or d.H // int(hp["num_attention_heads"])
    partial = hp.get("partial_rotary_factor", rope.get("partial_rotary_factor", 0.25))
    w.add_uint32(f"{arch}.rope.dimension_count", int(int(head_dim) * float(partial)))
    if "mrope_section" not in rope:
        w.add_array(f"{arch}.rope.dimension_sections", [11, 11, 10, 0])
    if d.num_mtp > 0:
        w.add_uint32(f"{arch}.nextn_predict_layers", d.num_mtp)
    w.add_uint32("general.quantization_version", GGML_QUANT_VERSION)


def check_layer_types(hp, d):
    """The GGUF carries only full_attention_interval; refuse a layer_types list it cannot
    express."""
    interval = int(hp.get("full_attention_interval", 4))
    types = hp.get("layer_types")
    if types is None:
        return
    if len(types) != d.L:
        raise ConvertError(f"layer_types has {len(types)} entries, num_hidden_layers is {d.L}")
    for i, t in enumerate(types):
        want = "full_attention" if (i + 1) % interval == 0 else "linear_attention"
        if t != want:
            raise ConvertError(f"layer_types[{i}]={t} does not follow full_attention_interval={interval}")


# ---- driver -------------------------------------------------------------------------------
def iter_gguf_tensors(model_dir, d):
    """Yield (gguf name, float32 array, hf name) in checkpoint order."""
    files, _ = safetensors_np.model_files(model_dir)
    expert_buffer = {}
    seen_mtp = False
    for path in files:
        for raw_name, arr in safetensors_np.load_file(path).items():
            name = normalize_hf_name(raw_name)
            if name is None:
                continue
            if name.startswith("mtp."):
                seen_mtp = True
                if d.num_mtp == 0:
                    continue
            for gname, a in hf_to_gguf_tensors(name, arr.astype(np.float32, copy=False), d, expert_buffer):
                yield gname, a, name
    if expert_buffer:
        raise ConvertError(f"incomplete per-expert tensors in blocks {sorted(expert_buffer)}")
    if d.num_mtp > 0 and not seen_mtp:
        raise ConvertError("config says mtp_num_hidden_layers > 0 but the checkpoint has no "
                           "mtp.* tensors (use --no-mtp)")


def convert(model_dir, outfile, outtype, name=None, use_mtp=True, log=print, verbose=False):
    """Convert; returns a dict of ggml type names -> tensor counts."""
    if outtype not in OUTTYPES:
        raise ConvertError(f"unknown outtype {outtype}; choose from {sorted(OUTTYPES)}")
    hp = load_hparams(model_dir)
    arch = detect_arch(hp)
    d = Dims(hp, use_mtp)
    check_layer_types(hp, d)
    w = GGUFWriter()
    name = name or os.path.basename(os.path.normpath(model_dir))
    write_model_metadata(w, hp, arch, d, OUTTYPES[outtype][1], name)
    write_tokenizer(w, model_dir, hp, d.V, log)
    counts = {}
    for gname, arr, hf_name in iter_gguf_tensors(model_dir, d):
        gtype, data, ne = encode_tensor(gname, arr, outtype, log)
        w.add_tensor(gname, data, gtype, ne)
        tname = {GGMLType.F32: "F32", GGMLType.F16: "F16", GGMLType.BF16: "BF16",
                 GGMLType.Q8_0: "Q8_0", GGMLType.Q4_0: "Q4_0"}[gtype]
        counts[tname] = counts.get(tname, 0) + 1
        if verbose:
            log(f"{hf_name:60s} -> {gname:40s} {tname:5s} ne={ne}")
    w.write(outfile)
    return counts


def main(argv=None):
    ap = argparse.ArgumentParser(description="Qwen3.5/3.6 HF checkpoint -> GGUF (llama.cpp layout)")
    ap.add_argument("model_dir")
    ap.add_argument("--outfile", required=True)
    ap.add_argument("--outtype", default="bf16", choices=sorted(OUTTYPES))
    ap.add_argument("--name", default=None, help="general.name (default: the directory name)")
    ap.add_argument("--no-mtp", action="store_true", help="drop the mtp.* tensors")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.time()
    try:
        counts = convert(args.model_dir, args.outfile, args.outtype, args.name,
                         use_mtp=not args.no_mtp, verbose=args.verbose)
    except (ConvertError, ValueError, OSError) as e:
        print(f"hf_to_gguf: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.outfile} ({os.path.getsize(args.outfile)} bytes, "
          f"{sum(counts.values())} tensors {counts}) in {time.time() - t0:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
