#!/usr/bin/env python3
"""tests/gpu/hf_bf16.py — the peer's bf16 error on the same fixtures.

For each fixture in FIX (default build/fixtures), Hugging Face transformers itself runs the model in
bfloat16 on the GPU (weights and activations, as glmc --dtype bf16 does), teacher-forced over the prompt
and the fixture's greedy tokens, and the logits are compared with the fixture's float32 logits by the
same measure glmc is held to (relative L2 over all rows: prefill rows, then decode rows). This tells
whether the bf16 tolerance of 2e-2 is reachable at all on these tiny random models; the third column
rounds only the weights to bf16 and computes in float32, about the least error an engine with bf16 weights can show.
Usage: python3 tests/gpu/hf_bf16.py [FIX]; prints one line per fixture.
"""
import json
import os
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM

FIX = sys.argv[1] if len(sys.argv) > 1 else "build/fixtures"
ARCHS = ["llama", "qwen3", "qwen3_moe", "glm4_moe", "deepseek_v3", "glm4_moe_lite", "glm_moe_dsa"]


def rel_l2(a, b):
    return float(np.linalg.norm((a - b).ravel()) / np.linalg.norm(b.ravel()))


for arch in ARCHS:
    d = os.path.join(FIX, arch)
    ref = json.load(open(os.path.join(d, "reference.json")))
    prompt, greedy = ref["prompt"], ref["greedy"]
    cfg = json.load(open(os.path.join(d, "config.json")))
    V = cfg["vocab_size"]
    pre = np.fromfile(os.path.join(d, "prefill_logits.f32"), dtype=np.float32).reshape(-1, V)
    dec = np.fromfile(os.path.join(d, "decode_logits.f32"), dtype=np.float32).reshape(-1, V)
    ids = torch.tensor([prompt + greedy[:-1]], device="cuda")
    out = {}
    # f32; bf16 (weights and activations); bf16w: only the weights rounded to bf16, computed in f32 —
    # about the least error an engine with bf16 weights can show, whatever its activations
    for name, dt in (("f32", torch.float32), ("bf16", torch.bfloat16), ("bf16w", torch.float32)):
        m = AutoModelForCausalLM.from_pretrained(d, dtype=dt, attn_implementation="eager").cuda().eval()
        with torch.no_grad():
            if name == "bf16w":
                for p in m.parameters():
                    p.copy_(p.to(torch.bfloat16).float())
            lg = m(ids).logits[0].float().cpu().numpy()
        n = len(prompt)
        out[name] = (rel_l2(lg[:n], pre), rel_l2(lg[n - 1:n - 1 + len(dec)], dec))
        del m
    print(f"hf {arch:14s} f32 prefill {out['f32'][0]:.3g} decode {out['f32'][1]:.3g} | "
          f"bf16 prefill {out['bf16'][0]:.3g} decode {out['bf16'][1]:.3g} | "
          f"bf16 weights in f32 prefill {out['bf16w'][0]:.3g} decode {out['bf16w'][1]:.3g}", flush=True)
