#!/usr/bin/env python3
"""bench/serve_load.py — a load generator for `glmrun serve` (issue 49): N concurrent clients send
/v1/completions requests of token-id prompts, streamed, and the client side measures each request.

The workload is fixed by --seed: prompt and output lengths from the named distributions, prompt ids
uniform in [0, --vocab). Each level of --clients gets its own requests (seed + level) and runs either
closed loop (each client sends its next request when the last one ends: --rate inf, the default) or
open loop at a named rate (--rate R: Poisson arrivals of R requests/s, at most N in flight). Every
request asks for exactly its output length (ignore_eos) and counts the tokens it got from the
stream's token_ids (glmrun's return_token_ids), or the final usage.

Per level it prints one line: requests/s, output tok/s, TTFT p50/p99 (send to first token), TPOT
p50/p99 (a request's time from its first token to its stream's last event over its tokens after the
first), errors; --json FILE appends the same as JSON
lines. bench/serve_peer.py imports make_workload and summary so its requests and numbers are the same.

usage: serve_load.py --url http://127.0.0.1:8080 [--clients 1,8,32,64] [--requests-per-client 4]
                     [--prompt uniform:64:256] [--output uniform:64:128] [--rate inf] [--seed 0]
Stdlib only (threads and http.client), so it runs wherever python3 does.
"""
import argparse
import http.client
import json
import math
import random
import sys
import threading
import time
import urllib.parse


def parse_dist(s):
    """'N' (fixed), 'uniform:A:B' or 'normal:MEAN:SD' (rounded, at least 1): a function of a Random."""
    p = s.split(":")
    if len(p) == 1:
        n = int(p[0])
        return lambda rng: n
    if p[0] == "uniform" and len(p) == 3:
        a, b = int(p[1]), int(p[2])
        return lambda rng: rng.randint(a, b)
    if p[0] == "normal" and len(p) == 3:
        m, sd = float(p[1]), float(p[2])
        return lambda rng: max(1, round(rng.gauss(m, sd)))
    raise ValueError(f"length distribution '{s}': N, uniform:A:B or normal:MEAN:SD")


def make_workload(seed, n, prompt_dist, output_dist, vocab):
    """n requests (prompt ids, output length) and, for an open loop, n exponential gaps of mean 1 (scaled by
    the rate later): the same for every caller given the same arguments."""
    rng = random.Random(seed)
    pd, od = parse_dist(prompt_dist), parse_dist(output_dist)
    reqs = []
    for _ in range(n):
        np_ = pd(rng)
        reqs.append(([rng.randrange(vocab) for _ in range(np_)], od(rng)))
    gaps = [rng.expovariate(1.0) for _ in range(n)]
    return reqs, gaps


