"""Tensor encodings of the GGUF converter: bf16 rounding, Q8_0 / Q4_0 rows exactly as
gguf-py computes them, and decoding any of the converter's types back to float32.
Split from hf_to_gguf.py (which re-exports these names); numpy only."""

import numpy as np

from gguf_constants import GGMLType

QUANT_BLOCK = 32  # elements per Q8_0 / Q4_0 block


class ConvertError(Exception):
    pass


def fp32_to_bf16(arr):
    """Round to nearest even, NaNs forced quiet (gguf-py __compute_fp32_to_bf16)."""
    n = np.ascontiguousarray(arr, dtype=np.float32).view(np.uint32)
    n = np.where((n & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000),
                 (n & np.uint32(0xFFFF0000)) | np.uint32(64 << 16), n).astype(np.uint64)
    n = (n + (np.uint64(0x7FFF) + ((n >> np.uint64(16)) & np.uint64(1)))) >> np.uint64(16)
    return n.astype(np.uint16)


def bf16_to_fp32(u16):
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


class _BuiltinQuants:
    """Q8_0 / Q4_0 exactly as gguf-py's quants.py computes them (used when tools/gguf/quants.py
    is absent). Rows are float32 [rows, ne0]; raw blocks are uint8 [rows, ne0/32*bytes]."""

    @staticmethod
    def _roundf(n):   # C roundf: halves away from zero
        a = np.abs(n)
        floored = np.floor(a)
        return np.sign(n) * (floored + np.floor(2 * (a - floored)))

    @classmethod
    def quantize_q8_0(cls, rows):
        rows = np.asarray(rows, dtype=np.float32)
        blocks = rows.reshape(-1, QUANT_BLOCK)
        d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
        with np.errstate(divide="ignore"):
            inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
        qs = cls._roundf(blocks * inv).astype(np.int8).view(np.uint8)
        out = np.concatenate([d.astype(np.float16).view(np.uint8), qs], axis=1)
        return out.reshape(rows.shape[0], -1)

    @staticmethod
    def dequantize_q8_0(raw):
        blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, 34)
        d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
        qs = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
        return (d * qs).reshape(raw.shape[0], -1)

    @staticmethod
    def quantize_q4_0(rows):
        rows = np.asarray(rows, dtype=np.float32)
        blocks = rows.reshape(-1, QUANT_BLOCK)
        imax = np.abs(blocks).argmax(axis=-1)[:, None]
        d = np.take_along_axis(blocks, imax, axis=-1) / np.float32(-8)
        with np.errstate(divide="ignore"):
            inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
        # the C reference evaluates x*id + 8.5 with a fused multiply-add: emulate in float64
        q = np.trunc((blocks.astype(np.float64) * inv.astype(np.float64) + 8.5).astype(np.float32))
        q = np.clip(q.astype(np.uint8), 0, 15).reshape(-1, 2, QUANT_BLOCK // 2)
        qs = q[:, 0, :] | (q[:, 1, :] << np.uint8(4))
        out = np.concatenate([d.astype(np.float16).view(np.uint8), qs], axis=1)
        return out.reshape(rows.shape[0], -1)

    @staticmethod
    def dequantize_q4_0(raw):
        blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, 18)
        d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
        qs = blocks[:, 2:]
        q = np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=1).astype(np.float32) - 8
        return (d * q).reshape(raw.shape[0], -1)


def _quants():
    """tools/gguf/quants.py when it provides the four row functions, else the builtin copy."""
    try:
        import quants  # tools/gguf/quants.py
    except ImportError:
        return _BuiltinQuants
    names = ("quantize_q8_0", "dequantize_q8_0", "quantize_q4_0", "dequantize_q4_0")
    return quants if all(hasattr(quants, n) for n in names) else _BuiltinQuants


def quantize_rows(arr, ggml_type):
    """float32 [..., ne0] -> raw bytes uint8 [rows, ne0/32*block_bytes]."""
    q = _quants()
    rows = np.ascontiguousarray(arr, dtype=np.float32).reshape(-1, arr.shape[-1])
    name = {GGMLType.Q8_0: "q8_0", GGMLType.Q4_0: "q4_0"}[ggml_type]
    return np.asarray(getattr(q, "quantize_" + name)(rows), dtype=np.uint8).reshape(rows.shape[0], -1)


def dequantize_rows(raw, ggml_type, ne0):
    """raw bytes uint8 [rows, bytes_per_row] -> float32 [rows, ne0]."""
    q = _quants()
    name = {GGMLType.Q8_0: "q8_0", GGMLType.Q4_0: "q4_0"}[ggml_type]
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1, ne0 // QUANT_BLOCK * _block_bytes(ggml_type))
    return np.asarray(getattr(q, "dequantize_" + name)(raw), dtype=np.float32).reshape(raw.shape[0], ne0)


def _block_bytes(ggml_type):
    return {GGMLType.Q8_0: 34, GGMLType.Q4_0: 18}[ggml_type]


def decode_tensor(gtype, data, shape):
    """Inverse of encode_tensor's data: float32 array of numpy `shape`."""
    if gtype == GGMLType.F32:
        return np.asarray(data, dtype=np.float32).reshape(shape)
    if gtype == GGMLType.F16:
        return np.asarray(data).view(np.float16).astype(np.float32).reshape(shape)
    if gtype == GGMLType.BF16:
        return bf16_to_fp32(np.asarray(data).view(np.uint16)).reshape(shape)
    if gtype in (GGMLType.Q8_0, GGMLType.Q4_0):
        return dequantize_rows(data, gtype, shape[-1]).reshape(shape)
    raise ConvertError(f"cannot decode ggml type {gtype}")
