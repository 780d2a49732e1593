#!/usr/bin/env python3
"""
tests/tools/gen_quant_data.py — writes tests/data/quant/iq.gguf, the reference data of tests/test_quant.c
for the GGUF types dequantized from ops/quant_grids.h and the ternary / NVFP4 decoders: IQ1_S, IQ1_M,
IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0, TQ2_0 and NVFP4.

For each type the file holds q.<TYPE>, a few blocks of that type (written raw by gguf-py's GGUFWriter, so
the file is also a GGUF of these types that glmc's reader must open), and ref.<TYPE>, F32 holding what
gguf-py's numpy dequantization (gguf.quants.dequantize, independent of ggml's C and of ops/quant.c) makes
of those bytes. The blocks are seeded random bytes whose scale fields are made valid: a finite half
(positive, negative, subnormal, large) where the type has one (IQ1_M: spread over the top nibbles of its
scale words), UE4M3 scale bytes 0x00-0x7f for NVFP4 (0x00 and 0x7f, E4M3's NaN, decode as 0); TQ1_0 and
TQ2_0 also get a block from gguf-py's own quantizer; in IQ2_XXS, IQ2_XS and IQ3_XXS the sign indices
are a permutation of 0-127, so every entry of the sign table is used. Run by hand; the test suite only reads the file:

    pip install gguf numpy
    python3 tests/tools/gen_quant_data.py          # from the repo root
"""
import os

import numpy as np
from gguf import GGUFWriter, quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "quant", "iq.gguf")

TYPES = [T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ1_S, T.IQ1_M, T.TQ1_0, T.TQ2_0, T.NVFP4]

# Byte offset of the block's half scale (IQ1_M and NVFP4 are handled apart).
HALF_AT = {T.IQ2_XXS: 0, T.IQ2_XS: 0, T.IQ2_S: 0, T.IQ3_XXS: 0, T.IQ3_S: 0, T.IQ1_S: 0, T.TQ1_0: 52, T.TQ2_0: 64}

# The scales of the blocks in turn: ordinary, negative, subnormal, large (still finite after scaling).
SCALES = [0.0123, -0.75, 3.0e-6, 96.0]


def half_bits(v):
    h = np.array([v], dtype=np.float16)
    assert np.isfinite(h[0]), v
    return int(h.view(np.uint16)[0])


def set_half(block, qt, v):
    """Store v (as a half) in the block scale field of a block of type qt (not NVFP4)."""
    h = half_bits(v)
    if qt == T.IQ1_M:
        for k in range(4):                                # nibble k of the half: top of scale word k
            block[49 + 2 * k] = (block[49 + 2 * k] & 0x0F) | ((h >> (4 * k) & 0xF) << 4)
    else:
        block[HALF_AT[qt]] = h & 0xFF
        block[HALF_AT[qt] + 1] = h >> 8


def blocks_for(qt, rng):
    blck, size = GGML_QUANT_SIZES[qt]
    nb = 8 if qt == T.NVFP4 else len(SCALES)
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    for i in range(nb):
        if qt == T.NVFP4:
            raw[i, :4] = rng.integers(0, 0x80, size=4, dtype=np.uint8)
            if i == 0:
                raw[i, :4] = [0x00, 0x7F, 0x01, 0x7E]   # both zero codes, the smallest and largest
        else:
            set_half(raw[i], qt, SCALES[i] * (1 + 0.1 * rng.random()))
    if qt in (T.IQ2_XXS, T.IQ3_XXS, T.IQ2_XS):         # every 7-bit sign index once over the 4 blocks
        perm = rng.permutation(128)
        for i in range(nb):
            for g in range(8):
                for l in range(4):
                    s = int(perm[32 * i + 4 * g + l])
                    if qt == T.IQ2_XS:                    # 16-bit words: 9-bit grid index, 7-bit sign index
                        o = 2 + 2 * (4 * g + l)
                        raw[i, o + 1] = (raw[i, o + 1] & 0x01) | (s << 1)
                    else:                                 # bits 7l..7l+6 of the group's 32-bit word
                        o = (2 + 8 * g + 4) if qt == T.IQ2_XXS else (66 + 4 * g)
                        w = int.from_bytes(bytes(raw[i, o:o + 4]), "little")
                        w = (w & ~(0x7F << (7 * l))) | (s << (7 * l))
                        raw[i, o:o + 4] = np.frombuffer(w.to_bytes(4, "little"), dtype=np.uint8)
    if qt in (T.TQ1_0, T.TQ2_0):                          # one block as gguf-py's quantizer writes it
        x = rng.standard_normal(blck).astype(np.float32)
        raw[-1] = quants.quantize(x.reshape(1, blck), qt).reshape(size)
    return raw


def main():
    rng = np.random.default_rng(20261206)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    w = GGUFWriter(OUT, "quant-test")
    for qt in TYPES:
        blck, size = GGML_QUANT_SIZES[qt]
        raw = blocks_for(qt, rng)
        ref = quants.dequantize(raw.reshape(-1), qt)
        assert ref.dtype == np.float32 and ref.size == raw.shape[0] * blck and np.all(np.isfinite(ref)), qt.name
        assert np.any(ref != 0), qt.name
        # one row per block, so a shape of [blocks, block size] in numpy order
        w.add_tensor("q." + qt.name, raw, raw_dtype=qt)
        w.add_tensor("ref." + qt.name, ref.reshape(raw.shape[0], blck))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote %s (%d bytes)" % (OUT, os.path.getsize(OUT)))


if __name__ == "__main__":
    main()
