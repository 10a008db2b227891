#!/usr/bin/env python3
"""Read a GGUF written by tools/convert/hf_to_gguf.py back and check it against its HF source.

Checks (numpy only, no torch):
  * header: magic/version, alignment, every tensor offset aligned and inside the file;
  * metadata: architecture and the qwen35/qwen35moe hyper-parameter keys (model reference 5.2);
  * tensor set: exactly the names the model reference (5.3) lists for this config, with the
    expected ne (innermost first) and ggml type (F32 where forced, else the file type, F16
    where a quantized type cannot hold ne[0]);
  * values: every tensor decoded and mapped back to HF layout (inverse of +1, -exp, the
    V-head permutation, the expert split) equals the HF tensor: bit-exact for F32, within the
    rounding of the type otherwise.

Usage: check_gguf_roundtrip.py MODEL.gguf HF_DIR [--quiet]   (exit status 0 = all good)
"""

import argparse
import os
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "gguf"))
sys.path.insert(0, os.path.join(_HERE, "..", "convert"))

import hf_to_gguf as conv  # noqa: E402
import safetensors_np  # noqa: E402
from gguf_constants import GGMLType, GGML_TYPE_NAME  # noqa: E402
from gguf_reader import GGUFReader  # noqa: E402

FILE_TYPE_TO_GGML = {0: GGMLType.F32, 1: GGMLType.F16, 32: GGMLType.BF16,
                     7: GGMLType.Q8_0, 2: GGMLType.Q4_0}
# relative tolerance (max |diff| / max |ref| per tensor) of one encode/decode round trip
TYPE_TOLERANCE = {GGMLType.F32: 0.0, GGMLType.F16: 1e-3, GGMLType.BF16: 8e-3,
                  GGMLType.Q8_0: 1e-2, GGMLType.Q4_0: 1.5e-1}


def expected_tensors(hp, with_mtp=True):
    """GGUF name -> (ne, forced_f32) written from the model reference, independent of the
    converter's own tables."""
    H, L, V = hp["hidden_size"], hp["num_hidden_layers"], hp["vocab_size"]
    nh, nkv, hd = hp["num_attention_heads"], hp["num_key_value_heads"], hp["head_dim"]
    Hk, Hv = hp["linear_num_key_heads"], hp["linear_num_value_heads"]
    dk, dv, Kc = hp["linear_key_head_dim"], hp["linear_value_head_dim"], hp["linear_conv_kernel_dim"]
    Dc, Dv = 2 * Hk * dk + Hv * dv, Hv * dv
    interval = hp.get("full_attention_interval", 4)
    moe = hp.get("num_experts") is not None
    n_mtp = int(hp.get("mtp_num_hidden_layers") or 0) if with_mtp else 0
    exp = {"token_embd.weight": ((H, V), False), "output_norm.weight": ((H,), True)}
    if not hp.get("tie_word_embeddings", False):
        exp["output.weight"] = ((H, V), False)
    for i in range(L + n_mtp):
        b = f"blk.{i}."
        exp[b + "attn_norm.weight"] = ((H,), True)
        exp[b + "post_attention_norm.weight"] = ((H,), True)
        if i < L and (i + 1) % interval != 0:
            exp[b + "attn_qkv.weight"] = ((H, Dc), False)
            exp[b + "attn_gate.weight"] = ((H, Dv), False)
            exp[b + "ssm_beta.weight"] = ((H, Hv), False)
            exp[b + "ssm_alpha.weight"] = ((H, Hv), False)
            exp[b + "ssm_conv1d.weight"] = ((Kc, Dc), True)
            exp[b + "ssm_dt.bias"] = ((Hv,), True)
            exp[b + "ssm_a"] = ((Hv,), True)
            exp[b + "ssm_norm.weight"] = ((dv,), True)
            exp[b + "ssm_out.weight"] = ((Dv, H), False)
        else:
            exp[b + "attn_q.weight"] = ((H, 2 * nh * hd), False)
            exp[b + "attn_k.weight"] = ((H, nkv * hd), False)
            exp[b + "attn_v.weight"] = ((H, nkv * hd), False)
            exp[b + "attn_output.weight"] = ((nh * hd, H), False)
            exp[b + "attn_q_norm.weight"] = ((hd,), True)
            exp[b + "attn_k_norm.weight"] = ((hd,), True)
        if moe:
            E, Ie, Is = hp["num_experts"], hp["moe_intermediate_size"], hp["shared_expert_intermediate_size"]
            exp[b + "ffn_gate_inp.weight"] = ((H, E), True)
            exp[b + "ffn_gate_exps.weight"] = ((H, Ie, E), False)
            exp[b + "ffn_up_exps.weight"] = ((H, Ie, E), False)
            exp[b + "ffn_down_exps.weight"] = ((Ie, H, E), False)
            exp[b + "ffn_gate_inp_shexp.weight"] = ((H, 1), True)
            exp[b + "ffn_gate_shexp.weight"] = ((H, Is), False)
            exp[b + "ffn_up_shexp.weight"] = ((H, Is), False)
            exp[b + "ffn_down_shexp.weight"] = ((Is, H), False)
        else:
            I = hp["intermediate_size"]
            exp[b + "ffn_gate.weight"] = ((H, I), False)
            exp[b + "ffn_up.weight"] = ((H, I), False)
            exp[b + "ffn_down.weight"] = ((I, H), False)
        if i >= L:
            exp[b + "nextn.eh_proj.weight"] = ((2 * H, H), False)
            exp[b + "nextn.enorm.weight"] = ((H,), True)
            exp[b + "nextn.hnorm.weight"] = ((H,), True)
            exp[b + "nextn.shared_head_norm.weight"] = ((H,), True)
    return exp


