#!/usr/bin/env python3
"""Self-test of tools/convert/hf_to_gguf.py and the GGUF reader/writer (numpy only).

Run from the repository root:  /usr/bin/python3 tests/tools/test_converter.py
Plain asserts; exits non-zero on the first failure. Takes a few seconds.

1. A synthetic tiny checkpoint (numpy random, per-expert legacy expert names, a small BPE
   tokenizer.json) converts, reads back, and round-trips (check_gguf_roundtrip) for every
   outtype; stacked legacy experts equal the fused form; tokenizer keys match llama.cpp's.
2. The V-head permutation is the grouped -> tiled map n = p*Hk + k and inverts exactly.
3. The committed fixtures (tests/fixtures/tiny_{dense,moe}) convert to byte-identical GGUF
   files and pass the round-trip check.
4. The independent float64 numpy forward (tools/oracle/numpy_reference.py) of each committed
   GGUF reproduces the HF transformers references (logits, hidden states, MTP) to 1e-4.
"""

import hashlib
import json
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "gguf"))
sys.path.insert(0, os.path.join(ROOT, "tools", "convert"))
sys.path.insert(0, os.path.join(ROOT, "tools", "oracle"))

import check_gguf_roundtrip  # noqa: E402
import numpy_reference  # noqa: E402
import hf_to_gguf as conv  # noqa: E402
import safetensors_np  # noqa: E402
from gguf_constants import GGMLType, TokenType, ValueType  # noqa: E402
from gguf_reader import GGUFReader  # noqa: E402
from gguf_writer import GGUFWriter  # noqa: E402

FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def have_quants():
    try:
        conv._quants()
        return True
    except conv.ConvertError:
        return False


def synthetic_config(moe):
    cfg = {
        "architectures": ["Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM"],
        "model_type": "qwen3_5_moe_text" if moe else "qwen3_5_text",
        "vocab_size": 40, "hidden_size": 32, "num_hidden_layers": 4,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
        "linear_num_key_heads": 2, "linear_num_value_heads": 6,
        "linear_key_head_dim": 8, "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4,
        "rms_norm_eps": 1e-6, "max_position_embeddings": 128, "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                            "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1],
                            "mrope_interleaved": True},
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "mtp_num_hidden_layers": 1, "bos_token_id": None, "eos_token_id": 38,
    }
    if moe:
        cfg.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                   shared_expert_intermediate_size=48)
    else:
        cfg.update(intermediate_size=64)
    return cfg


