"""The DFlash draft model format deltaserve loads (runtime/dflash_model.h): a directory with
config.json (z-lab's DFlashDraftModel fields) and model.safetensors. Standard library only."""
import json
import os
import struct

# The drafter of the embedded model (models/deltaserve-tiny-moe.gguf: H 256, 8 layers, vocab 5632).
TINY = {
    "hidden_size": 256,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "intermediate_size": 512,
    "vocab_size": 5632,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000000.0,
    "block_size": 16,
    # <|endoftext|>: the document separator, never an anchor in served decoding (every id of
    # the tiny vocabulary is a token; a dedicated mask row would need a new embedding row).
    "mask_token_id": 5627,
    "target_layer_ids": [1, 3, 5, 7],
}


def config_json(c):
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "attention_bias": False,
        "hidden_act": "silu",
        "hidden_size": c["hidden_size"],
        "num_hidden_layers": c["num_hidden_layers"],
        "num_attention_heads": c["num_attention_heads"],
        "num_key_value_heads": c["num_key_value_heads"],
        "head_dim": c["head_dim"],
        "intermediate_size": c["intermediate_size"],
        "vocab_size": c["vocab_size"],
        "rms_norm_eps": c["rms_norm_eps"],
        "rope_theta": c["rope_theta"],
        "layer_types": ["full_attention"] * c["num_hidden_layers"],
        "num_target_layers": 8,
        "dflash_config": {
            "block_size": c["block_size"],
            "mask_token_id": c["mask_token_id"],
            "target_layer_ids": c["target_layer_ids"],
        },
        "dtype": "bfloat16",
    }


def tensor_shapes(c):
    """HF name -> shape, in the order written."""
    h, q = c["hidden_size"], c["num_attention_heads"] * c["head_dim"]
    kv, i = c["num_key_value_heads"] * c["head_dim"], c["intermediate_size"]
    shapes = {"fc.weight": [h, len(c["target_layer_ids"]) * h], "hidden_norm.weight": [h], "norm.weight": [h]}
    for l in range(c["num_hidden_layers"]):
        p = f"layers.{l}."
        shapes.update({
            p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h],
            p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q],
            p + "self_attn.q_norm.weight": [c["head_dim"]], p + "self_attn.k_norm.weight": [c["head_dim"]],
            p + "mlp.gate_proj.weight": [i, h], p + "mlp.up_proj.weight": [i, h], p + "mlp.down_proj.weight": [h, i],
        })
    return shapes


def bf16_bytes(values):
    """Round-to-nearest-even BF16 of a flat list of floats."""
    out = bytearray()
    for v in values:
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        bits += 0x7FFF + ((bits >> 16) & 1)
        out += struct.pack("<H", (bits >> 16) & 0xFFFF)
    return bytes(out)


def write(directory, config, tensors, raw=None):
    """tensors: name -> flat list of floats (BF16 on disk); raw: name -> (bf16 bytes) instead."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config_json(config), f, indent=2)
        f.write("\n")
    shapes = tensor_shapes(config)
    header, data = {"__metadata__": {"format": "pt"}}, bytearray()
    for name, shape in shapes.items():
        blob = raw[name] if raw is not None else bf16_bytes(tensors[name])
        count = 1
        for d in shape:
            count *= d
        assert len(blob) == 2 * count, name
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        f.write(data)


def read_bf16(directory):
    """name -> (shape, raw little-endian BF16 bytes) of a drafter this module wrote."""
    with open(os.path.join(directory, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "BF16", name
        b, e = t["data_offsets"]
        out[name] = (t["shape"], data[b:e])
    return out
