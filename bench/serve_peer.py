#!/usr/bin/env python3
"""bench/serve_peer.py — the peer of bench/serve_load.py (issue 49): Hugging Face transformers on the same
model shape (random bf16 weights, transformers' own init) serving the same requests in-process, with the
same numbers printed.

Which transformers API serves them depends on the installed version, and the output says which:
  cb        ContinuousBatchingManager (model.init_continuous_batching): requests join and leave a running
            batch; each client thread adds its request (streaming) and a dispatcher thread routes the
            manager's outputs, so TTFT and TPOT are timed per request as the HTTP client times them.
  batch     model.generate_batch (continuous batching, no streaming): every request of a level at once;
            TTFT and TPOT from the per-token timestamps it records (record_timestamps).
  generate  model.generate on static batches of `clients` requests (left-padded, the longest output for
            all; the closest a version without continuous batching comes): a streamer times each step.
The requests are serve_load.make_workload's for the same --seed, lengths and --vocab; no HTTP is
involved here, which favours the peer by the server's HTTP and JSON cost.

usage: serve_peer.py --config models/configs/X.json [--layers N] [--clients 1,8,32,64]
                     [--requests-per-client 4] [--prompt uniform:64:256] [--output uniform:64:128]
                     [--vocab 32000] [--rate inf] [--seed 0] [--device cuda] [--mode auto|cb|batch|generate]
"""
import argparse
import inspect
import json
import math
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_load import make_workload, print_summary, summary  # noqa: E402


def build_model(a):
    """The model of the config with random weights on the device, as bench/peer_hf.py builds it."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    with open(a.config) as f:
        raw = json.load(f)
    kw = {k: v for k, v in raw.items() if not k.startswith("_")}
    model_type = kw.pop("model_type")
    if a.layers:
        kw["num_hidden_layers"] = a.layers
        for k in ("mlp_layer_types", "layer_types", "indexer_types"):
            kw.pop(k, None)
    kw["dtype"] = "bfloat16"
    cfg = AutoConfig.for_model(model_type, **kw)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    with dev:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    print(f"peer: transformers {transformers.__version__}, torch {torch.__version__}, {type(cfg).__name__} "
          f"({model_type}), {cfg.num_hidden_layers} layers, vocab {cfg.vocab_size}, random weights (transformers "
          f"init), bf16, {a.device}", flush=True)
    return model, cfg


def pick_mode(model, want):
    """The API to serve with: the one asked for, else the best this transformers has."""
    have = {"cb": hasattr(model, "init_continuous_batching"), "batch": hasattr(model, "generate_batch"),
            "generate": True}
    if want != "auto":
        if not have[want]:
            raise SystemExit(f"serve_peer: --mode {want}: this transformers has no such API")
        return want
    return "cb" if have["cb"] else "batch" if have["batch"] else "generate"


def kwargs_for(fn, **kw):
    """kw less what fn does not take (the APIs differ between transformers versions)."""
    try:
        ps = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return kw
    if any(p.kind == p.VAR_KEYWORD for p in ps.values()):
        return kw
    return {k: v for k, v in kw.items() if k in ps}


def gen_config(cfg, max_new, eos=-1):
    from transformers import GenerationConfig
    # eos -1 (continuous batching) or None with min_new_tokens (generate): no request ends early, so every
    # one makes its full output as serve_load asks (ignore_eos)
    return GenerationConfig(max_new_tokens=max_new, do_sample=False, eos_token_id=eos, pad_token_id=0)


class PeerDead(Exception):
    """transformers' continuous-batching manager stopped: its generation thread died (its error is on stderr)."""


