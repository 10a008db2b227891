"""Minimal GGUF v2/v3 reader (numpy only), the counterpart of gguf_writer.py.

    r = GGUFReader("model.gguf")
    r.kv["qwen35.block_count"]          -> python value (lists for arrays)
    r.kv_types["qwen35.block_count"]    -> ValueType (for arrays: (ARRAY, elem type))
    t = r.tensors["blk.0.attn_qkv.weight"]
    t.ne, t.ggml_type, t.offset, t.nbytes
    r.raw(name)        -> uint8 array of the tensor's bytes (memory-mapped)
    r.array(name)      -> typed numpy array (F32/F16/BF16->float32 view or copy) in numpy
                          order (shape = reversed ne); block types return raw bytes shaped
                          [rows, bytes_per_row]

Every offset and size is checked against the file, so a truncated or corrupt file gives a
ValueError instead of garbage.
"""

import struct
from collections import OrderedDict

import numpy as np

from gguf_constants import (GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGML_BLOCK, GGML_TYPE_NAME,
                            GGMLType, VALUE_STRUCT, ValueType, align_up, tensor_nbytes)


class TensorInfo:
    def __init__(self, name, ne, ggml_type, offset):
        self.name = name
        self.ne = ne
        self.ggml_type = ggml_type
        self.offset = offset          # relative to the data section
        self.nbytes = tensor_nbytes(ggml_type, ne)

    @property
    def shape(self):
        """numpy order (outermost first)."""
        return tuple(reversed(self.ne))

    @property
    def type_name(self):
        return GGML_TYPE_NAME.get(self.ggml_type, str(self.ggml_type))

    def __repr__(self):
        return f"TensorInfo({self.name}, ne={self.ne}, {self.type_name}, off={self.offset})"


class GGUFReader:
    def __init__(self, path):
        self.path = path
        self.data = np.memmap(path, dtype=np.uint8, mode="r")
        self.pos = 0
        self.kv = OrderedDict()
        self.kv_types = OrderedDict()
        self.tensors = OrderedDict()
        self._parse()

    # ---- low level ------------------------------------------------------------------------
    def _take(self, n):
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"{self.path}: truncated at byte {self.pos} (need {n} more)")
        b = self.data[self.pos:self.pos + n].tobytes()
        self.pos += n
        return b

    def _unpack(self, fmt):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self._take(size))

    def _string(self):
        (n,) = self._unpack("<Q")
        if n > len(self.data):
            raise ValueError(f"{self.path}: string length {n} exceeds the file")
        return self._take(n).decode("utf-8")

    def _scalar(self, vtype):
        if vtype == ValueType.STRING:
            return self._string()
        if vtype not in VALUE_STRUCT:
            raise ValueError(f"{self.path}: unknown value type {vtype}")
        (v,) = self._unpack(VALUE_STRUCT[vtype])
        return v

    def _value(self, vtype):
        if vtype != ValueType.ARRAY:
            return self._scalar(vtype), vtype
        elem_type, count = self._unpack("<IQ")
        if elem_type == ValueType.ARRAY:
            items = [self._value(ValueType.ARRAY)[0] for _ in range(count)]
            return items, (ValueType.ARRAY, elem_type)
        if elem_type in VALUE_STRUCT and elem_type != ValueType.BOOL:
            fmt = VALUE_STRUCT[elem_type]
            size = struct.calcsize(fmt)
            if count * size > len(self.data):
                raise ValueError(f"{self.path}: array too large")
            items = list(struct.unpack("<" + fmt[1] * count, self._take(size * count)))
        else:
            items = [self._scalar(elem_type) for _ in range(count)]
        return items, (ValueType.ARRAY, elem_type)

    # ---- structure ------------------------------------------------------------------------
    def _parse(self):
        if self._take(4) != GGUF_MAGIC:
            raise ValueError(f"{self.path}: not a GGUF file (bad magic)")
        (self.version,) = self._unpack("<I")
        if self.version not in (2, 3):
            raise ValueError(f"{self.path}: unsupported GGUF version {self.version}")
        n_tensors, n_kv = self._unpack("<QQ")
        for _ in range(n_kv):
            key = self._string()
            (vtype,) = self._unpack("<I")
            value, vt = self._value(vtype)
            if key in self.kv:
                raise ValueError(f"{self.path}: duplicate key {key}")
            self.kv[key] = value
            self.kv_types[key] = vt
        self.alignment = int(self.kv.get("general.alignment", GGUF_DEFAULT_ALIGNMENT))
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._unpack("<I")
            if not 1 <= n_dims <= 4:
                raise ValueError(f"{self.path}: tensor {name} has {n_dims} dims")
            ne = self._unpack("<" + "Q" * n_dims)
            ggml_type, offset = self._unpack("<IQ")
            if ggml_type not in GGML_BLOCK:
                raise ValueError(f"{self.path}: tensor {name} has unknown type {ggml_type}")
            if name in self.tensors:
                raise ValueError(f"{self.path}: duplicate tensor {name}")
            self.tensors[name] = TensorInfo(name, tuple(ne), ggml_type, offset)
        self.data_start = align_up(self.pos, self.alignment)
        for t in self.tensors.values():
            if t.offset % self.alignment != 0:
                raise ValueError(f"{self.path}: tensor {t.name} offset {t.offset} is not aligned")
            if self.data_start + t.offset + t.nbytes > len(self.data):
                raise ValueError(f"{self.path}: tensor {t.name} runs past the end of the file")

    # ---- data -----------------------------------------------------------------------------
    def raw(self, name):
        t = self.tensors[name]
        start = self.data_start + t.offset
        return self.data[start:start + t.nbytes]

    def array(self, name):
        """F32/F16/F64/I* as typed arrays, BF16 widened to float32, block types as
        uint8 [rows, bytes_per_row]; all in numpy order."""
        t = self.tensors[name]
        raw = self.raw(name)
        typed = {GGMLType.F32: np.float32, GGMLType.F16: np.float16, GGMLType.F64: np.float64,
                 GGMLType.I8: np.int8, GGMLType.I16: np.int16, GGMLType.I32: np.int32,
                 GGMLType.I64: np.int64}
        if t.ggml_type in typed:
            return np.frombuffer(raw.tobytes(), dtype=typed[t.ggml_type]).reshape(t.shape)
        if t.ggml_type == GGMLType.BF16:
            u = np.frombuffer(raw.tobytes(), dtype=np.uint16).astype(np.uint32) << 16
            return u.view(np.float32).reshape(t.shape)
        block_elems, block_bytes = GGML_BLOCK[t.ggml_type]
        row_bytes = t.ne[0] // block_elems * block_bytes
        return np.frombuffer(raw.tobytes(), dtype=np.uint8).reshape(-1, row_bytes)
