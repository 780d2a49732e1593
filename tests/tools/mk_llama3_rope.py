#!/usr/bin/env python3
"""
tests/tools/mk_llama3_rope.py — writes tests/data/llama3_rope/, a tiny random Llama with the "llama3"
rotary scaling of Llama 3.1 / 3.2 / 3.3, saved by Hugging Face transformers with its own logits, in the
layout of ../shared/fixtures/hf/<arch>/ (config.json, model.safetensors in float32, reference.json with
the prompt and the greedy continuation, prefill_logits.f32 and decode_logits.f32) so that
build/tools/cmplogits and build/tools/mkgguf read it like the shared fixtures; linear/ holds the same
model's config.json, reference.json and logits with rope_type "linear" (factor 4) instead.
rope_freqs.f32 is the rope_freqs.weight llama.cpp's converter would write for config.json (8 floats).

The scaling is set so that it matters at this size: head_dim 16 has 8 frequency pairs; with
original_max_position_embeddings 64, factor 8, low_freq_factor 1 and high_freq_factor 4 the pairs whose
wavelength is past 64 positions (5 of them) are divided by 8 and the two between 16 and 64 are blended,
so only the fastest pair keeps its plain frequency. The 48-token prompt and 24 generated tokens reach
position 71, past the original context. tests/llama3_rope.sh checks that plain rotary misses these
logits by far.

original_max_position_embeddings is also written at the top level of config.json: llama.cpp's
converter (LlamaModel.generate_extra_tensors) reads it from there, defaulting to 8192 (Llama 3.1's
value, which its config.json only gives inside rope_scaling), when it computes rope_freqs.weight;
tests/tools/mkgguf.c does the same.

Run by hand from the repo root when the fixture must change (the tests only read the files):

    python3 tests/tools/mk_llama3_rope.py
"""
import json
import math
import os

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "llama3_rope")
ORIG_CTX = 64
N_PROMPT, N_GEN = 48, 24


def redraw(model, seed):
    """Fan-in scaled weights, norms 1 + 0.1·N(0,1), so that every weight shows in the logits."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))


def llamacpp_rope_freqs(cfg_json):
    """rope_freqs.weight as llama.cpp's converter (LlamaModel.generate_extra_tensors) derives it from a
    config.json: torch float32 frequencies of the whole head, one divisor each, orig from the top level."""
    rp = cfg_json["rope_parameters"]
    dim = cfg_json["head_dim"]
    freqs = 1.0 / (rp["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low, high = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
    orig = cfg_json.get("original_max_position_embeddings", 8192)
    divs = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < orig / high:
            divs.append(1)
        elif wavelen > orig / low:
            divs.append(factor)
        else:
            s = (orig / wavelen - low) / (high - low)
            divs.append(1 / ((1 - s) / factor + s))
    return torch.tensor(divs, dtype=torch.float32)


def config(rope, **extra):
    return LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                       rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                       pad_token_id=0, rope_parameters=rope, **extra)


def reference(model, out, prompt):
    """The fixture's reference.json and logits files in out, from model's prefill and greedy decode."""
    with torch.no_grad():
        pre = model(prompt).logits[0]
        res = model.generate(prompt, max_new_tokens=N_GEN, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, eos_token_id=None, pad_token_id=0)
    gen = res.sequences[0, N_PROMPT:].tolist()
    dec = torch.stack([l[0] for l in res.logits])
    for name, t in (("prefill_logits.f32", pre), ("decode_logits.f32", dec)):
        with open(os.path.join(out, name), "wb") as f:
            f.write(t.detach().to(torch.float32).contiguous().numpy().tobytes())
    ref = dict(model_type="llama", prompt=prompt[0].tolist(), greedy=gen, vocab_size=model.config.vocab_size,
               prefill_logits=dict(file="prefill_logits.f32", shape=list(pre.shape), dtype="float32"),
               decode_logits=dict(file="decode_logits.f32", shape=list(dec.shape), dtype="float32",
                                  note="logits[i] predicts greedy[i]; computed with the KV cache"),
               inv_freq=model.model.rotary_emb.inv_freq.tolist(), transformers=transformers.__version__,
               torch=torch.__version__)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    return gen


def main():
    os.makedirs(os.path.join(OUT, "linear"), exist_ok=True)
    cfg = config({"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": ORIG_CTX},
                 original_max_position_embeddings=ORIG_CTX)
    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(cfg, dtype=torch.float32, attn_implementation="eager")
    redraw(model, 4321)
    model.eval()
    inv = model.model.rotary_emb.inv_freq
    plain = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.int64).float() / 16))
    changed = int((inv != plain).sum())
    assert changed >= 6, f"the llama3 scaling changes only {changed} of 8 frequencies"
    model.save_pretrained(OUT, safe_serialization=True)
    with open(os.path.join(OUT, "config.json")) as f:
        saved = json.load(f)
    assert saved.get("original_max_position_embeddings") == ORIG_CTX, "top-level key not saved"
    assert saved["rope_parameters"]["rope_type"] == "llama3", saved.get("rope_parameters")
    with open(os.path.join(OUT, "rope_freqs.f32"), "wb") as f:
        f.write(llamacpp_rope_freqs(saved).numpy().tobytes())
    g = torch.Generator().manual_seed(11)
    prompt = torch.randint(3, cfg.vocab_size, (1, N_PROMPT), generator=g)
    gen = reference(model, OUT, prompt)
    print(f"{OUT}: {sum(p.numel() for p in model.parameters())} params, {changed}/8 frequencies scaled, "
          f"greedy {gen}")

    # linear/: the same weights with linear scaling (factor 4); its config.json, reference.json and logits
    # only (tests/llama3_rope.sh puts the parent's model.safetensors beside them).
    lin = LlamaForCausalLM._from_config(config({"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}),
                                        dtype=torch.float32, attn_implementation="eager")
    lin.load_state_dict(model.state_dict())
    lin.eval()
    lin.config.save_pretrained(os.path.join(OUT, "linear"))
    print(f"{OUT}/linear: greedy {reference(lin, os.path.join(OUT, 'linear'), prompt)}")


if __name__ == "__main__":
    main()
