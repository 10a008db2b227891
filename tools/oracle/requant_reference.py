#!/usr/bin/env python3
"""Reference logits for the BF16 / Q8_0 / Q4_0 fixture GGUFs (needs torch + transformers).

A quantized GGUF holds different weights than the HF checkpoint, so its references must be
computed from exactly those weights. For each model and type this script
  1. reads tests/fixtures/<name>/model-<type>.gguf with the numpy reader,
  2. decodes every tensor that is not stored F32 (BF16, F16 fallbacks, Q8_0, Q4_0 blocks),
  3. maps it back to HF layout with the converter's inverse (undo the V-head permutation -
     rows for qkv/z/a/b, input columns for out_proj - and re-fuse the expert gate/up split),
     so quantization blocks are exactly the GGUF rows of ne[0] values, permuted or not,
  4. loads the HF model + MTP head with these weights (F32 tensors stay the checkpoint's),
  5. runs the same 80-token protocol and the MTP oracle, and writes
     logits_<type>.f32 [80][V] and mtp_logits_<type>.f32 [63][V].
reference.json gains a "quantized" entry per type (GGUF sha256, tensors replaced, error of
the type against the f32 reference). A first pass reloads the unmodified checkpoint and
checks that it reproduces logits.f32.

Usage: requant_reference.py [--fixtures tests/fixtures] [--models tiny_dense,tiny_moe]
                            [--types bf16,q8_0,q4_0]
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np
import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "gguf"))
sys.path.insert(0, os.path.join(_HERE, "..", "convert"))

import hf_to_gguf as conv  # noqa: E402
import oracle_common as oc  # noqa: E402
import safetensors_np  # noqa: E402
from gguf_constants import GGML_TYPE_NAME, GGMLType  # noqa: E402
from gguf_reader import GGUFReader  # noqa: E402


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def dequantized_hf_tensors(gguf_path, hp):
    """HF name -> float32 weights as the GGUF holds them, for every non-F32 tensor."""
    r = GGUFReader(gguf_path)
    decoded, types = {}, {}
    for name, t in r.tensors.items():
        if t.ggml_type == GGMLType.F32:
            continue
        decoded[name] = conv.decode_tensor(t.ggml_type, r.raw(name), t.shape)
        types[GGML_TYPE_NAME[t.ggml_type]] = types.get(GGML_TYPE_NAME[t.ggml_type], 0) + 1
    d = conv.Dims(hp)
    return conv.gguf_to_hf_tensors(decoded, d, hp.get("num_experts") is not None), types


def rel_err(a, ref):
    return float(np.abs(a - ref).max() / np.abs(ref).max())


def run_one(name, fdir, types):
    hf_dir = os.path.join(fdir, "hf")
    hp = conv.load_hparams(hf_dir)
    with open(os.path.join(fdir, "reference.json"), encoding="utf-8") as f:
        ref = json.load(f)
    tokens = ref["tokens"]
    V = ref["num_vocab"]
    ref_logits = np.fromfile(os.path.join(fdir, "logits.f32"), dtype="<f4").reshape(-1, V)
    ref_mtp = np.fromfile(os.path.join(fdir, "mtp_logits.f32"), dtype="<f4").reshape(-1, V)
    base = safetensors_np.load_dir(hf_dir)

    model, mtp, _ = oc.build(name)
    oc.load_state(model, mtp, base)
    res = oc.run_protocol(model, mtp, tokens)
    repro = float(np.abs(res["logits"] - ref_logits).max())
    print(f"[{name}] checkpoint reload reproduces logits.f32: max|diff| {repro:.3g}")
    if repro > 1e-5:
        raise SystemExit(f"[{name}] reload does not reproduce the f32 reference ({repro})")

    ref.setdefault("quantized", {})
    for qt in types:
        gguf_path = os.path.join(fdir, f"model-{qt}.gguf")
        replaced, counts = dequantized_hf_tensors(gguf_path, hp)
        state = dict(base)
        for k, v in replaced.items():
            if k not in state or state[k].shape != v.shape:
                raise SystemExit(f"[{name}] {qt}: {k} {v.shape} does not match the checkpoint")
            state[k] = v
        model, mtp, _ = oc.build(name)
        oc.load_state(model, mtp, state)
        res = oc.run_protocol(model, mtp, tokens)
        res["logits"].astype("<f4").tofile(os.path.join(fdir, f"logits_{qt}.f32"))
        res["mtp_logits"].astype("<f4").tofile(os.path.join(fdir, f"mtp_logits_{qt}.f32"))
        entry = {
            "gguf": f"model-{qt}.gguf",
            "gguf_sha256": sha256(gguf_path),
            "tensors_replaced": len(replaced),
            "stored_types": counts,
            "logits_file": f"logits_{qt}.f32",
            "mtp_logits_file": f"mtp_logits_{qt}.f32",
            "rel_err_vs_f32_logits": rel_err(res["logits"], ref_logits),
            "rel_err_vs_f32_mtp_logits": rel_err(res["mtp_logits"], ref_mtp),
            "argmax_agreement_vs_f32": int((res["logits"].argmax(-1) == ref_logits.argmax(-1)).sum()),
            "decode_vs_full_max_abs_diff": res["decode_vs_full_max_abs_diff"],
        }
        if hp.get("num_experts") is not None:
            entry["moe_min_topk_router_logit_gap"] = oc.router_margins(model, mtp, tokens)
        ref["quantized"][qt] = entry
        print(f"[{name}] {qt}: replaced {len(replaced)} tensors {counts}; vs f32: rel err "
              f"{entry['rel_err_vs_f32_logits']:.3g} (mtp {entry['rel_err_vs_f32_mtp_logits']:.3g}), "
              f"argmax agree {entry['argmax_agreement_vs_f32']}/{len(tokens)}, "
              f"decode vs full {entry['decode_vs_full_max_abs_diff']:.3g}")
    ref["acceptance"]["quantized"] = (
        "for model-<type>.gguf compare with logits_<type>.f32 (exactly the GGUF's weights, fp32 "
        "activations): max|diff|/max|ref| <= 1e-4 when the engine dequantizes and multiplies in "
        "fp32; an engine that also quantizes activations (ggml-style q8 dot products) needs ~1e-2")
    with open(os.path.join(fdir, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", default=os.path.join("tests", "fixtures"))
    ap.add_argument("--models", default="tiny_dense,tiny_moe")
    ap.add_argument("--types", default="bf16,q8_0,q4_0")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    torch.set_num_threads(1)
    for name in args.models.split(","):
        run_one(name, os.path.join(args.fixtures, name), args.types.split(","))


if __name__ == "__main__":
    main()