def pct(xs, q):
    """The q-th percentile (0..100) of xs, linear between ranks; nan when empty."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(name, clients, results, wall):
    """One level's numbers from per-request results {ok, ttft, tpot, out} and the level's wall time."""
    ok = [r for r in results if r["ok"]]
    out = sum(r["out"] for r in ok)
    ttft = [r["ttft"] for r in ok if r["ttft"] is not None]
    tpot = [r["tpot"] for r in ok if r["tpot"] is not None]
    return {"system": name, "clients": clients, "requests": len(results), "errors": len(results) - len(ok),
            "wall_s": round(wall, 3), "req_per_s": round(len(ok) / wall, 3) if wall > 0 else 0,
            "out_tok_per_s": round(out / wall, 1) if wall > 0 else 0, "out_tokens": out,
            "ttft_p50_ms": round(1e3 * pct(ttft, 50), 2), "ttft_p99_ms": round(1e3 * pct(ttft, 99), 2),
            "tpot_p50_ms": round(1e3 * pct(tpot, 50), 3), "tpot_p99_ms": round(1e3 * pct(tpot, 99), 3)}


def print_summary(s, note=""):
    print(f"{s['system']}: clients {s['clients']:3d}  requests {s['requests']:4d}  errors {s['errors']}  "
          f"req/s {s['req_per_s']:8.3f}  out tok/s {s['out_tok_per_s']:9.1f}  "
          f"TTFT p50 {s['ttft_p50_ms']:8.2f} ms p99 {s['ttft_p99_ms']:8.2f} ms  "
          f"TPOT p50 {s['tpot_p50_ms']:7.3f} ms p99 {s['tpot_p99_ms']:7.3f} ms{note}", flush=True)


def one_request(host, port, path, model, prompt, n, key, timeout):
    """One streamed completion: {ok, ttft, tpot, out, err}; times from the send to each chunk with tokens."""
    body = {"prompt": prompt, "max_tokens": n, "stream": True, "ignore_eos": True, "return_token_ids": True,
            "temperature": 0}
    if model:
        body["model"] = model
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    res = {"ok": False, "ttft": None, "tpot": None, "out": 0, "err": None}
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        t0 = time.perf_counter()
        c.request("POST", path, body=json.dumps(body), headers=h)
        r = c.getresponse()
        if r.status != 200:
            res["err"] = f"HTTP {r.status}: {r.read()[:200]!r}"
            return res
        got, t_first, t_last, usage = 0, None, None, None
        while True:
            ln = r.readline()
            if not ln:
                break
            ln = ln.strip()
            if not ln.startswith(b"data: "):
                continue
            data = ln[6:]
            if data == b"[DONE]":
                break
            ev = json.loads(data)
            if "error" in ev:
                res["err"] = str(ev["error"])[:200]
                return res
            k = 0
            for ch in ev.get("choices", []):
                ids = ch.get("token_ids")
                k += len(ids) if ids is not None else (1 if ch.get("text") else 0)
            if ev.get("usage"):
                usage = ev["usage"]
            if t_first is not None:  # TPOT runs to the last event (tokens may arrive several to a chunk)
                t_last = time.perf_counter()
            if k:
                t = time.perf_counter()
                if t_first is None:
                    t_first = t
                got += k
                t_last = t
        out = usage["completion_tokens"] if usage else got
        res.update(ok=t_first is not None, out=out, ttft=None if t_first is None else t_first - t0,
                   tpot=(t_last - t_first) / (out - 1) if t_first is not None and out > 1 else None)
        if t_first is None:
            res["err"] = "no tokens"
    except (OSError, http.client.HTTPException, ValueError) as ex:
        res["err"] = f"{type(ex).__name__}: {ex}"
    finally:
        c.close()
    return res


def run_level(a, host, port, model, clients):
    """One level: clients threads over the level's requests; returns the summary."""
    n = clients * a.requests_per_client
    reqs, gaps = make_workload(a.seed + clients, n, a.prompt, a.output, a.vocab)
    rate = float(a.rate)
    at = []
    t = 0.0
    for g in gaps:  # arrival times of an open loop (unused closed loop)
        t += g / rate if rate != math.inf else 0
        at.append(t)
    nxt = [0]
    lock = threading.Lock()
    results = [None] * n
    start = time.perf_counter()

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= n:
                return
            wait = start + at[i] - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            p, m = reqs[i]
            results[i] = one_request(host, port, "/v1/completions", model, p, m, a.api_key, a.timeout)

    th = [threading.Thread(target=worker) for _ in range(clients)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    wall = time.perf_counter() - start
    errs = [r["err"] for r in results if not r["ok"]]
    s = summary("glmrun", clients, results, wall)
    s["rate"] = "closed loop" if rate == math.inf else f"{rate:g}/s"
    if errs:
        s["first_error"] = errs[0]
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default="", help="the request's model field (default: none)")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--clients", default="1,8,32,64", help="concurrency levels, comma-separated")
    ap.add_argument("--requests-per-client", type=int, default=4, help="requests per level = clients x this")
    ap.add_argument("--prompt", default="uniform:64:256", help="prompt length: N, uniform:A:B or normal:M:SD")
    ap.add_argument("--output", default="uniform:64:128", help="output length: N, uniform:A:B or normal:M:SD")
    ap.add_argument("--vocab", type=int, default=32000, help="prompt ids are uniform in [0, vocab)")
    ap.add_argument("--rate", default="inf", help="requests/s (Poisson arrivals), or inf: closed loop")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=2, help="requests sent first, not counted")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", default="", help="append each level's numbers to this file as a JSON line")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port or 80
    levels = [int(x) for x in a.clients.split(",") if x]
    print(f"serve_load: {a.url}, levels {levels}, {a.requests_per_client} requests a client, prompt {a.prompt}, "
          f"output {a.output}, vocab {a.vocab}, rate {a.rate}, seed {a.seed}", flush=True)
    wreqs, _ = make_workload(a.seed - 1, a.warmup, a.prompt, a.output, a.vocab)
    for p, m in wreqs:
        r = one_request(host, port, "/v1/completions", a.model, p, m, a.api_key, a.timeout)
        if not r["ok"]:
            print(f"serve_load: warm-up request failed: {r['err']}", file=sys.stderr)
            return 1
    failed = 0
    for c in levels:
        s = run_level(a, host, port, a.model, c)
        print_summary(s, f"  ({s['rate']})" + (f"  first error: {s['first_error']}" if s.get("first_error") else ""))
        failed |= s["errors"] > 0
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(s) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
