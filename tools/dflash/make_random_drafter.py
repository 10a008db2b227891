#!/usr/bin/env python3
"""A DFlash drafter for the embedded model with seeded random weights (valid format, shapes
and norms; its drafts are rarely accepted). For loader and identity tests; the trained one
comes from train_drafter.py.

usage: make_random_drafter.py OUT_DIR [--seed N]"""
import argparse
import random

import dflash_format


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    c = dflash_format.TINY
    tensors = {}
    for name, shape in dflash_format.tensor_shapes(c).items():
        if len(shape) == 1:
            tensors[name] = [1.0] * shape[0]  # RMSNorm weights
        else:
            scale = shape[1] ** -0.5
            tensors[name] = [rng.gauss(0.0, scale) for _ in range(shape[0] * shape[1])]
    dflash_format.write(args.out, c, tensors)


if __name__ == "__main__":
    main()
