"""Q8_0 and Q4_0 quantisation in numpy, bit for bit the same as the C++ kernels
(kernels/quant.cpp) and ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref.

Rows are float32 [rows, ne0] (a 1-D array is one row), ne0 a multiple of 32; raw blocks are
uint8 [rows, ne0 / 32 * block_bytes] in ggml's layout:
  Q8_0 (34 bytes): f16 d, int8 qs[32];            value[j] = qs[j] * d
  Q4_0 (18 bytes): f16 d, uint8 qs[16];           value[j] = ((qs[j] & 15) - 8) * d,
                                                  value[j + 16] = ((qs[j] >> 4) - 8) * d
All arithmetic is float32 as in C, except where noted. Bit-exact for finite input; NaN/inf
give the same (unspecified) bytes as the C++ code without raising.

Needs numpy only (/usr/bin/python3 has it).
"""

import numpy as np

QK = 32  # elements per block
Q8_0_BLOCK_BYTES = 34
Q4_0_BLOCK_BYTES = 18


def _blocks(rows):
    rows = np.asarray(rows, dtype=np.float32)
    if rows.ndim == 1:
        rows = rows[None, :]
    if rows.ndim != 2 or rows.shape[1] % QK != 0:
        raise ValueError("expected float32 [rows, ne0] with ne0 a multiple of 32, got shape %s"
                         % (rows.shape,))
    return rows.shape[0], np.ascontiguousarray(rows).reshape(-1, QK)


def _raw_blocks(raw, block_bytes):
    raw = np.asarray(raw, dtype=np.uint8)
    if raw.ndim == 1:
        raw = raw[None, :]
    if raw.ndim != 2 or raw.shape[1] % block_bytes != 0:
        raise ValueError("expected uint8 [rows, n * %d], got shape %s" % (block_bytes, raw.shape))
    return raw.shape[0], np.ascontiguousarray(raw).reshape(-1, block_bytes)


def _inverse(d):
    """1 / d in float32, 0 where d == 0 (C: `d ? 1.0f / d : 0.0f`)."""
    with np.errstate(divide="ignore", over="ignore"):
        return np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)


def _saturate(v, lo, hi):
    """C++ saturate_to_int after rounding: NaN -> 0, clamp to [lo, hi]."""
    v = np.where(np.isnan(v), 0, v)
    return np.clip(v, lo, hi)


def _f16_bytes(d):
    """float32 [n, 1] -> uint8 [n, 2]: IEEE half, round to nearest even, little endian."""
    with np.errstate(over="ignore"):
        return d.astype("<f2").view(np.uint8).reshape(-1, 2)


def quantize_q8_0(rows):
    """d = max|x| / 127; q = roundf(x * (1 / d)), halves away from zero."""
    num_rows, x = _blocks(rows)
    amax = np.fmax.reduce(np.abs(x), axis=1, initial=0.0, keepdims=True)  # NaN ignored, as C
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        v = (x * _inverse(d)).astype(np.float64)  # the f32 product, widened exactly
        # C roundf: trunc(v + 0.5 * sign(v)); exact in float64 for any float32 v.
        q = np.trunc(v + np.copysign(0.5, v))
    q = _saturate(q, -128, 127).astype(np.int8).view(np.uint8)
    return np.concatenate([_f16_bytes(d), q], axis=1).reshape(num_rows, -1)


def quantize_q4_0(rows):
    """The largest-magnitude element (first on ties) maps to quant 0: d = max / -8;
    q = min(15, trunc(fmaf(x, 1 / d, 8.5))).

    The multiply-add is fused: that is what ggml's C reference computes when built with FMA
    contraction (llama.cpp's usual builds) and what gguf-py emulates; kernels/quant.cpp calls
    std::fma. Here x * (1 / d) + 8.5 is exact in float64 whenever it matters for the result,
    so rounding that sum once to float32 reproduces fmaf.
    """
    num_rows, x = _blocks(rows)
    a = np.abs(x)
    a = np.where(np.isnan(a), np.float32(-1), a)  # C's `amax < |v|` never picks a NaN
    imax = a.argmax(axis=1)[:, None]               # first index of the largest |v|
    amax = np.take_along_axis(a, imax, axis=1)
    mx = np.where(amax > 0, np.take_along_axis(x, imax, axis=1), np.float32(0))
    d = (mx / np.float32(-8)).astype(np.float32)
    inv = _inverse(d)
    with np.errstate(invalid="ignore", over="ignore"):
        fused = (x.astype(np.float64) * inv.astype(np.float64) + 8.5).astype(np.float32)
        q = _saturate(np.trunc(fused), 0, 15).astype(np.uint8)
    qs = q[:, :QK // 2] | (q[:, QK // 2:] << np.uint8(4))
    return np.concatenate([_f16_bytes(d), qs], axis=1).reshape(num_rows, -1)


def _block_scale(blocks):
    return blocks[:, :2].copy().view("<f2").astype(np.float32)


def dequantize_q8_0(raw):
    num_rows, b = _raw_blocks(raw, Q8_0_BLOCK_BYTES)
    q = b[:, 2:].copy().view(np.int8).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        return (q * _block_scale(b)).astype(np.float32).reshape(num_rows, -1)


def dequantize_q4_0(raw):
    num_rows, b = _raw_blocks(raw, Q4_0_BLOCK_BYTES)
    qs = b[:, 2:]
    q = np.concatenate([qs & np.uint8(15), qs >> np.uint8(4)], axis=1).astype(np.float32) - 8
    with np.errstate(invalid="ignore", over="ignore"):
        return (q * _block_scale(b)).astype(np.float32).reshape(num_rows, -1)
