#!/usr/bin/python3
"""Writes the committed seed corpora of the fuzz targets (run from the repository root):
tests/fuzz/corpus/request_fuzz/ (first byte = parser: 0 chat, 1 completions, 2 tokenize,
3 detokenize; the rest is the body) and tests/fuzz/corpus/gguf_fuzz/ (small GGUF files made with
tools/gguf/gguf_writer.py: every metadata type, arrays, tensors of several types, a
non-default alignment, and truncations). Deterministic: rerunning rewrites the same files."""

import hashlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join("tools", "gguf"))
from gguf_constants import GGMLType, ValueType  # noqa: E402
from gguf_writer import GGUFWriter  # noqa: E402

ROOT = os.path.join("tests", "fuzz", "corpus")


def save(target, data):
    folder = os.path.join(ROOT, target)
    os.makedirs(folder, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def request_seeds():
    user = [{"role": "user", "content": "Hello there"}]
    chats = [
        {"messages": user},
        {"model": "m", "messages": user, "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "top_k": 40,
         "min_p": 0.05, "seed": 7, "stream": True,
         "stream_options": {"include_usage": True, "continuous_usage_stats": True}},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "developer", "content": "x"},
                      {"role": "user", "content": [{"type": "text", "text": "part"}]},
                      {"role": "assistant", "content": None, "reasoning_content": "think",
                       "tool_calls": [{"id": "c1", "type": "function",
                                       "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
                      {"role": "tool", "tool_call_id": "c1", "content": "42"}],
         "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                                                      "parameters": {"type": "object"}}}],
         "tool_choice": "auto", "chat_template_kwargs": {"enable_thinking": False}},
        {"messages": user, "logprobs": True, "top_logprobs": 5, "logit_bias": {"5": -100},
         "stop": ["\n", "END"], "stop_token_ids": [1, 2], "presence_penalty": 0.5,
         "frequency_penalty": -0.5, "repetition_penalty": 1.1, "n": 1, "ignore_eos": True,
         "response_format": {"type": "text"}, "reasoning_effort": "low", "reasoning_field": "both"},
        {"messages": user, "max_completion_tokens": 8, "continue_final_message": False,
         "add_generation_prompt": True, "tool_choice": {"type": "function", "function": {"name": "f"}}},
        {"messages": user, "max_tokens": 1e999},
        {"messages": "hello"},
        {},
    ]
    completions = [
        {"prompt": "Once upon a time", "max_tokens": 16},
        {"prompt": [1, 2, 3], "logprobs": 2, "echo": False, "stream": True},
        {"prompt": [[5, 6, 7]], "suffix": "", "best_of": 1},
        {"prompt": ["one"], "stop": "x", "seed": -1},
    ]
    tokenize = [{"prompt": "hello"}, {"messages": user, "add_generation_prompt": True},
                {"prompt": "x", "add_special_tokens": False, "model": "m"}]
    detokenize = [{"tokens": [1, 2, 3]}, {"tokens": []}, {"tokens": [-1]}]
    for selector, bodies in enumerate([chats, completions, tokenize, detokenize]):
        for body in bodies:
            save("request_fuzz", bytes([selector]) + json.dumps(body).encode())
    raw = [b"\x00{\"messages\":[{\"role\":\"user\",\"content\":\"caf\xc3\x28\"}]}",
           b"\x00{\"messages\":[{\"role\":\"user\",\"content\":\"x\\ud800y\"}]}",
           b"\x01{\"prompt\":\"a\",\"max_tokens\":3.5}", b"\x00[[[[[[[[]]]]]]]]", b"\x00{'a':1}",
           b"\x01", b"\x02null", b"\x03{\"tokens\":[1e300]}"]
    for data in raw:
        save("request_fuzz", data)
    hostile_seeds()


def hostile_seeds():
    """Bodies an attacker sends: nesting bombs (arrays, objects, under ignored fields and
    tool-call arguments), huge arrays, long strings. libFuzzer reads at most -max_len bytes of
    each, so they are cut to fit; selector bit 0x40 makes the target use tight JSON limits
    (depth 16, 256 values), reached inside that length."""
    msgs = b'"messages":[{"role":"user","content":"hi"}]'
    for selector in (0x00, 0x40):
        chat, completion = bytes([selector]), bytes([selector | 1])
        save("request_fuzz", chat + b'{' + msgs + b',"metadata":' + b"[" * 2000)
        save("request_fuzz", chat + b'{' + msgs + b',"user":' + b'{"a":' * 400 + b"1" + b"}" * 400 + b"}")
        save("request_fuzz", chat + b'{' + msgs + b',"chat_template_kwargs":' + b'{"a":[' * 200 + b"]}" * 200 + b"}")
        save("request_fuzz", chat + b"[" * 2047)
        save("request_fuzz", chat + b'{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function",'
             b'"function":{"name":"f","arguments":"' + b"[" * 1500 + b'"}}]}]}')
        save("request_fuzz", completion + b'{"prompt":[' + b"1," * 1000 + b"1]}")
        save("request_fuzz", completion + b'{"prompt":"' + b"a" * 2000 + b'"}')
        save("request_fuzz", bytes([selector | 3]) + b'{"tokens":[' + b"0," * 1000 + b"0]}")
        save("request_fuzz", bytes([selector | 2]) + b'{"prompt":"x","model":' + b"[{}," * 500 + b"]}")


def gguf_bytes(writer):
    out = writer.to_bytes_header()
    for _, _, _, raw in writer.tensors:
        out += raw + b"\0" * ((-len(raw)) % writer.alignment)
    return out


def gguf_seeds():
    w = GGUFWriter()
    w.add_string("general.architecture", "qwen35moe")
    w.add_string("general.name", "fuzz")
    for setter, key, value in [(w.add_uint8, "k.u8", 200), (w.add_int8, "k.i8", -3),
                               (w.add_uint16, "k.u16", 60000), (w.add_int16, "k.i16", -300),
                               (w.add_uint32, "k.u32", 4000000000), (w.add_int32, "k.i32", -70000),
                               (w.add_uint64, "k.u64", 2**63), (w.add_int64, "k.i64", -2**40),
                               (w.add_float32, "k.f32", 1.5), (w.add_float64, "k.f64", -2.25),
                               (w.add_bool, "k.bool", True)]:
        setter(key, value)
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "<|im_end|>"], ValueType.STRING)
    w.add_array("k.ints", [1, -2, 3], ValueType.INT32)
    w.add_array("k.floats", [0.5, 1.5], ValueType.FLOAT32)
    w.add_array("k.bools", [True, False], ValueType.BOOL)
    w.add_tensor("a.weight", np.arange(8, dtype=np.float32).reshape(2, 4), GGMLType.F32)
    w.add_tensor("b.weight", np.arange(4, dtype=np.float16), GGMLType.F16)
    w.add_tensor("c.weight", np.zeros(34, dtype=np.uint8), GGMLType.Q8_0, ne=(32,))
    full = gguf_bytes(w)
    save("gguf_fuzz", full)
    for cut in (4, 24, 60, len(full) // 2, len(full) - 1):
        save("gguf_fuzz", full[:cut])

    aligned = GGUFWriter(alignment=64)
    aligned.add_tensor("x", np.ones(3, dtype=np.float32), GGMLType.F32)
    save("gguf_fuzz", gguf_bytes(aligned))

    empty = GGUFWriter()
    save("gguf_fuzz", gguf_bytes(empty))


if __name__ == "__main__":
    request_seeds()
    gguf_seeds()
