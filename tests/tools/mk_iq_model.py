#!/usr/bin/env python3
"""
tests/tools/mk_iq_model.py — write two GGUF files of one small llama-architecture model (hidden 256, 4
heads of 64, 2 KV heads, FFN 512, 3 layers, vocab 256), for tests/iq_gguf.sh:

    OUT_Q.gguf    every matrix in one of the types IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
                  TQ1_0, TQ2_0, NVFP4, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4 (each type at
                  least once, the token embedding and the LM head too), seeded random blocks with their
                  scale fields set so the values are about 1/sqrt(K) (Q4_0, Q4_1, Q5_0, Q5_1, MXFP4:
                  gguf-py's quantizer over random values of that size)
    OUT_F32.gguf  the same model with each of those matrices as F32: gguf-py's numpy dequantization of
                  the same bytes

so glmc running both must produce the same logits bit for bit: the reader, binding and loading of the
types end to end, against an independent decoder. Written with gguf-py's GGUFWriter (raw blocks).
With --type NAME every matrix is of that one type (tests/gpu/quant_types.sh: a model per type).

    python3 tests/tools/mk_iq_model.py OUT_Q.gguf OUT_F32.gguf [--type NAME]  # needs: pip install gguf numpy
"""
import os
import sys

import numpy as np
from gguf import GGUFWriter, quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_quant_data import set_half  # noqa: E402

H, HEADS, KV, HD, FF, LAYERS, VOCAB = 256, 4, 2, 64, 512, 3, 256

# (tensor name, rows, row length, type)
MATRICES = [("token_embd.weight", VOCAB, H, T.IQ3_S), ("output.weight", VOCAB, H, T.NVFP4)]
LAYER_TYPES = [
    {"attn_q": T.IQ2_XXS, "attn_k": T.IQ2_XS, "attn_v": T.IQ2_S, "attn_output": T.IQ3_XXS,
     "ffn_gate": T.IQ1_S, "ffn_up": T.IQ1_M, "ffn_down": T.TQ1_0},
    {"attn_q": T.TQ2_0, "attn_k": T.NVFP4, "attn_v": T.IQ4_XS, "attn_output": T.IQ2_S,
     "ffn_gate": T.IQ3_XXS, "ffn_up": T.MXFP4, "ffn_down": T.IQ2_XXS},
    {"attn_q": T.Q4_0, "attn_k": T.Q4_1, "attn_v": T.Q5_0, "attn_output": T.Q5_1,
     "ffn_gate": T.Q2_K, "ffn_up": T.Q3_K, "ffn_down": T.IQ4_NL},
]
# The half scale fields of the older types whose blocks are random bytes here (gguf-py has no quantizer
# for them); the types it quantizes; the others' scales are gen_quant_data.set_half's.
OLD_HALVES = {T.Q2_K: (80, 82), T.Q3_K: (108,), T.IQ4_NL: (0,), T.IQ4_XS: (0,)}
QUANTIZED = (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.MXFP4)
SHAPES = {"attn_q": (HEADS * HD, H), "attn_k": (KV * HD, H), "attn_v": (KV * HD, H),
          "attn_output": (H, HEADS * HD), "ffn_gate": (FF, H), "ffn_up": (FF, H), "ffn_down": (H, FF)}
for i, lt in enumerate(LAYER_TYPES):
    for k, qt in lt.items():
        MATRICES.append(("blk.%d.%s.weight" % (i, k), SHAPES[k][0], SHAPES[k][1], qt))


def random_matrix(qt, rows, cols, target, rng):
    """Random blocks of qt for a rows x cols matrix whose dequantized values have RMS about target."""
    blck, size = GGML_QUANT_SIZES[qt]
    if qt in QUANTIZED:
        x = (target * rng.standard_normal((rows, cols))).astype(np.float32)
        return quants.quantize(x, qt).reshape(rows, cols // blck * size)
    raw = rng.integers(0, 256, size=(rows * cols // blck, size), dtype=np.uint8)

    def scale(b, v):
        if qt in OLD_HALVES:
            h = int(np.array([v], dtype=np.float16).view(np.uint16)[0])
            for o in OLD_HALVES[qt]:
                b[o], b[o + 1] = h & 0xFF, h >> 8
        else:
            set_half(b, qt, v)
    if qt == T.NVFP4:
        # scale bytes near the one that gives the target (UE4M3 has 3 mantissa bits: a few codes apart)
        raw[:, :4] = 0x38                                  # 1.0 (halved in the decoder)
        rms = float(np.sqrt(np.mean(quants.dequantize(raw.reshape(-1), qt) ** 2)))
        code = int(quants.NVFP4.fp32_to_ue4m3(np.array([target / rms], dtype=np.float32))[0])
        raw[:, :4] = np.clip(code + rng.integers(-2, 3, size=(raw.shape[0], 4)), 1, 0x7E).astype(np.uint8)
    else:
        for b in raw:
            scale(b, 1.0)
        rms = float(np.sqrt(np.mean(quants.dequantize(raw.reshape(-1), qt) ** 2)))
        for b in raw:
            scale(b, target / rms * (0.75 + 0.5 * rng.random()))
    return raw.reshape(rows, cols // blck * size)


def writer(path):
    w = GGUFWriter(path, "llama")
    w.add_name("iq-test")
    w.add_block_count(LAYERS)
    w.add_context_length(512)
    w.add_embedding_length(H)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_rope_dimension_count(HD)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(VOCAB)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    return w


def main():
    one = None
    if len(sys.argv) == 5 and sys.argv[3] == "--type":
        one = T[sys.argv[4].upper()]
    elif len(sys.argv) != 3:
        sys.exit("usage: mk_iq_model.py OUT_Q.gguf OUT_F32.gguf [--type NAME]")
    rng = np.random.default_rng(48)
    wq, wf = writer(sys.argv[1]), writer(sys.argv[2])
    for name, rows, cols, qt in MATRICES:
        qt = one if one is not None else qt
        raw = random_matrix(qt, rows, cols, 0.5 if name == "token_embd.weight" else cols ** -0.5, rng)
        ref = quants.dequantize(raw, qt)
        assert ref.dtype == np.float32 and ref.shape == (rows, cols) and np.all(np.isfinite(ref)), name
        wq.add_tensor(name, raw, raw_dtype=qt)
        wf.add_tensor(name, ref)
    norms = ["output_norm.weight"] + ["blk.%d.%s.weight" % (i, n) for i in range(LAYERS) for n in ("attn_norm", "ffn_norm")]
    for name in norms:
        v = (1 + 0.1 * rng.standard_normal(H)).astype(np.float32)
        wq.add_tensor(name, v)
        wf.add_tensor(name, v)
    for w in (wq, wf):
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


if __name__ == "__main__":
    main()
