#!/usr/bin/env python3
"""bench/peer_hf.py — the peer of glmrun --bench (issue 8): Hugging Face transformers on the same model
shape, random bf16 weights on the GPU, in its fastest decode mode: generate(..., cache_implementation=
"static"), which compiles the decode step itself and replays it with CUDA graphs (forward is deliberately
not wrapped in torch.compile here: the issue records that this combination fails).

Decode is timed apart from prefill with a streamer: generate() hands it the prompt first, then every new
token as it is sampled (each step ends in a host copy of the token, so the timestamps follow the steps);
prefill is the gap between the prompt and the first token, decode the gaps between later tokens. A first
generate of the same lengths compiles and is not timed.

usage: peer_hf.py --config models/configs/X.json [--layers N] [--prompt 128] [--new 64] [--runs 2]
prints "key: value" lines (peer_ms_per_token_median is what bench/decode.sh puts in its table).
No internet: the model is built from the config, its weights are random (transformers' own init).
"""
import argparse
import json
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="a config.json (models/configs/)")
    ap.add_argument("--layers", type=int, default=0, help="keep the first N layers (the GLM-5 slice)")
    ap.add_argument("--prompt", type=int, default=128, help="random prompt tokens")
    ap.add_argument("--new", type=int, default=64, help="tokens generated per timed run")
    ap.add_argument("--runs", type=int, default=2, help="timed runs after the compiling one")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda", help="cuda (the benchmark); cpu only checks the script")
    a = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.generation.streamers import BaseStreamer

    with open(a.config) as f:
        raw = json.load(f)
    kw = {k: v for k, v in raw.items() if not k.startswith("_")}
    model_type = kw.pop("model_type")
    if a.layers:
        kw["num_hidden_layers"] = a.layers
        for k in ("mlp_layer_types", "layer_types", "indexer_types"):
            kw.pop(k, None)  # derived again from the layer count
    kw["dtype"] = "bfloat16"
    cfg = AutoConfig.for_model(model_type, **kw)
    print(f"peer: transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{type(cfg).__name__} ({model_type}), {cfg.num_hidden_layers} layers")
    print(f"peer_weights: random (transformers init), bf16")
    sys.stdout.flush()

    t0 = time.perf_counter()
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    with dev:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    sync()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"peer_init_s: {time.perf_counter() - t0:.2f}")
    print(f"peer_params: {n_params}")
    print(f"peer_weight_bytes: {sum(p.numel() * p.element_size() for p in model.parameters())}")
    print(f"peer_attn_implementation: {getattr(model.config, '_attn_implementation', '?')}")
    sys.stdout.flush()

    class Stamps(BaseStreamer):
        """Time of each put(): the prompt first, then one per generated token."""

        def __init__(self):
            self.t = []

        def put(self, value):
            self.t.append(time.perf_counter())

        def end(self):
            pass

    g = torch.Generator(device=dev).manual_seed(a.seed)
    ids = torch.randint(0, cfg.vocab_size, (1, a.prompt), device=dev, generator=g)
    mask = torch.ones_like(ids)
    gen = dict(max_new_tokens=a.new, min_new_tokens=a.new, do_sample=False, cache_implementation="static",
               pad_token_id=0, attention_mask=mask)

    def run():
        s = Stamps()
        with torch.inference_mode():
            out = model.generate(ids, streamer=s, **gen)
        sync()
        if out.shape[1] != a.prompt + a.new:
            raise RuntimeError(f"generated {out.shape[1] - a.prompt} tokens, asked for {a.new}")
        return s.t

    t0 = time.perf_counter()
    run()  # compiles the decode step (not timed)
    print(f"peer_compile_s: {time.perf_counter() - t0:.2f} (the first generate, compiling included)")
    sys.stdout.flush()
    steps, prefill = [], []
    for _ in range(a.runs):
        t = run()
        if len(t) != a.new + 1:
            raise RuntimeError(f"the streamer saw {len(t)} puts, expected {a.new + 1}")
        prefill.append(t[1] - t[0])
        steps += [t[i + 1] - t[i] for i in range(1, len(t) - 1)]
    med = statistics.median(steps) * 1e3
    print(f"peer_prompt_tokens: {a.prompt}")
    print(f"peer_decode_steps: {len(steps)} ({a.runs} runs of {a.new} tokens)")
    print(f"peer_prefill_ms: {statistics.median(prefill) * 1e3:.3f} (prompt to first token, sampling included)")
    print(f"peer_ms_per_token_median: {med:.4f}")
    print(f"peer_ms_per_token_mean: {statistics.mean(steps) * 1e3:.4f}")
    print(f"peer_ms_per_token_min: {min(steps) * 1e3:.4f}")
    print(f"peer_tok_s: {1e3 / med:.2f}")
    if dev.type == "cuda":
        print(f"peer_max_memory_gib: {torch.cuda.max_memory_allocated() / 2**30:.1f}")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # one line the table can show
        msg = " ".join(str(e).split())[:300]
        print(f"peer_error: {type(e).__name__}: {msg}")
        sys.exit(1)