def expected_metadata(hp, arch, with_mtp=True):
    L = hp["num_hidden_layers"]
    n_mtp = int(hp.get("mtp_num_hidden_layers") or 0) if with_mtp else 0
    rope = hp.get("rope_parameters") or {}
    sections = list(rope.get("mrope_section", [11, 11, 10]))
    kv = {
        "general.architecture": arch,
        f"{arch}.block_count": L + n_mtp,
        f"{arch}.context_length": hp["max_position_embeddings"],
        f"{arch}.embedding_length": hp["hidden_size"],
        f"{arch}.attention.head_count": hp["num_attention_heads"],
        f"{arch}.attention.head_count_kv": hp["num_key_value_heads"],
        f"{arch}.attention.key_length": hp["head_dim"],
        f"{arch}.attention.value_length": hp["head_dim"],
        f"{arch}.rope.dimension_count": int(hp["head_dim"] * 0.25),
        f"{arch}.rope.dimension_sections": (sections + [0, 0, 0, 0])[:4],
        f"{arch}.ssm.conv_kernel": hp["linear_conv_kernel_dim"],
        f"{arch}.ssm.state_size": hp["linear_key_head_dim"],
        f"{arch}.ssm.group_count": hp["linear_num_key_heads"],
        f"{arch}.ssm.time_step_rank": hp["linear_num_value_heads"],
        f"{arch}.ssm.inner_size": hp["linear_num_value_heads"] * hp["linear_value_head_dim"],
        f"{arch}.full_attention_interval": hp.get("full_attention_interval", 4),
    }
    if n_mtp:
        kv[f"{arch}.nextn_predict_layers"] = n_mtp
    if hp.get("num_experts") is not None:
        kv[f"{arch}.expert_count"] = hp["num_experts"]
        kv[f"{arch}.expert_used_count"] = hp["num_experts_per_tok"]
        kv[f"{arch}.expert_feed_forward_length"] = hp["moe_intermediate_size"]
        kv[f"{arch}.expert_shared_feed_forward_length"] = hp["shared_expert_intermediate_size"]
    else:
        kv[f"{arch}.feed_forward_length"] = hp["intermediate_size"]
    return kv


def decode(reader, name):
    t = reader.tensors[name]
    if t.ggml_type in (GGMLType.F32, GGMLType.F16, GGMLType.BF16):
        return reader.array(name).astype(np.float32)
    return conv.decode_tensor(t.ggml_type, reader.array(name), t.shape)