class CB:
    """A started ContinuousBatchingManager with a dispatcher thread that hands each request its outputs."""

    def __init__(self, model, cfg, max_new):
        self.m = model.init_continuous_batching(**kwargs_for(model.init_continuous_batching,
                                                             generation_config=gen_config(cfg, max_new)))
        if hasattr(self.m, "warmup") and not getattr(self.m, "warmed_up", True):
            self.m.warmup()
        self.m.start()
        self.lock = threading.Lock()
        self.waiting = {}
        self.stop = False
        self.th = threading.Thread(target=self.route, daemon=True)
        self.th.start()
        self.n = 0

    def route(self):
        while not self.stop:
            out = self.m.get_result(timeout=0.05)
            if out is None:
                continue
            t = time.perf_counter()
            with self.lock:
                st = self.waiting.get(out.request_id)
            if st is None:
                continue
            k = len(out.generated_tokens)
            if k and st["t_first"] is None:
                st["t_first"] = t
            st["t_last"], st["out"] = t, k
            fin = out.is_finished() if hasattr(out, "is_finished") else str(out.status).endswith("FINISHED")
            if getattr(out, "error", None):
                st["err"] = str(out.error)[:200]
                fin = True
            if fin:
                st["done"].set()

    def one(self, prompt, n):
        with self.lock:
            self.n += 1
            rid = f"peer-{self.n}"
            st = {"t_first": None, "t_last": None, "out": 0, "err": None, "done": threading.Event()}
            self.waiting[rid] = st
        t0 = time.perf_counter()
        self.m.add_request(**kwargs_for(self.m.add_request, input_ids=prompt, request_id=rid, max_new_tokens=n,
                                        streaming=True))
        try:
            t_end = t0 + 600
            while not st["done"].wait(0.5):
                if not self.alive():
                    raise PeerDead("transformers' continuous batching stopped (its generation thread died; "
                                   "the error is in the peer's stderr)")
                if time.perf_counter() > t_end:
                    st["err"] = "no answer in 600 s"
                    break
        finally:
            with self.lock:
                del self.waiting[rid]
        ok = st["err"] is None and st["t_first"] is not None
        return {"ok": ok, "out": st["out"], "err": st["err"], "ttft": st["t_first"] - t0 if ok else None,
                "tpot": (st["t_last"] - st["t_first"]) / (st["out"] - 1) if ok and st["out"] > 1 else None}

    def alive(self):
        running = getattr(self.m, "is_running", None)
        if callable(running):
            return bool(running())
        th = getattr(self.m, "_generation_thread", None)  # older managers: no is_running
        return th.is_alive() if isinstance(th, threading.Thread) else True

    def close(self):
        self.stop = True
        self.th.join()
        self.m.stop(**kwargs_for(self.m.stop, block=True, timeout=10))


