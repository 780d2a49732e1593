#!/usr/bin/env python3
"""
tests/tools/gen_ref_golden.py — writes tests/data/ref/*.bin, the golden data for tests/test_ref.c.

The expected outputs come from torch and Hugging Face transformers themselves (rotary embedding
modules and apply_rotary_pos_emb functions of real model files, torch.nn.functional, SDPA, sort,
dtype casts), never from a re-derivation of ops/ref.c. Run by hand after changing a case; the test
suite only reads the files:

    pip install torch transformers numpy
    python3 tests/tools/gen_ref_golden.py          # from the repo root

File format (little endian), a sequence of records until EOF:
    u32 name_len, name bytes, u32 type (0 f32, 1 i32, 2 u16, 3 f64), u32 count, count elements.
"""
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import DeepseekV3Config, Glm4MoeConfig, GlmConfig, LlamaConfig
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as dsv3
from transformers.models.glm import modeling_glm as glm
from transformers.models.glm4_moe import modeling_glm4_moe as glm4moe
from transformers.models.llama import modeling_llama as llama

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "ref")
TYPES = {np.float32: 0, np.int32: 1, np.uint16: 2, np.float64: 3}
gen = torch.Generator().manual_seed(20240607)


def rnd(*shape, lo=-1.0, hi=1.0):
    return torch.rand(*shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo


def randn(*shape, s=1.0):
    return torch.randn(*shape, generator=gen, dtype=torch.float32) * s


def write(name, recs):
    """recs: list of (name, array-like, numpy dtype)."""
    path = os.path.join(OUT, name + ".bin")
    with open(path, "wb") as f:
        for key, val, dt in recs:
            if isinstance(val, torch.Tensor):
                val = val.detach().cpu().numpy()
            a = np.ascontiguousarray(np.asarray(val).astype(dt, copy=False)).reshape(-1)
            kb = key.encode()
            f.write(struct.pack("<I", len(kb)) + kb + struct.pack("<II", TYPES[dt], a.size))
            f.write(a.astype(np.dtype(dt).newbyteorder("<")).tobytes())
    print(f"{path}: {os.path.getsize(path)} bytes")


# ---------------------------------------------------------------------------------------------
# Rotary embeddings. params record: D, rot_dim, interleaved, theta, factor, orig_ctx, beta_fast,
# beta_slow, mscale, mscale_all_dim, attn_factor, T, H (matching RefRope; 0 means absent). Without a
# scaling record a factor > 1 is YaRN; with one, scaling = [kind (ops/ref.h ROPE_*: 2 llama3,
# 3 linear), low_freq_factor, high_freq_factor].

# Large positions too: the angle is rounded to float32 as in HF, which shows at 200000.
POS = [0, 1, 7, 63, 4095, 65537, 200000]


def rope_params(D, rot, inter, theta, factor=0, orig=0, bf=0, bs=0, ms=0, msa=0, af=0, T=len(POS), H=2):
    return [D, rot, inter, theta, factor, orig, bf, bs, ms, msa, af, T, H]


def rope_case(name, params, emb, apply, x, pos, extra=()):
    """emb: an HF rotary embedding module; apply(x[1,H,T,D], cos, sin) -> y[1,H,T,D]."""
    T, H, D = x.shape
    pids = torch.tensor([pos], dtype=torch.int64)
    cos, sin = emb(x, pids)
    y = apply(x.transpose(0, 1)[None], cos, sin)[0].transpose(0, 1).contiguous()
    recs = [("params", params, np.float64), ("pos", pos, np.int32), ("x", x, np.float32),
            ("inv_freq", emb.inv_freq, np.float32), ("cs_scale", [emb.attention_scaling], np.float32),
            ("y", y, np.float32)]
    write(name, recs + list(extra))
    return cos, sin


def rope_complex(x, pos, inv_freq, scale, rot):
    """Interleaved rotary as a complex multiplication (Meta's llama reference formulation)."""
    T, H, D = x.shape
    freqs = torch.tensor(pos, dtype=torch.float32)[:, None] * inv_freq[None, :]
    cis = torch.polar(torch.ones_like(freqs), freqs) * scale  # [T, rot/2]
    xc = torch.view_as_complex(x[..., :rot].reshape(T, H, rot // 2, 2).contiguous())
    yr = torch.view_as_real(xc * cis[:, None, :]).reshape(T, H, rot)
    return torch.cat([yr, x[..., rot:]], dim=-1)


def hf_apply(fn):
    return lambda q, cos, sin: fn(q, q, cos, sin)[0]


def gen_rope():
    T, H = len(POS), 2
    # 1. split-half, full rotary: Llama.
    cfg = LlamaConfig(hidden_size=128, num_attention_heads=2, head_dim=64,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    rope_case("rope_neox", rope_params(64, 64, 0, 10000.0), llama.LlamaRotaryEmbedding(cfg),
              hf_apply(llama.apply_rotary_pos_emb), randn(T, H, 64), POS)

    # 2. split-half, partial rotary (rot 48 of 64): GLM-4.5 (Glm4Moe), theta 1e6.
    cfg = Glm4MoeConfig(hidden_size=128, num_attention_heads=2, head_dim=64,
                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                         "partial_rotary_factor": 0.75})
    rope_case("rope_neox_partial", rope_params(64, 48, 0, 1000000.0), glm4moe.Glm4MoeRotaryEmbedding(cfg),
              hf_apply(glm4moe.apply_rotary_pos_emb), randn(T, H, 64), POS)

    # 3. interleaved, partial rotary (rot 32 of 64): GLM-4 (Glm); also checked against complex mult.
    cfg = GlmConfig(hidden_size=128, num_attention_heads=2, head_dim=64,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})
    emb = glm.GlmRotaryEmbedding(cfg)
    x = randn(T, H, 64)
    yc = rope_complex(x, POS, emb.inv_freq, emb.attention_scaling, 32)
    rope_case("rope_inter_partial", rope_params(64, 32, 1, 10000.0), emb, hf_apply(glm.apply_rotary_pos_emb),
              x, POS, [("y_complex", yc, np.float32)])

    # 4. interleaved, full: DeepSeek-V3's apply_rotary_pos_emb_interleave, whose output is
    #    de-interleaved (rotated evens, then rotated odds): stored as y_hf, the complex form as y_complex.
    def dsv3_cfg(rope, **kw):
        return DeepseekV3Config(hidden_size=128, num_attention_heads=2, qk_rope_head_dim=64,
                                qk_nope_head_dim=64, v_head_dim=64, kv_lora_rank=32, q_lora_rank=48,
                                max_position_embeddings=kw.pop("max_pos", 163840), rope_parameters=rope,
                                rope_interleave=True)

    def inter_case(name, params, cfg, pos, x):
        emb = dsv3.DeepseekV3RotaryEmbedding(cfg)
        cos, sin = emb(x, torch.tensor([pos]))
        q = x.transpose(0, 1)[None]
        yhf = dsv3.apply_rotary_pos_emb_interleave(q, q, cos, sin)[0][0].transpose(0, 1).contiguous()
        y = rope_complex(x, pos, emb.inv_freq, emb.attention_scaling, params[1])
        write(name, [("params", params, np.float64), ("pos", pos, np.int32), ("x", x, np.float32),
                     ("inv_freq", emb.inv_freq, np.float32),
                     ("cs_scale", [emb.attention_scaling], np.float32), ("y_complex", y, np.float32),
                     ("y_hf", yhf, np.float32)])

    inter_case("rope_inter", rope_params(64, 64, 1, 10000.0),
               dsv3_cfg({"rope_type": "default", "rope_theta": 10000.0}), POS, randn(T, H, 64))

    # 5. YaRN. Positions beyond the original context too.
    ypos = [0, 1, 100, 4095, 4096, 30000, 163839]

    def yarn(theta, factor, orig, bf=None, bs=None, ms=None, msa=None, af=None):
        p = {"rope_type": "yarn", "rope_theta": theta, "factor": factor,
             "original_max_position_embeddings": orig}
        for k, v in (("beta_fast", bf), ("beta_slow", bs), ("mscale", ms), ("mscale_all_dim", msa),
                     ("attention_factor", af)):
            if v is not None:
                p[k] = v
        return p

    def yparams(D, rot, inter, p):
        return rope_params(D, rot, inter, p["rope_theta"], p["factor"], p["original_max_position_embeddings"],
                           p.get("beta_fast", 0), p.get("beta_slow", 0), p.get("mscale", 0),
                           p.get("mscale_all_dim", 0), p.get("attention_factor", 0))

    def llama_yarn(name, p, D=64):
        cfg = LlamaConfig(hidden_size=2 * D, num_attention_heads=2, head_dim=D, rope_parameters=p,
                          max_position_embeddings=int(p["factor"] * p["original_max_position_embeddings"]))
        rope_case(name, yparams(D, D, 0, p), llama.LlamaRotaryEmbedding(cfg),
                  hf_apply(llama.apply_rotary_pos_emb), randn(T, H, D), ypos)

    # plain YaRN: attention factor 0.1 ln(4) + 1, defaults for beta.
    llama_yarn("rope_yarn", yarn(10000.0, 4.0, 2048))
    # DeepSeek-V3: factor 40, orig 4096, beta 32/1, mscale = mscale_all_dim = 1 (factor 1), interleaved.
    inter_case("rope_yarn_dsv3", yparams(64, 64, 1, yarn(10000.0, 40.0, 4096, 32, 1, 1.0, 1.0)),
               dsv3_cfg(yarn(10000.0, 40.0, 4096, 32, 1, 1.0, 1.0)), ypos, randn(T, H, 64))
    # mscale != mscale_all_dim (DeepSeek-V2 style numbers), split-half.
    llama_yarn("rope_yarn_mscale", yarn(10000.0, 40.0, 4096, 32, 1, 1.0, 0.707))
    # an explicit attention_factor wins over mscale; orig 65536 puts the beta_slow dim (33) past the
    # last pair (31): HF clamps it to dim - 1, not dim/2 - 1, so the ramp never reaches 1.
    llama_yarn("rope_yarn_attn", yarn(10000.0, 8.0, 65536, 32, 1, 1.0, 0.5, 1.25))
    # a tiny original context: both correction dims clamp to 0 and HF's +0.001 guard kicks in.
    llama_yarn("rope_yarn_guard", yarn(10000.0, 2.0, 64, 32, 12))


# ---------------------------------------------------------------------------------------------


def gen_rope_scaled():
    """6. llama3 (Llama 3.1+) and linear scaling through LlamaRotaryEmbedding: Llama 3.1's own numbers
    (theta 500000, head 128, factor 8 over 8192) with positions past the original context, a small head
    whose blended band covers two pairs (tests/data/llama3_rope's setting), and linear factor 4. Its own
    generator, so the other cases' data stay as they were."""
    g = torch.Generator().manual_seed(31)
    pos = [0, 1, 7, 63, 4095, 8192, 65537, 131071]
    T, H = len(pos), 2

    def case(name, D, p, scaling):
        cfg = LlamaConfig(hidden_size=2 * D, num_attention_heads=2, head_dim=D, rope_parameters=p,
                          max_position_embeddings=131072)
        params = rope_params(D, D, 0, p["rope_theta"], p["factor"], p.get("original_max_position_embeddings", 0),
                             T=T, H=H)
        rope_case(name, params, llama.LlamaRotaryEmbedding(cfg), hf_apply(llama.apply_rotary_pos_emb),
                  torch.randn(T, H, D, generator=g), pos, [("scaling", scaling, np.float64)])

    l31 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    case("rope_llama3", 128, l31, [2, 1.0, 4.0])
    small = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
             "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    case("rope_llama3_small", 16, small, [2, 1.0, 4.0])
    case("rope_linear", 64, {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, [3, 0, 0])


def gen_dense():
    V, C, ids = 10, 16, [3, 0, 9, 3, 7]
    tab = randn(V, C)
    write("embedding", [("table", tab, np.float32), ("ids", ids, np.int32),
                        ("y", F.embedding(torch.tensor(ids), tab), np.float32)])

    T, K, N = 3, 40, 24
    x, w, b = randn(T, K), randn(N, K, s=0.2), randn(N)
    write("linear", [("x", x, np.float32), ("w", w, np.float32), ("b", b, np.float32),
                     ("y", F.linear(x, w, b), np.float32), ("y_nobias", F.linear(x, w), np.float32)])

    B, M, K, N = 3, 4, 33, 5
    a, bb = randn(B, M, K), randn(B, K, N)
    write("matmul", [("a", a, np.float32), ("b", bb, np.float32), ("y", torch.bmm(a, bb), np.float32)])


def gen_elementwise():
    n = 256
    x = torch.cat([rnd(n - 8, lo=-8, hi=8), torch.tensor([-30.0, -12.5, -1e-3, 1e-6, 0.5, 3.0, 12.5, 30.0])])
    g, u = rnd(n, lo=-6, hi=6), randn(n)
    a, b = randn(4, 64), torch.cat([rnd(32, lo=0.5, hi=2.0), rnd(32, lo=-2.0, hi=-0.5)])
    s = -0.8125
    write("elementwise", [
        ("x", x, np.float32), ("gate", g, np.float32), ("up", u, np.float32),
        ("gelu", F.gelu(x), np.float32), ("gelu_tanh", F.gelu(x, approximate="tanh"), np.float32),
        ("silu", F.silu(x), np.float32), ("sigmoid", torch.sigmoid(x), np.float32),
        ("swiglu", F.silu(g) * u, np.float32), ("s", [s], np.float32), ("scale", x * s, np.float32),
        ("a", a, np.float32), ("b", b, np.float32),
        ("add", a + b, np.float32), ("sub", a - b, np.float32), ("mul", a * b, np.float32),
        ("div", a / b, np.float32)])


def gen_norms():
    R, N = 4, 100
    x = randn(R, N, s=4.0)
    x[2] += 1000.0  # softmax must subtract the max ...
    x[3] *= 100.0  # ... and not just any element: exp(x - x[0]) would overflow here
    write("softmax", [("x", x, np.float32), ("y", torch.softmax(x, dim=-1), np.float32)])

    R, N, eps = 3, 96, 1e-6
    x = randn(R, N, s=3.0) + 0.5
    x[1] *= 1e-3  # mean square near eps: eps must sit inside the root
    norm = llama.LlamaRMSNorm(N, eps=eps)
    with torch.no_grad():
        norm.weight.copy_(rnd(N, lo=0.5, hi=1.5))
    plain = llama.LlamaRMSNorm(N, eps=eps)  # weight = ones, i.e. no scale
    write("rmsnorm", [("x", x, np.float32), ("w", norm.weight, np.float32), ("eps", [eps], np.float32),
                      ("y", norm(x), np.float32), ("y_now", plain(x), np.float32)])

    eps = 1e-5
    x = randn(R, N, s=2.0) + 3.0
    x[1] = randn(N, s=2e-3)  # variance near eps (mean near 0: no float32 cancellation in torch)
    w, b = rnd(N, lo=0.5, hi=1.5), randn(N, s=0.3)
    write("layernorm", [("x", x, np.float32), ("w", w, np.float32), ("b", b, np.float32),
                        ("eps", [eps], np.float32), ("y", F.layer_norm(x, (N,), w, b, eps), np.float32),
                        ("y_now", F.layer_norm(x, (N,), None, None, eps), np.float32)])


def gen_attention():
    # GQA H=4 over G=2; Dk != Dv so that a mix-up shows; full causal sequence through SDPA.
    T, H, G, Dk, Dv, S, scale = 7, 4, 2, 16, 8, 10, 0.3
    q, k, v = randn(T, H, Dk, s=1.5), randn(T, G, Dk, s=1.5), randn(T, G, Dv)
    y = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                       v.transpose(0, 1)[None], is_causal=True, scale=scale,
                                       enable_gqa=True)[0].transpose(0, 1).contiguous()
    write("attention", [("dims", [T, H, G, Dk, Dv, S], np.int32), ("scale", [scale], np.float32),
                        ("q", q, np.float32), ("k", k, np.float32), ("v", v, np.float32), ("y", y, np.float32)])


def gen_select():
    # Values on a coarse grid so that ties are common; one row with NaN and -inf.
    R, N = 4, 40
    x = torch.round(rnd(R, N, lo=-3, hi=3) * 2) / 2
    x[3, 5], x[3, 20] = float("nan"), float("-inf")
    x[1, :] = x[1, 0]  # a row of one value: order by index
    order = torch.sort(x, dim=-1, descending=True, stable=True).indices
    recs = [("x", x, np.float32)]
    for k in (6, N):
        tk = torch.topk(x, k, dim=-1)
        assert torch.equal(torch.nan_to_num(tk.values), torch.nan_to_num(torch.gather(x, 1, order[:, :k])))
        recs.append((f"top{k}", order[:, :k], np.int32))
    write("topk", recs)

    R, N = 5, 33
    x = torch.round(rnd(R, N, lo=-2, hi=2))
    x[2, :] = 1.0
    x[4, 7], x[4, 9] = float("nan"), float("nan")
    write("argmax", [("x", x, np.float32), ("y", torch.argmax(x, dim=-1), np.int32)])

    recs = []
    for i, (shape, perm) in enumerate((((5, 7), (1, 0)), ((2, 3, 4), (2, 0, 1)), ((2, 3, 4, 5), (0, 2, 3, 1)),
                                       ((2, 3, 4, 5), (3, 1, 0, 2)))):
        x = randn(*shape)
        n = x.numel()
        recs += [(f"shape{i}", shape, np.int32), (f"perm{i}", perm, np.int32), (f"x{i}", x, np.float32),
                 (f"y{i}", x.permute(*perm), np.float32),
                 (f"yi{i}", torch.arange(n, dtype=torch.int32).reshape(shape).permute(*perm), np.int32)]
    write("permute", recs)


def f32_from_bits(b):
    return torch.from_numpy(np.asarray(b, dtype=np.uint32).view(np.float32).copy())


def gen_convert():
    def u16(t):
        return t.view(torch.int16).numpy().view(np.uint16)

    # half/bf16 -> float: edge patterns plus random ones.
    edges16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x0002, 0x03ff, 0x83ff, 0x0400, 0x0401, 0x3c00, 0xbc00, 0x3555,
               0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7c01, 0x7e00, 0xfe00, 0x7fff, 0xffff, 0x7d55]
    rng = np.random.default_rng(7)
    h = np.concatenate([np.array(edges16, dtype=np.uint16), rng.integers(0, 65536, 1000).astype(np.uint16)])
    hf = torch.from_numpy(h.view(np.int16).copy()).view(torch.float16).float()
    bf = torch.from_numpy(h.view(np.int16).copy()).view(torch.bfloat16).float()

    # float -> half: edges, ties (subnormal, normal, overflow) and random values over the half range.
    m = 2.0 ** -24
    ties = [0.0, -0.0, m, -m, m / 2, 3 * m / 2, 5 * m / 2, m / 4, 1.5 * m / 2, 1023.5 * m, 1024 * m - m / 4,
            2.0 ** -14, 2.0 ** -14 * (1 - 2 ** -12), 1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -11 + 2 ** -20,
            -(1 + 3 * 2 ** -11), 2049.0, 2051.0, 65504.0, 65519.0, 65519.996, 65520.0, -65520.0, 65536.0, 1e30,
            float("inf"), float("-inf"), 1e-45, -1e-40, 0.1, 1 / 3]
    vals = np.concatenate([np.array(ties, dtype=np.float32),
                           np.ldexp(rng.uniform(1, 2, 1200), rng.integers(-27, 17, 1200)).astype(np.float32)
                           * rng.choice([-1, 1], 1200).astype(np.float32)])
    nans = np.array([0x7fc00000, 0xffc00000, 0x7f800001, 0x7fa00000, 0x7f802000], dtype=np.uint32)
    rbits = np.concatenate([vals.view(np.uint32), nans, rng.integers(0, 2 ** 32, 500, dtype=np.uint64).astype(np.uint32)])
    f = f32_from_bits(rbits)

    # float -> bf16: ties at 1 + 2^-8 etc., overflow at the top, random bit patterns.
    bties = [1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 1 + 2 ** -8 + 2 ** -20, 3.4028235e38, 3.3961e38,
             1e-40, 2.0 ** -133 * 3, 0.0, -0.0, float("inf"), float("-inf")]
    bbits = np.concatenate([np.array(bties, dtype=np.float32).view(np.uint32), nans,
                            rng.integers(0, 2 ** 32, 1000, dtype=np.uint64).astype(np.uint32)])
    fb = f32_from_bits(bbits)

    write("convert", [
        ("h", h, np.uint16), ("h_f32", hf, np.float32), ("h_bf32", bf, np.float32),
        ("f", f, np.float32), ("f_f16", u16(f.half()), np.uint16),
        ("fb", fb, np.float32), ("fb_bf16", u16(fb.bfloat16()), np.uint16)])


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    gen_rope()
    gen_dense()
    gen_elementwise()
    gen_norms()
    gen_attention()
    gen_select()
    gen_convert()
    gen_rope_scaled()
