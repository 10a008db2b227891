"""Minimal GGUF v3 writer (numpy only).

Layout written (all little-endian), as gguf-py / ggml expect it:
    magic "GGUF" | u32 version=3 | u64 n_tensors | u64 n_kv
    n_kv x (string key | u32 value type | value)
    n_tensors x (string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset)
    zero padding to `alignment`
    tensor data, each tensor starting at a multiple of `alignment` from the data start
    (every tensor, the last included, is followed by zero padding up to the alignment)
A string is u64 length + UTF-8 bytes (no terminator). An array is u32 element type + u64 count
+ elements. Keys keep insertion order; tensors keep insertion order.

Usage:
    w = GGUFWriter()
    w.add_string("general.architecture", "qwen35")
    w.add_uint32("qwen35.block_count", 5)
    w.add_tensor("token_embd.weight", raw_bytes_or_array, GGMLType.Q8_0, ne=(64, 97))
    w.write("model.gguf")
"""

import struct

import numpy as np

from gguf_constants import (GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_VERSION, GGMLType,
                            VALUE_STRUCT, ValueType, align_up, tensor_nbytes)


def _pack_string(s):
    data = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(data)) + data


def _pack_scalar(vtype, value):
    if vtype == ValueType.STRING:
        return _pack_string(value)
    if vtype == ValueType.BOOL:
        return struct.pack("<?", bool(value))
    return struct.pack(VALUE_STRUCT[vtype], value)


def _guess_type(value):
    """Type tag gguf-py picks for a Python value (int -> INT32, float -> FLOAT32)."""
    if isinstance(value, bool):
        return ValueType.BOOL
    if isinstance(value, int):
        return ValueType.INT32
    if isinstance(value, float):
        return ValueType.FLOAT32
    if isinstance(value, (str, bytes, bytearray)):
        return ValueType.STRING
    raise TypeError(f"cannot infer a GGUF type for {type(value).__name__}")


class GGUFWriter:
    def __init__(self, alignment=GGUF_DEFAULT_ALIGNMENT):
        if alignment <= 0 or alignment % 8 != 0:
            raise ValueError("alignment must be a positive multiple of 8")
        self.alignment = alignment
        self.kv = []          # (key, packed type + value bytes)
        self.kv_keys = set()
        self.tensors = []     # (name, ne tuple, ggml_type, raw bytes)
        self.tensor_names = set()
        if alignment != GGUF_DEFAULT_ALIGNMENT:
            self.add_uint32("general.alignment", alignment)

    # ---- metadata -------------------------------------------------------------------------
    def add_kv(self, key, value, vtype, elem_type=None):
        """Add one key. For ARRAY give elem_type (a nested array is not supported)."""
        if key in self.kv_keys:
            raise ValueError(f"duplicate key {key}")
        if vtype == ValueType.ARRAY:
            values = list(value)
            if elem_type is None:
                if not values:
                    raise ValueError(f"empty array {key} needs an explicit elem_type")
                elem_type = _guess_type(values[0])
            if elem_type == ValueType.ARRAY:
                raise ValueError("nested arrays are not supported")
            body = struct.pack("<IQ", elem_type, len(values))
            if elem_type in (ValueType.STRING, ValueType.BOOL):
                body += b"".join(_pack_scalar(elem_type, v) for v in values)
            else:
                fmt = VALUE_STRUCT[elem_type]
                body += struct.pack("<" + fmt[1] * len(values), *values)
        else:
            body = _pack_scalar(vtype, value)
        self.kv.append((key, struct.pack("<I", vtype) + body))
        self.kv_keys.add(key)

    def add_uint8(self, key, v): self.add_kv(key, v, ValueType.UINT8)
    def add_int8(self, key, v): self.add_kv(key, v, ValueType.INT8)
    def add_uint16(self, key, v): self.add_kv(key, v, ValueType.UINT16)
    def add_int16(self, key, v): self.add_kv(key, v, ValueType.INT16)
    def add_uint32(self, key, v): self.add_kv(key, v, ValueType.UINT32)
    def add_int32(self, key, v): self.add_kv(key, v, ValueType.INT32)
    def add_uint64(self, key, v): self.add_kv(key, v, ValueType.UINT64)
    def add_int64(self, key, v): self.add_kv(key, v, ValueType.INT64)
    def add_float32(self, key, v): self.add_kv(key, v, ValueType.FLOAT32)
    def add_float64(self, key, v): self.add_kv(key, v, ValueType.FLOAT64)
    def add_bool(self, key, v): self.add_kv(key, v, ValueType.BOOL)
    def add_string(self, key, v): self.add_kv(key, v, ValueType.STRING)

    def add_array(self, key, values, elem_type=None):
        self.add_kv(key, values, ValueType.ARRAY, elem_type)

    # ---- tensors --------------------------------------------------------------------------
    def add_tensor(self, name, data, ggml_type, ne=None):
        """Add a tensor.

        data: a numpy array. For F32/F16/F64/I* it may be the typed array (ne defaults to its
        reversed shape); for BF16 a uint16 array; for block types the raw uint8 bytes, in
        which case ne (innermost first) must be given.
        """
        if name in self.tensor_names:
            raise ValueError(f"duplicate tensor {name}")
        if len(name.encode("utf-8")) >= 64:
            raise ValueError(f"tensor name too long for ggml (max 63 bytes): {name}")
        arr = np.ascontiguousarray(data)
        if ne is None:
            if arr.dtype == np.uint8 and ggml_type not in (GGMLType.I8,):
                raise ValueError(f"{name}: raw bytes need an explicit ne")
            ne = tuple(int(d) for d in reversed(arr.shape)) or (1,)
        ne = tuple(int(d) for d in ne)
        if not 1 <= len(ne) <= 4:
            raise ValueError(f"{name}: ggml supports 1..4 dims, got {len(ne)}")
        raw = arr.tobytes()
        expect = tensor_nbytes(ggml_type, ne)
        if len(raw) != expect:
            raise ValueError(f"{name}: {len(raw)} bytes given, type {ggml_type} ne {ne} needs {expect}")
        self.tensors.append((name, ne, ggml_type, raw))
        self.tensor_names.add(name)

    # ---- output ---------------------------------------------------------------------------
    def to_bytes_header(self):
        out = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))]
        for key, body in self.kv:
            out.append(_pack_string(key))
            out.append(body)
        offset = 0
        for name, ne, ggml_type, raw in self.tensors:
            out.append(_pack_string(name))
            out.append(struct.pack("<I", len(ne)))
            out.append(struct.pack("<" + "Q" * len(ne), *ne))
            out.append(struct.pack("<IQ", ggml_type, offset))
            offset += align_up(len(raw), self.alignment)
        header = b"".join(out)
        return header + b"\0" * (align_up(len(header), self.alignment) - len(header))

    def write(self, path):
        with open(path, "wb") as f:
            f.write(self.to_bytes_header())
            for _, _, _, raw in self.tensors:
                f.write(raw)
                f.write(b"\0" * (align_up(len(raw), self.alignment) - len(raw)))