def check(gguf_path, hf_dir, with_mtp=True, log=print):
    """Returns a list of problems (empty = pass)."""
    problems = []
    hp = conv.load_hparams(hf_dir)
    arch = conv.detect_arch(hp)
    r = GGUFReader(gguf_path)
    for key, want in expected_metadata(hp, arch, with_mtp).items():
        got = r.kv.get(key)
        if got != want:
            problems.append(f"metadata {key}: got {got!r}, want {want!r}")
    for key in (f"{arch}.rope.freq_base", f"{arch}.attention.layer_norm_rms_epsilon"):
        if key not in r.kv:
            problems.append(f"metadata {key} missing")
    file_type = r.kv.get("general.file_type")
    if file_type not in FILE_TYPE_TO_GGML:
        return problems + [f"general.file_type {file_type} unexpected"]
    main_type = FILE_TYPE_TO_GGML[file_type]
    exp = expected_tensors(hp, with_mtp)
    missing = sorted(set(exp) - set(r.tensors))
    extra = sorted(set(r.tensors) - set(exp))
    if missing or extra:
        problems.append(f"tensor set differs: missing {missing[:8]} extra {extra[:8]}")
    for name, (ne, forced) in exp.items():
        if name not in r.tensors:
            continue
        t = r.tensors[name]
        if tuple(t.ne) != tuple(ne):
            problems.append(f"{name}: ne {t.ne}, want {ne}")
        want_type = GGMLType.F32 if forced else main_type
        if want_type in (GGMLType.Q8_0, GGMLType.Q4_0) and ne[0] % 32 != 0:
            want_type = GGMLType.F16
        if t.ggml_type != want_type:
            problems.append(f"{name}: type {GGML_TYPE_NAME[t.ggml_type]}, want {GGML_TYPE_NAME[want_type]}")
    if problems:
        return problems
    d = conv.Dims(hp, with_mtp)
    decoded = {n: decode(r, n) for n in r.tensors}
    back = conv.gguf_to_hf_tensors(decoded, d, hp.get("num_experts") is not None)
    hf = {}
    for n, a in safetensors_np.load_dir(hf_dir).items():
        n2 = conv.normalize_hf_name(n)
        if n2 is not None and (with_mtp or not n2.startswith("mtp.")):
            hf[n2] = a
    hf = fuse_legacy_experts(hf)
    if set(back) != set(hf):
        return [f"HF names differ: {sorted(set(back) ^ set(hf))[:8]}"]
    types = {}
    for gname, t in r.tensors.items():
        types[gname] = t.ggml_type
    worst = {}
    for name, ref in hf.items():
        got = back[name]
        if got.shape != ref.shape:
            problems.append(f"{name}: shape {got.shape} after inverse mapping, want {ref.shape}")
            continue
        gname = conv.hf_to_gguf_name(name, d)
        gtype = types[gname]
        err = float(np.max(np.abs(got - ref))) if ref.size else 0.0
        scale = float(np.max(np.abs(ref))) or 1.0
        # -exp/log and +1/-1 are not bit-exact inverses even in F32
        tol = TYPE_TOLERANCE[gtype] if gtype != GGMLType.F32 else 1e-6
        if err > tol * scale:
            problems.append(f"{name} ({GGML_TYPE_NAME[gtype]}): max|diff| {err:.3g} > {tol:g}*{scale:.3g}")
        key = GGML_TYPE_NAME[gtype]
        worst[key] = max(worst.get(key, 0.0), err / scale)
    log(f"{os.path.basename(gguf_path)}: {len(r.tensors)} tensors, {len(r.kv)} keys, "
        f"worst relative error per type {worst}")
    return problems


def fuse_legacy_experts(hf):
    """mlp.experts.{e}.{gate,up,down}_proj.weight -> the fused gate_up_proj / down_proj."""
    groups = {}
    for name in list(hf):
        parts = name.split(".")
        if "experts" in parts and parts[parts.index("experts") + 1].isdigit():
            i = parts.index("experts")
            prefix = ".".join(parts[:i + 1])
            groups.setdefault(prefix, {})[(parts[i + 2], int(parts[i + 1]))] = hf.pop(name)
    for prefix, g in groups.items():
        num = 1 + max(e for _, e in g)
        stack = lambda proj: np.stack([g[(proj, e)] for e in range(num)])  # noqa: E731
        hf[prefix + ".gate_up_proj"] = np.concatenate([stack("gate_proj"), stack("up_proj")], axis=1)
        hf[prefix + ".down_proj"] = stack("down_proj")
    return hf


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf")
    ap.add_argument("hf_dir")
    ap.add_argument("--no-mtp", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    log = (lambda *a: None) if args.quiet else print
    problems = check(args.gguf, args.hf_dir, not args.no_mtp, log)
    for p in problems:
        print("FAIL:", p)
    if not problems:
        log("OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
