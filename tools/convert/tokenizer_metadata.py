"""The tokenizer keys of a converted GGUF (tokenizer.ggml.*: the gpt2 BPE vocabulary, merges,
token types, special token ids, add_bos_token, the chat template), read from tokenizer.json /
tokenizer_config.json / chat_template.jinja as llama.cpp's converter writes them.
Split from hf_to_gguf.py, which calls write_tokenizer()."""

import json
import os

from gguf_constants import TokenType
from tensor_encoding import ConvertError


def _looks_special(tok):
    return (tok in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (tok.startswith("<|") and tok.endswith("|>"))
            or (tok.startswith("<\uff5c") and tok.endswith("\uff5c>"))
            or (tok.startswith("<unused") and tok.endswith(">")))


def write_tokenizer(w, model_dir, hp, vocab_size, log):
    """gpt2 BPE vocabulary as llama.cpp's _set_vocab_gpt2 + SpecialVocab write it."""
    path = os.path.join(model_dir, "tokenizer.json")
    if not os.path.isfile(path):
        log("no tokenizer.json: writing no tokenizer keys")
        return
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    model = tok.get("model") or {}
    if model.get("type") != "BPE":
        raise ConvertError(f"{path}: only BPE tokenizers are supported (got {model.get('type')})")
    vocab = dict(model.get("vocab") or {})
    added = tok.get("added_tokens") or []
    added_by_id = {}
    for a in added:
        vocab[a["content"]] = a["id"]
        added_by_id[a["id"]] = a
    if vocab and max(vocab.values()) >= vocab_size:
        raise ConvertError(f"token id {max(vocab.values())} >= vocab_size {vocab_size}")
    reverse = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
            continue
        t = reverse[i]
        if i in added_by_id:
            if added_by_id[i].get("special") or _looks_special(t):
                types.append(TokenType.CONTROL)
            else:
                t = t.replace("\u2581", " ")
                types.append(TokenType.USER_DEFINED)
        else:
            types.append(TokenType.NORMAL)
        tokens.append(t)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen35")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", types)
    merges = model.get("merges") or []
    if merges and isinstance(merges[0], list):
        merges = [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part)
                           for part in pair) for pair in merges]
    if merges:
        w.add_array("tokenizer.ggml.merges", merges)
    _write_special_tokens(w, model_dir, hp, added)


def _write_special_tokens(w, model_dir, hp, added):
    cfg_path = os.path.join(model_dir, "tokenizer_config.json")
    tcfg = {}
    if os.path.isfile(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            tcfg = json.load(f)
    ids, add_flags = {}, {}
    kinds = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
    for typ in kinds:
        if isinstance(tcfg.get(f"add_{typ}_token"), bool):
            add_flags[typ] = tcfg[f"add_{typ}_token"]
        entry = tcfg.get(f"{typ}_token")
        content = entry.get("content") if isinstance(entry, dict) else entry
        if isinstance(content, str):
            tid = next((a["id"] for a in added if a.get("content") == content), None)
            if isinstance(tid, int):
                ids.setdefault(typ, tid)
    for typ in kinds:
        tid = hp.get(f"{typ}_token_id")
        if isinstance(tid, int) and not isinstance(tid, bool) and tid >= 0:
            ids.setdefault(typ, tid)
    gguf_key = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id",
                "sep": "seperator_token_id", "pad": "padding_token_id", "cls": "cls_token_id",
                "mask": "mask_token_id"}
    for typ, tid in ids.items():
        w.add_uint32(f"tokenizer.ggml.{gguf_key[typ]}", tid)
    for typ, flag in add_flags.items():
        w.add_bool(f"tokenizer.ggml.add_{typ}_token", flag)
    template = tcfg.get("chat_template")
    jinja = os.path.join(model_dir, "chat_template.jinja")
    if template is None and os.path.isfile(jinja):
        with open(jinja, encoding="utf-8") as f:
            template = f.read()
    if isinstance(template, str):
        w.add_string("tokenizer.chat_template", template)
    elif isinstance(template, list):
        names = []
        for entry in template:
            if entry.get("name") == "default":
                w.add_string("tokenizer.chat_template", entry["template"])
            else:
                names.append(entry["name"])
                w.add_string(f"tokenizer.chat_template.{entry['name']}", entry["template"])
        if names:
            w.add_array("tokenizer.chat_templates", names)
