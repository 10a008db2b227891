#!/usr/bin/env python3
"""Build the tiny random Qwen3.5 models with HF transformers' own classes and record the
numerical oracle fixtures (needs torch + transformers 5.x; CPU float32; deterministic).

For each model (tiny_dense: 4 layers dense FFN; tiny_moe: 8 layers MoE) it writes to
<out>/<name>/:
  hf/config.json, hf/model.safetensors (tiny_moe: 2 shards + model.safetensors.index.json)
      trunk + mtp.* tensors in HF names, float32
  tokens.i32            int32 [80]           the fixed random token sequence
  logits.f32            float32 [80][V]      rows 0..63: one prefill of tokens[0:64] with cache;
                                             rows 64..79: single-token decode steps; row t =
                                             logits after feeding token t
  prefill_full.f32      float32 [80][V]      one uncached forward of all 80 tokens
  hidden.f32            float32 [L+1][64][H] output_hidden_states of the prefill
                                             (0 = embeddings, i = after layer i-1, L = final-normed)
  mtp_logits.f32        float32 [63][V]      MTP oracle, row t: hidden_final[t] + embed(tokens[t+1])
  mtp_hidden.f32        float32 [63][H]      post-mtp.norm output of the same rows
  reference.json        shapes, protocol, diagnostics
All raw files are little-endian, C order, no header.

Usage: make_fixtures.py [--out tests/fixtures] [--models tiny_dense,tiny_moe]
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "gguf"))

import oracle_common as oc  # noqa: E402
import safetensors_np  # noqa: E402
import tiny_weights as tw  # noqa: E402


def write_f32(path, arr):
    np.ascontiguousarray(arr, dtype="<f4").tofile(path)


def write_checkpoint(hf_dir, cfg_json, tensors, num_shards):
    os.makedirs(hf_dir, exist_ok=True)
    for f in os.listdir(hf_dir):
        if f.endswith((".safetensors", ".json")):
            os.remove(os.path.join(hf_dir, f))
    with open(os.path.join(hf_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg_json, f, indent=2, sort_keys=True)
    if num_shards == 1:
        safetensors_np.save_file(tensors, os.path.join(hf_dir, "model.safetensors"),
                                 metadata={"format": "pt"})
        return
    names = list(tensors)
    total = sum(a.nbytes for a in tensors.values())
    shards, acc = [[]], 0
    for n in names:   # contiguous split by bytes; the MTP tensors land in the last shard
        if acc >= total * len(shards) / num_shards and len(shards) < num_shards:
            shards.append([])
        shards[-1].append(n)
        acc += tensors[n].nbytes
    weight_map = {}
    for i, part in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        safetensors_np.save_file({n: tensors[n] for n in part}, os.path.join(hf_dir, fname),
                                 metadata={"format": "pt"})
        weight_map.update({n: fname for n in part})
    with open(os.path.join(hf_dir, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def make_one(name, out_root):
    import transformers
    spec = oc.SPECS[name]
    model, mtp, cfg = oc.build(name)
    oc.check_names(model, mtp, name)
    tensors = tw.make_weights(name)
    print(f"[{name}] attn impl {model.config._attn_implementation}; {len(tensors)} tensors, "
          f"names and shapes match the HF classes")
    fdir = os.path.join(out_root, name)
    os.makedirs(fdir, exist_ok=True)
    cfg_json = oc.config_json(cfg, spec["moe"])
    write_checkpoint(os.path.join(fdir, "hf"), cfg_json, tensors, 2 if spec["moe"] else 1)

    # reload from the written files, so the references are exactly those of the checkpoint
    model, mtp, _ = oc.build(name)
    oc.load_state(model, mtp, safetensors_np.load_dir(os.path.join(fdir, "hf")))

    tokens = tw.make_tokens(name)
    res = oc.run_protocol(model, mtp, tokens)
    np.asarray(tokens, dtype="<i4").tofile(os.path.join(fdir, "tokens.i32"))
    for key in ("logits", "prefill_full", "hidden", "mtp_logits", "mtp_hidden"):
        write_f32(os.path.join(fdir, key + ".f32"), res[key])
    logits = res["logits"]
    margin = oc.router_margins(model, mtp, tokens) if spec["moe"] else None
    L, V, H = cfg.num_hidden_layers, cfg.vocab_size, cfg.hidden_size
    ref = {
        "model": name,
        "arch": "qwen35moe" if spec["moe"] else "qwen35",
        "tokens": tokens,
        "prefill_tokens": oc.PREFILL_TOKENS,
        "decode_steps": oc.DECODE_STEPS,
        "num_tokens": oc.NUM_TOKENS,
        "num_vocab": V,
        "hidden_size": H,
        "num_layers": L,
        "layer_types": list(cfg.layer_types),
        "mtp_rows": oc.MTP_ROWS,
        "mtp_rope_position": "hidden",
        "mtp_rope_position_note": "row t (hidden of position t, embedding of tokens[t+1]) uses RoPE position t",
        "mtp_hidden_input": "post-final-norm trunk hidden (hidden.f32[L]); chaining uses mtp_hidden.f32 (post mtp.norm)",
        "files": {
            "tokens.i32": {"dtype": "int32", "shape": [oc.NUM_TOKENS]},
            "logits.f32": {"dtype": "float32", "shape": [oc.NUM_TOKENS, V],
                           "rows": "0..63 one prefill forward of tokens[0:64] (use_cache=True); 64..79 one "
                                   "single-token decode step each with the cache; row t = logits after token t"},
            "prefill_full.f32": {"dtype": "float32", "shape": [oc.NUM_TOKENS, V],
                                 "rows": "one forward of all 80 tokens without cache"},
            "hidden.f32": {"dtype": "float32", "shape": [L + 1, oc.PREFILL_TOKENS, H],
                           "rows": "output_hidden_states of the prefill: 0 = embeddings, i = residual after "
                                   "layer i-1, L = final-normed (input of lm_head)"},
            "mtp_logits.f32": {"dtype": "float32", "shape": [oc.MTP_ROWS, V]},
            "mtp_hidden.f32": {"dtype": "float32", "shape": [oc.MTP_ROWS, H]},
        },
        "byte_order": "little-endian, C order, no header",
        "decode_variant": res["decode_variant"],
        "hf_last_hidden_was_final_normed": res["hf_last_hidden_was_final_normed"],
        "decode_vs_full_max_abs_diff": res["decode_vs_full_max_abs_diff"],
        "prefill_vs_full_max_abs_diff": res["prefill_vs_full_max_abs_diff"],
        "logits_max_abs": float(np.abs(logits).max()),
        "logits_std": float(logits.std()),
        "mtp_logits_max_abs": float(np.abs(res["mtp_logits"]).max()),
        "argmax_agreement_decode_vs_full": int((logits.argmax(-1) == res["prefill_full"].argmax(-1)).sum()),
        "moe_min_topk_router_logit_gap": margin,
        "acceptance": {"f32": "max|diff|/max|ref| <= 1e-4 against logits.f32 (and the other f32 files)",
                       "bf16": "model-bf16.gguf against logits_bf16.f32 (weights exactly as the bf16 file "
                               "holds them, fp32 math): max|diff|/max|ref| <= 1e-4. An engine with bf16 "
                               "activations drifts by about as much as the weight rounding does "
                               "(quantized.bf16.rel_err_vs_f32_logits, 2-3% here): check such kernels per "
                               "op. Not against logits.f32: weight rounding alone moves these random "
                               "models by quantized.bf16.rel_err_vs_f32_logits"},
        "seed": spec["seed"],
        "token_seed": spec["token_seed"],
        "out_gain": spec["out_gain"],
        "weights": "tools/oracle/tiny_weights.py (numpy, per-tensor generators)",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__},
    }
    with open(os.path.join(fdir, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=1)
    print(f"[{name}] decode vs full max|diff| {res['decode_vs_full_max_abs_diff']:.3g} "
          f"(variant {res['decode_variant']}), prefill vs full {res['prefill_vs_full_max_abs_diff']:.3g}, "
          f"logits max|.| {ref['logits_max_abs']:.3f} std {ref['logits_std']:.3f}, "
          f"mtp max|.| {ref['mtp_logits_max_abs']:.3f}, router gap {margin}, "
          f"last hidden normed {res['hf_last_hidden_was_final_normed']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join("tests", "fixtures"))
    ap.add_argument("--models", default="tiny_dense,tiny_moe")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    torch.set_num_threads(1)   # fixed reduction order: reruns reproduce bit for bit
    for name in args.models.split(","):
        make_one(name, args.out)


if __name__ == "__main__":
    main()
