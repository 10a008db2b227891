#!/usr/bin/env python3
"""Replace the chat template the embedded model is served with, in both of its copies.

The tiny model is trained on ChatML rendered by tools/train_tiny/chat_template.jinja (no
tools, no tool role). It is served with Qwen3.5's real template instead, so that `tools`
reach the prompt and `role: "tool"` messages render exactly as on the real models. Only
metadata changes: every other GGUF key (with its type, in its order) and every tensor's
bytes are copied unchanged, so the weights and the tokenizer stay bit for bit the same.

    set_chat_template.py --template tests/fixtures/chat_templates/qwen3_5.jinja \
        --gguf models/deltaserve-tiny-moe.gguf --hf-dir models/deltaserve-tiny-moe-hf

Writes the GGUF in place (through a temporary file), the HF directory's
chat_template.jinja and the `chat_template` of its tokenizer_config.json.
"""

import argparse
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "gguf"))

from gguf_constants import ValueType  # noqa: E402
from gguf_reader import GGUFReader  # noqa: E402
from gguf_writer import GGUFWriter  # noqa: E402

KEY = "tokenizer.chat_template"


def rewrite_gguf(path, template):
    r = GGUFReader(path)
    w = GGUFWriter(alignment=r.alignment)
    for key, value in r.kv.items():
        if key == "general.alignment":
            continue  # the writer adds it itself for a non-default alignment
        vtype = r.kv_types[key]
        if key == KEY:
            value = template
        if isinstance(vtype, tuple):
            w.add_kv(key, value, ValueType.ARRAY, vtype[1])
        else:
            w.add_kv(key, value, vtype)
    if KEY not in r.kv:
        w.add_string(KEY, template)
    for name, t in r.tensors.items():
        w.add_tensor(name, r.raw(name), t.ggml_type, ne=t.ne)
    tmp = path + ".tmp"
    w.write(tmp)
    del r
    os.replace(tmp, path)


def rewrite_hf(hf_dir, template):
    with open(os.path.join(hf_dir, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(template)
    cfg_path = os.path.join(hf_dir, "tokenizer_config.json")
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["chat_template"] = template
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--template", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--hf-dir", required=True)
    args = ap.parse_args()
    with open(args.template, encoding="utf-8") as f:
        template = f.read()
    rewrite_gguf(args.gguf, template)
    rewrite_hf(args.hf_dir, template)


if __name__ == "__main__":
    main()