def run_threads(a, clients, reqs, gaps, one):
    """clients threads over reqs (closed loop, or arrivals at --rate), each request through one(p, n)."""
    rate = float(a.rate)
    at, t = [], 0.0
    for g in gaps:
        t += g / rate if rate != math.inf else 0
        at.append(t)
    nxt, lock, results = [0], threading.Lock(), [None] * len(reqs)
    start = time.perf_counter()

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(reqs):
                return
            w = start + at[i] - time.perf_counter()
            if w > 0:
                time.sleep(w)
            try:
                results[i] = one(*reqs[i])
            except Exception as ex:  # a failed request is counted, not fatal
                results[i] = {"ok": False, "out": 0, "ttft": None, "tpot": None, "err": f"{type(ex).__name__}: {ex}"}

    th = [threading.Thread(target=worker) for _ in range(clients)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    return results, time.perf_counter() - start


def run_batch(model, cfg, reqs):
    """generate_batch over all of reqs at once: per-request times from its recorded timestamps, from each
    request's creation in the manager (so the manager's own set-up and warm-up of each call is not timed)."""
    max_new = max(n for _, n in reqs)
    t0 = time.perf_counter()
    outs = model.generate_batch(**kwargs_for(model.generate_batch, inputs=[p for p, _ in reqs],
                                             generation_config=gen_config(cfg, max_new), record_timestamps=True,
                                             progress_bar=False, max_new_tokens=max_new))
    results, first, last = [], None, t0
    for o in outs.values():
        ts = getattr(o, "timestamps", None) or []
        c = getattr(o, "created_time", t0)
        k = len(o.generated_tokens)
        ok = not getattr(o, "error", None) and k > 0
        first = c if first is None else min(first, c)
        last = max([last] + ts)
        results.append({"ok": ok, "out": k, "err": getattr(o, "error", None),
                        "ttft": ts[0] - c if ok and ts else None,
                        "tpot": (ts[-1] - ts[0]) / (k - 1) if ok and len(ts) > 1 else None})
    return results, last - (first if first is not None else t0)


def run_generate(model, cfg, reqs, clients, device):
    """Static batches of `clients` requests through generate (left-padded); a streamer times each step."""
    import torch
    from transformers.generation.streamers import BaseStreamer

    class Clock(BaseStreamer):
        def __init__(self):
            self.t = []

        def put(self, value):
            self.t.append(time.perf_counter())

        def end(self):
            pass

    results = []
    t_all = time.perf_counter()
    for b in range(0, len(reqs), clients):
        group = reqs[b:b + clients]
        L = max(len(p) for p, _ in group)
        ids = torch.tensor([[0] * (L - len(p)) + p for p, _ in group], device=device)
        mask = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p, _ in group], device=device)
        new = max(n for _, n in group)
        clk = Clock()
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=mask, generation_config=gen_config(cfg, new, None), min_new_tokens=new,
                           streamer=clk)
        steps = clk.t[1:]  # put() first gets the prompt, then each step's tokens
        for _, n in group:
            ok = len(steps) >= n
            results.append({"ok": ok, "out": n if ok else 0, "err": None if ok else "short generation",
                            "ttft": steps[0] - t0 if ok else None,
                            "tpot": (steps[n - 1] - steps[0]) / (n - 1) if ok and n > 1 else None})
    return results, time.perf_counter() - t_all


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="a config.json (models/configs/)")
    ap.add_argument("--layers", type=int, default=0, help="keep the first N layers")
    ap.add_argument("--clients", default="1,8,32,64")
    ap.add_argument("--requests-per-client", type=int, default=4)
    ap.add_argument("--prompt", default="uniform:64:256")
    ap.add_argument("--output", default="uniform:64:128")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--rate", default="inf")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default="cuda", help="cuda (the benchmark); cpu only checks the script")
    ap.add_argument("--mode", default="auto", choices=["auto", "cb", "batch", "generate"])
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    model, cfg = build_model(a)
    if a.vocab > cfg.vocab_size:
        raise SystemExit(f"serve_peer: --vocab {a.vocab} is more than the model's {cfg.vocab_size}")
    mode = pick_mode(model, a.mode)
    levels = [int(x) for x in a.clients.split(",") if x]
    print(f"peer_mode: {mode} ({'ContinuousBatchingManager via init_continuous_batching' if mode == 'cb' else 'generate_batch' if mode == 'batch' else 'static batched generate'})",
          flush=True)
    # the longest output any level asks for sizes the manager's generation config
    max_new = max(n for c in levels for _, n in make_workload(a.seed + c, c * a.requests_per_client, a.prompt, a.output, a.vocab)[0])
    wreqs, _ = make_workload(a.seed - 1, a.warmup, a.prompt, a.output, a.vocab)
    cb = CB(model, cfg, max_new) if mode == "cb" else None
    t = time.perf_counter()
    if cb:
        try:
            for p, n in wreqs:
                cb.one(p, n)
        except PeerDead as ex:
            # transformers 5.17 on Glm4MoeLite: its paged cache rows are 64 wide where the layer writes
            # 256 (an index_copy_ error in the cache update): say so and serve the peer's best other way
            cb.close()
            cb, mode = None, "generate"
            print(f"peer_mode: cb failed in the warm-up ({ex}); falling back to {mode}", flush=True)
            t = time.perf_counter()
    for p, n in wreqs if not cb else []:  # compile and capture before timing
        if mode == "batch":
            run_batch(model, cfg, [(p, n)])
        else:
            run_generate(model, cfg, [(p, n)], 1, a.device)
    print(f"peer_warmup_s: {time.perf_counter() - t:.1f}", flush=True)
    name = f"peer-{mode}"
    for c in levels:
        reqs, gaps = make_workload(a.seed + c, c * a.requests_per_client, a.prompt, a.output, a.vocab)
        if cb:
            results, wall = run_threads(a, c, reqs, gaps, cb.one)
        elif mode == "batch":
            results, wall = run_batch(model, cfg, reqs)
        else:
            results, wall = run_generate(model, cfg, reqs, c, a.device)
        s = summary(name, c, results, wall)
        s["rate"] = "closed loop" if float(a.rate) == math.inf else f"{float(a.rate):g}/s"
        if mode != "cb":
            s["rate"] += " (all at once)" if mode == "batch" else " (lockstep batches)"
        errs = [r["err"] for r in results if not r["ok"]]
        print_summary(s, f"  ({s['rate']})" + (f"  first error: {errs[0]}" if errs else ""))
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(s) + "\n")
    if cb:
        cb.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