def synthetic_tensors(cfg, rng, legacy_experts):
    H, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    Hk, Hv, dk, dv = (cfg["linear_num_key_heads"], cfg["linear_num_value_heads"],
                      cfg["linear_key_head_dim"], cfg["linear_value_head_dim"])
    Dc, Dv = 2 * Hk * dk + Hv * dv, Hv * dv
    rnd = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    t = {"model.embed_tokens.weight": rnd(V, H), "model.norm.weight": rnd(H), "lm_head.weight": rnd(V, H)}

    def ffn(p):
        if "num_experts" in cfg:
            E, Ie, Is = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"]
            t[p + "mlp.gate.weight"] = rnd(E, H)
            if legacy_experts:
                for e in range(E):
                    t[p + f"mlp.experts.{e}.gate_proj.weight"] = rnd(Ie, H)
                    t[p + f"mlp.experts.{e}.up_proj.weight"] = rnd(Ie, H)
                    t[p + f"mlp.experts.{e}.down_proj.weight"] = rnd(H, Ie)
            else:
                t[p + "mlp.experts.gate_up_proj"] = rnd(E, 2 * Ie, H)
                t[p + "mlp.experts.down_proj"] = rnd(E, H, Ie)
            t[p + "mlp.shared_expert.gate_proj.weight"] = rnd(Is, H)
            t[p + "mlp.shared_expert.up_proj.weight"] = rnd(Is, H)
            t[p + "mlp.shared_expert.down_proj.weight"] = rnd(H, Is)
            t[p + "mlp.shared_expert_gate.weight"] = rnd(1, H)
        else:
            I = cfg["intermediate_size"]
            t[p + "mlp.gate_proj.weight"] = rnd(I, H)
            t[p + "mlp.up_proj.weight"] = rnd(I, H)
            t[p + "mlp.down_proj.weight"] = rnd(H, I)

    def attn(p):
        t[p + "self_attn.q_proj.weight"] = rnd(2 * nh * hd, H)
        t[p + "self_attn.k_proj.weight"] = rnd(nkv * hd, H)
        t[p + "self_attn.v_proj.weight"] = rnd(nkv * hd, H)
        t[p + "self_attn.o_proj.weight"] = rnd(H, nh * hd)
        t[p + "self_attn.q_norm.weight"] = rnd(hd)
        t[p + "self_attn.k_norm.weight"] = rnd(hd)

    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = rnd(H)
        t[p + "post_attention_layernorm.weight"] = rnd(H)
        if cfg["layer_types"][i] == "full_attention":
            attn(p)
        else:
            t[p + "linear_attn.in_proj_qkv.weight"] = rnd(Dc, H)
            t[p + "linear_attn.in_proj_z.weight"] = rnd(Dv, H)
            t[p + "linear_attn.in_proj_b.weight"] = rnd(Hv, H)
            t[p + "linear_attn.in_proj_a.weight"] = rnd(Hv, H)
            t[p + "linear_attn.conv1d.weight"] = rnd(Dc, 1, 4)
            t[p + "linear_attn.dt_bias"] = rnd(Hv)
            t[p + "linear_attn.A_log"] = np.log(rng.uniform(1, 8, Hv)).astype(np.float32)
            t[p + "linear_attn.norm.weight"] = rnd(dv)
            t[p + "linear_attn.out_proj.weight"] = rnd(H, Dv)
        ffn(p)
    p = "mtp.layers.0."
    t[p + "input_layernorm.weight"] = rnd(H)
    t[p + "post_attention_layernorm.weight"] = rnd(H)
    attn(p)
    ffn(p)
    t.update({"mtp.fc.weight": rnd(H, 2 * H), "mtp.pre_fc_norm_embedding.weight": rnd(H),
              "mtp.pre_fc_norm_hidden.weight": rnd(H), "mtp.norm.weight": rnd(H)})
    return t


def synthetic_tokenizer(d):
    vocab = {chr(ord("a") + i): i for i in range(26)}
    vocab.update({"ab": 26, "abc": 27, "\u0120a": 28, "\u0120": 29})
    tok = {"model": {"type": "BPE", "vocab": vocab,
                     "merges": [["a", "b"], ["ab", "c"], ["\u0120", "a"]]},
           "decoder": {"type": "ByteLevel"},
           "added_tokens": [
               {"id": 36, "content": "<|endoftext|>", "special": True, "normalized": False},
               {"id": 37, "content": "<|im_start|>", "special": True, "normalized": False},
               {"id": 38, "content": "<|im_end|>", "special": True, "normalized": False},
               {"id": 39, "content": "<think>", "special": False, "normalized": False}]}
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
                   "add_bos_token": False, "chat_template": "{{ messages }}"}, f)


