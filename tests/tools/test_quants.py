#!/usr/bin/python3
"""tools/gguf/quants.py (numpy) against the C++ kernels (kernels/quant.cpp), bit for bit.

The two meet in a committed fixture, tests/fixtures/quants/q8_0_q4_0.bin: this script
rebuilds it from a fixed seed with quants.py and fails unless the bytes are identical; the
C++ test PythonQuants.FixtureMatches (kernels_tests) quantises the same inputs and must
produce the same blocks and dequantised values. So Python == fixture == C++.

  /usr/bin/python3 tests/tools/test_quants.py           # check (exit 1 on mismatch)
  /usr/bin/python3 tests/tools/test_quants.py --write   # regenerate after a deliberate change

Fixture layout (little endian): b"DSQ1", uint32 n (a multiple of 32), float32 x[n],
Q8_0 blocks (n/32*34 bytes), Q4_0 blocks (n/32*18 bytes), float32 dequant_q8_0[n],
float32 dequant_q4_0[n].
"""

import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "gguf"))
import quants  # noqa: E402

FIXTURE = os.path.join(ROOT, "tests", "fixtures", "quants", "q8_0_q4_0.bin")
MAGIC = b"DSQ1"


def fused_differs_blocks(rng, num_blocks):
    """Q4_0 blocks whose quants differ between fmaf(x, 1/d, 8.5) and the unfused f32
    x * (1/d) + 8.5: they pin the fused semantics."""
    blocks = []
    inv = np.float32(1) / (np.float32(-7) / np.float32(-8))  # first element -7 sets d
    while len(blocks) < num_blocks:
        picked = [np.float32(-7)]
        while len(picked) < 32:
            x = rng.uniform(-6.9, 6.9, 4096).astype(np.float32)
            unfused = np.trunc((x * inv).astype(np.float32) + np.float32(8.5))
            fused = np.trunc((x.astype(np.float64) * np.float64(inv) + 8.5).astype(np.float32))
            picked.extend(x[unfused != fused][: 32 - len(picked)])
        blocks.append(np.array(picked, dtype=np.float32))
    return blocks


def build_inputs():
    rng = np.random.default_rng(20241130)
    blocks = []
    for scale in 10.0 ** rng.uniform(-3, 2, 16):                  # ordinary weights
        blocks.append(rng.normal(0, scale, 32))
    for _ in range(4):
        blocks.append(rng.uniform(-1, 1, 32))
    halves = np.arange(31, dtype=np.float32) - 15 + np.float32(0.5)  # x * 1 = k + 0.5
    blocks.append(np.concatenate([[127.0], halves]))                # Q8_0: d = 1, ties
    blocks.append(np.concatenate([[-8.0], np.linspace(-7.5, 7.5, 31)]))  # Q4_0: d = 1
    blocks.append(np.concatenate([[8.0], np.linspace(-7.5, 7.5, 31)]))   # Q4_0: d = -1
    blocks.append(np.tile([3.0, -3.0, 1.0, -2.0], 8))                # equal extremes: first wins
    blocks.append(np.tile([-3.0, 3.0, 1.0, -2.0], 8))
    blocks.append(np.zeros(32))
    blocks.append(np.full(32, -0.0))
    outlier = rng.normal(0, 1e-3, 32)
    outlier[17] = 1000.0
    blocks.append(outlier)
    blocks.append(rng.normal(0, 1e-6, 32))   # d is an f16 subnormal
    blocks.append(rng.normal(0, 1e-9, 32))   # d rounds to 0 in f16
    blocks.append(rng.normal(0, 1e4, 32))
    blocks.append(rng.normal(0, 1e6, 32))    # d overflows f16: inf
    blocks.extend(fused_differs_blocks(rng, 3))
    return np.concatenate([np.asarray(b, dtype=np.float32) for b in blocks]).astype(np.float32)


def build_fixture():
    x = build_inputs()
    q8 = quants.quantize_q8_0(x)
    q4 = quants.quantize_q4_0(x)
    d8 = quants.dequantize_q8_0(q8)
    d4 = quants.dequantize_q4_0(q4)
    return b"".join([MAGIC, struct.pack("<I", x.size), x.astype("<f4").tobytes(), q8.tobytes(),
                     q4.tobytes(), d8.astype("<f4").tobytes(), d4.astype("<f4").tobytes()])


def check_known_answers():
    ones = np.ones((2, 64), dtype=np.float32)
    q8 = quants.quantize_q8_0(ones)
    assert q8.shape == (2, 68) and q8.dtype == np.uint8
    assert q8[0, :2].view("<f2")[0] == np.float16(np.float32(1) / np.float32(127))
    assert (q8[:, 2:34].view(np.int8) == 127).all()
    q4 = quants.quantize_q4_0(ones)
    assert q4.shape == (2, 36)
    assert bytes(q4[0, :2]) == b"\x00\xb0"          # d = -0.125
    assert (q4[0, 2:18] == 0).all()
    assert (quants.dequantize_q4_0(q4) == ones).all()
    x = np.random.default_rng(1).normal(size=(3, 96)).astype(np.float32)
    for quant, dequant, step in ((quants.quantize_q8_0, quants.dequantize_q8_0, 127),
                                 (quants.quantize_q4_0, quants.dequantize_q4_0, 8)):
        y = dequant(quant(x))
        assert y.shape == x.shape and y.dtype == np.float32
        amax = np.abs(x.reshape(-1, 32)).max(axis=1, keepdims=True)
        err = np.abs(y - x).reshape(-1, 32)
        assert (err <= 1.01 * amax / step).all(), quant.__name__


def main():
    check_known_answers()
    data = build_fixture()
    if "--write" in sys.argv[1:]:
        os.makedirs(os.path.dirname(FIXTURE), exist_ok=True)
        with open(FIXTURE, "wb") as f:
            f.write(data)
        print("wrote %s (%d bytes)" % (os.path.relpath(FIXTURE, ROOT), len(data)))
        return 0
    with open(FIXTURE, "rb") as f:
        committed = f.read()
    if committed != data:
        n = min(len(committed), len(data))
        first = next((i for i in range(n) if committed[i] != data[i]), n)
        print("FAIL: quants.py output differs from %s at byte %d" % (FIXTURE, first))
        return 1
    print("OK: quants.py reproduces %s (%d bytes)" % (os.path.relpath(FIXTURE, ROOT), len(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