def write_checkpoint(d, cfg, tensors, shards=1):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    names = list(tensors)
    if shards == 1:
        safetensors_np.save_file(tensors, os.path.join(d, "model.safetensors"))
        return
    weight_map = {}
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        safetensors_np.save_file(part, os.path.join(d, fname))
        weight_map.update({n: fname for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def assert_same_gguf(fresh, committed):
    """Byte-identical, except that ssm_a = -exp(A_log) may differ in the last bit between
    numpy builds (vectorised exp); those F32 values must agree to 1e-6 relative."""
    if sha256(fresh) == sha256(committed):
        return
    a, b = GGUFReader(fresh), GGUFReader(committed)
    assert a.kv == b.kv, f"{committed}: metadata differs from a fresh conversion"
    assert list(a.tensors) == list(b.tensors), f"{committed}: tensor list differs"
    for name in a.tensors:
        ta, tb = a.tensors[name], b.tensors[name]
        assert (ta.ne, ta.ggml_type, ta.offset) == (tb.ne, tb.ggml_type, tb.offset), name
        if name.endswith(".ssm_a"):
            assert np.allclose(a.array(name), b.array(name), rtol=1e-6, atol=0), name
        else:
            assert np.array_equal(a.raw(name), b.raw(name)), f"{committed}: {name} differs"


def test_writer_reader_types(tmp):
    w = GGUFWriter()
    w.add_uint8("a.u8", 7)
    w.add_int8("a.i8", -7)
    w.add_uint16("a.u16", 65535)
    w.add_int16("a.i16", -300)
    w.add_uint32("a.u32", 4000000000)
    w.add_int32("a.i32", -5)
    w.add_uint64("a.u64", 2 ** 40)
    w.add_int64("a.i64", -(2 ** 40))
    w.add_float32("a.f32", 0.5)
    w.add_float64("a.f64", 1e-300)
    w.add_bool("a.bool", True)
    w.add_string("a.str", "h\u00e9llo")
    w.add_array("a.arr_i32", [3, 3, 2, 0])
    w.add_array("a.arr_str", ["x", "", "\u4e2d"])
    w.add_array("a.arr_f32", [1.5, -2.0], ValueType.FLOAT32)
    w.add_array("a.arr_bool", [True, False], ValueType.BOOL)
    w.add_array("a.empty", [], ValueType.UINT32)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    w.add_tensor("x", x, GGMLType.F32)
    w.add_tensor("y", np.arange(5, dtype=np.float16), GGMLType.F16)
    path = os.path.join(tmp, "types.gguf")
    w.write(path)
    r = GGUFReader(path)
    assert r.kv["a.u8"] == 7 and r.kv["a.i8"] == -7 and r.kv["a.u16"] == 65535
    assert r.kv["a.i16"] == -300 and r.kv["a.u32"] == 4000000000 and r.kv["a.i32"] == -5
    assert r.kv["a.u64"] == 2 ** 40 and r.kv["a.i64"] == -(2 ** 40)
    assert r.kv["a.f32"] == 0.5 and r.kv["a.f64"] == 1e-300 and r.kv["a.bool"] is True
    assert r.kv["a.str"] == "h\u00e9llo"
    assert r.kv["a.arr_i32"] == [3, 3, 2, 0] and r.kv_types["a.arr_i32"] == (ValueType.ARRAY, ValueType.INT32)
    assert r.kv["a.arr_str"] == ["x", "", "\u4e2d"] and r.kv["a.arr_bool"] == [True, False]
    assert r.kv["a.arr_f32"] == [1.5, -2.0] and r.kv["a.empty"] == []
    assert r.tensors["x"].ne == (4, 3) and np.array_equal(r.array("x"), x)
    assert r.tensors["y"].offset % 32 == 0 and r.data_start % 32 == 0
    assert np.array_equal(r.array("y"), np.arange(5, dtype=np.float16))
    # truncation is reported, not crashed on
    with open(path, "rb") as f:
        blob = f.read()
    bad = os.path.join(tmp, "trunc.gguf")
    for cut in (3, 30, len(blob) - 40):
        with open(bad, "wb") as f:
            f.write(blob[:cut])
        try:
            GGUFReader(bad)
            raise AssertionError(f"truncated file ({cut} bytes) was accepted")
        except ValueError:
            pass
    print("writer/reader types: ok")


def test_v_permutation():
    Hk, r, d = 2, 3, 4
    rows = np.arange(Hk * r * d).reshape(Hk * r * d, 1)
    tiled = conv.v_heads_to_tiled(rows, 0, Hk, r, d)
    for n in range(Hk * r):
        p, k = divmod(n, Hk)
        j = k * r + p
        assert np.array_equal(tiled[n * d:(n + 1) * d, 0], np.arange(j * d, (j + 1) * d)), n
    assert np.array_equal(conv.v_heads_to_grouped(tiled, 0, Hk, r, d), rows)
    cols = np.arange(2 * Hk * r * d).reshape(2, Hk * r * d)
    assert np.array_equal(conv.v_heads_to_grouped(conv.v_heads_to_tiled(cols, 1, Hk, r, d), 1, Hk, r, d), cols)
    print("V-head permutation: ok")


def test_bf16_rounding():
    x = np.array([1.0, 1.00390625, 1.005859375, -3.0e38, np.inf, 1.0 + 2 ** -8 + 2 ** -9], np.float32)
    got = conv.bf16_to_fp32(conv.fp32_to_bf16(x))
    assert got[0] == 1.0 and got[1] == 1.0            # tie rounds to even
    assert got[2] == np.float32(1.0078125)           # above the tie rounds up
    assert np.isinf(got[4]) and got[5] == np.float32(1.0078125)
    print("bf16 rounding: ok")


def test_synthetic(tmp, moe, legacy, shards):
    rng = np.random.default_rng(1234)
    cfg = synthetic_config(moe)
    tensors = synthetic_tensors(cfg, rng, legacy)
    d = os.path.join(tmp, f"syn_{'moe' if moe else 'dense'}_{int(legacy)}")
    write_checkpoint(d, cfg, tensors, shards)
    synthetic_tokenizer(d)
    outtypes = ["f32", "f16", "bf16"] + (["q8_0", "q4_0"] if have_quants() else [])
    for ot in outtypes:
        out = os.path.join(tmp, f"syn_{ot}.gguf")
        conv.convert(d, out, ot, log=lambda *a: None)
        problems = check_gguf_roundtrip.check(out, d, log=lambda *a: None)
        assert not problems, problems
    r = GGUFReader(os.path.join(tmp, "syn_f32.gguf"))
    arch = "qwen35moe" if moe else "qwen35"
    assert r.kv["general.architecture"] == arch
    assert r.kv[f"{arch}.block_count"] == 5 and r.kv[f"{arch}.nextn_predict_layers"] == 1
    assert r.kv[f"{arch}.rope.dimension_sections"] == [2, 1, 1, 0]
    assert r.kv_types[f"{arch}.rope.dimension_sections"] == (ValueType.ARRAY, ValueType.INT32)
    assert r.kv_types[f"{arch}.block_count"] == ValueType.UINT32
    assert abs(r.kv[f"{arch}.rope.freq_base"] - 1e7) < 1
    # +1 folded into zero-centred norms only; ssm_a = -exp(A_log)
    assert np.array_equal(r.array("output_norm.weight"), tensors["model.norm.weight"] + np.float32(1))
    assert np.array_equal(r.array("blk.4.nextn.enorm.weight"),
                          tensors["mtp.pre_fc_norm_embedding.weight"] + np.float32(1))
    assert np.array_equal(r.array("blk.0.ssm_norm.weight"), tensors["model.layers.0.linear_attn.norm.weight"])
    a_log = tensors["model.layers.0.linear_attn.A_log"]
    want = -np.exp(conv.v_heads_to_tiled(a_log, 0, 2, 3, 1))
    assert np.array_equal(r.array("blk.0.ssm_a"), want)
    if moe:
        E = cfg["num_experts"]
        if legacy:
            gate = np.stack([tensors[f"model.layers.1.mlp.experts.{e}.gate_proj.weight"] for e in range(E)])
        else:
            gate = tensors["model.layers.1.mlp.experts.gate_up_proj"][:, :32, :]
        assert np.array_equal(r.array("blk.1.ffn_gate_exps.weight"), gate)
        assert r.tensors["blk.1.ffn_gate_inp_shexp.weight"].ggml_type == GGMLType.F32
    # tokenizer keys as llama.cpp writes them
    assert r.kv["tokenizer.ggml.model"] == "gpt2" and r.kv["tokenizer.ggml.pre"] == "qwen35"
    toks, types = r.kv["tokenizer.ggml.tokens"], r.kv["tokenizer.ggml.token_type"]
    assert len(toks) == 40 and toks[30] == "[PAD30]" and types[30] == TokenType.UNUSED
    assert toks[38] == "<|im_end|>" and types[38] == TokenType.CONTROL
    assert types[39] == TokenType.USER_DEFINED and types[0] == TokenType.NORMAL
    assert r.kv["tokenizer.ggml.merges"] == ["a b", "ab c", "\u0120 a"]
    assert r.kv["tokenizer.ggml.eos_token_id"] == 38 and r.kv["tokenizer.ggml.padding_token_id"] == 36
    assert "tokenizer.ggml.bos_token_id" not in r.kv and r.kv["tokenizer.ggml.add_bos_token"] is False
    assert r.kv["tokenizer.chat_template"] == "{{ messages }}"
    # --no-mtp drops the MTP block
    out = os.path.join(tmp, "syn_nomtp.gguf")
    conv.convert(d, out, "f32", use_mtp=False, log=lambda *a: None)
    r = GGUFReader(out)
    assert r.kv[f"{arch}.block_count"] == 4 and f"{arch}.nextn_predict_layers" not in r.kv
    assert not any(n.startswith("blk.4.") for n in r.tensors)
    assert not check_gguf_roundtrip.check(out, d, with_mtp=False, log=lambda *a: None)
    print(f"synthetic {'moe' if moe else 'dense'} (legacy experts={legacy}, shards={shards}) "
          f"{outtypes}: ok")


def test_bad_inputs(tmp):
    d = os.path.join(tmp, "bad")
    os.makedirs(d, exist_ok=True)
    for content, what in ((b"{", "bad config"), (json.dumps({"architectures": ["LlamaForCausalLM"]}).encode(), "wrong arch")):
        with open(os.path.join(d, "config.json"), "wb") as f:
            f.write(content)
        try:
            conv.convert(d, os.path.join(tmp, "bad.gguf"), "f32", log=lambda *a: None)
            raise AssertionError(what + " accepted")
        except conv.ConvertError:
            pass
    print("bad inputs rejected: ok")


def test_fixtures(tmp):
    ran = 0
    for name in ("tiny_dense", "tiny_moe"):
        fdir = os.path.join(FIXTURES, name)
        hf = os.path.join(fdir, "hf")
        if not os.path.isdir(hf):
            print(f"fixture {name}: absent, skipped")
            continue
        for ot in ("f32", "bf16", "q8_0", "q4_0"):
            committed = os.path.join(fdir, f"model-{ot}.gguf")
            if ot in ("q8_0", "q4_0") and not have_quants():
                continue
            out = os.path.join(tmp, f"{name}-{ot}.gguf")
            conv.convert(hf, out, ot, name=name, log=lambda *a: None)
            problems = check_gguf_roundtrip.check(out, hf, log=lambda *a: None)
            assert not problems, (name, ot, problems)
            if os.path.isfile(committed):
                assert_same_gguf(out, committed)
            ran += 1
    print(f"fixtures: {ran} conversions ok")


def test_numpy_reference():
    """The float64 numpy forward of every committed GGUF reproduces the HF references."""
    for name in ("tiny_dense", "tiny_moe"):
        fdir = os.path.join(FIXTURES, name)
        if not os.path.isfile(os.path.join(fdir, "reference.json")):
            continue
        assert numpy_reference.main([fdir]) == 0, name


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_writer_reader_types(tmp)
        test_v_permutation()
        test_bf16_rounding()
        test_bad_inputs(tmp)
        test_synthetic(tmp, moe=False, legacy=False, shards=1)
        test_synthetic(tmp, moe=True, legacy=False, shards=2)
        test_synthetic(tmp, moe=True, legacy=True, shards=3)
        test_fixtures(tmp)
    test_numpy_reference()
    print("test_converter: all ok")


if __name__ == "__main__":
    main()
