#!/usr/bin/env python3
# tests/fuzz/serve_fuzz.py URL SECONDS [SEED] — throw mutated request bodies at a running `glmrun serve` from 4
# threads for SECONDS: valid requests with values swapped for other types, extreme numbers, odd strings
# (NUL, lone surrogates, long), deep nesting, added and dropped keys, and byte-level flips, cuts and
# insertions of their JSON. Every answer must be a known status with OpenAI's error object (or a whole
# answer, or an event stream ending in [DONE]); the server must answer /health throughout. Prints the
# counts by status; exits 1 at the first bad answer or a dead server.
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse

url, secs = sys.argv[1], float(sys.argv[2])
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
u = urllib.parse.urlparse(url)
SEEDS = [
    ("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4}),
    ("/v1/completions", {"prompt": "Hello there", "max_tokens": 3, "stop": ["e", "x"], "ignore_eos": True}),
    ("/v1/completions", {"prompt": ["Hi"], "max_tokens": 2, "stream": True, "return_token_ids": True}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}),
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": [{"type": "text", "text": "a"}]},
                                           {"role": "assistant", "content": None}, {"role": "user", "content": "b"}],
                              "max_completion_tokens": 2, "stream": True, "stop": "\n", "temperature": 0, "top_p": 1, "seed": 3, "n": 1}),
]
KNOWN = {200, 400, 404, 405, 413, 503}
stats, lock, stop = {}, threading.Lock(), threading.Event()
failure = []


def odd_value(r):
    return r.choice([None, True, False, 0, -1, 1, 2 ** 31, 2 ** 63 - 1, -2 ** 63, 1e308, -0.0, 0.5, "", "x" * r.randint(1, 5000),
                     "\u0000a", "\ud800", "\U0001F600" * 3, [], {}, [[[[[]]]]], list(range(r.randint(0, 200))),
                     [r.randint(-5, 600) for _ in range(r.randint(0, 50))], {"role": "user"}, "user", "assistant", "text"])


def mutate_tree(v, r, depth=0):
    """A copy of v with some values swapped, keys added or dropped."""
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            c = r.random()
            if c < 0.08:
                continue
            out[k] = odd_value(r) if c < 0.25 else mutate_tree(x, r, depth + 1)
        if r.random() < 0.1:
            out[r.choice(["model", "stream", "stop", "max_tokens", "n", "top_k", "logprobs", "zz"])] = odd_value(r)
        return out
    if isinstance(v, list):
        out = [odd_value(r) if r.random() < 0.15 else mutate_tree(x, r, depth + 1) for x in v if r.random() > 0.05]
        if r.random() < 0.1:
            out.append(odd_value(r))
        return out
    return odd_value(r) if r.random() < 0.1 else v


def mutate_bytes(b, r):
    b = bytearray(b)
    for _ in range(r.randint(1, 6)):
        c = r.random()
        if not b:
            break
        i = r.randrange(len(b))
        if c < 0.3:
            b[i] = r.randrange(256)
        elif c < 0.5:
            del b[i:i + r.randint(1, 8)]
        elif c < 0.7:
            b[i:i] = r.choice([b"{", b"}", b"[", b'"', b"\\", b"\\u", b"\x00", b"9" * 30, b"[" * 2000, b",", b":"])
        else:
            b = b[:i]
    return bytes(b)


def body_of(r):
    path, req = r.choice(SEEDS)
    if r.random() < 0.05:
        path = r.choice(["/v1/models", "/nope", "/v1/completions/x", "/health"])
    req = mutate_tree(req, r)
    if isinstance(req, dict) and isinstance(req.get("max_tokens"), int) and req["max_tokens"] > 64:
        req["max_tokens"] = 64  # keep the server's work bounded; the context bounds it anyway
    try:
        b = json.dumps(req, allow_nan=r.random() < 0.05).encode("utf-8", "surrogatepass")
    except (ValueError, TypeError):
        b = b"{}"
    if r.random() < 0.4:
        b = mutate_bytes(b, r)
    return path, b


def check(st, ctype, data, path):
    if st not in KNOWN:
        return f"status {st}"
    if ctype == "text/event-stream":
        ev = [ln[6:] for ln in data.split("\n") if ln.startswith("data: ")]
        if not ev or ev[-1] != "[DONE]":
            return "a stream without [DONE]"
        for e in ev[:-1]:
            json.loads(e)
        return None
    if path == "/metrics":
        return None
    j = json.loads(data)
    if st != 200 and not (isinstance(j.get("error"), dict) and j["error"].get("message")):
        return f"status {st} without an error object"
    return None


def worker(k):
    r = random.Random(seed * 1000 + k)
    while not stop.is_set():
        path, b = body_of(r)
        try:
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
            c.request(r.choice(["POST"] * 20 + ["GET", "PUT"]), path, body=b, headers={"Content-Type": "application/json"})
            resp = c.getresponse()
            data = resp.read().decode("utf-8", "replace")
            why = check(resp.status, resp.getheader("Content-Type"), data, path)
            c.close()
        except Exception as ex:  # noqa: BLE001 — any failure to get an answer is a finding
            why = f"{type(ex).__name__}: {ex}"
            resp = None
        with lock:
            st = resp.status if resp else "none"
            stats[st] = stats.get(st, 0) + 1
            if why and not failure:
                failure.append(f"{why}; body {b[:300]!r} to {path}")
                stop.set()


ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
for t in ts:
    t.start()
end = time.time() + secs
while time.time() < end and not stop.is_set():
    time.sleep(1)
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        c.request("GET", "/health")
        if c.getresponse().status != 200:
            failure.append("/health is not 200")
            stop.set()
        c.close()
    except Exception as ex:  # noqa: BLE001
        failure.append(f"/health: {ex}")
        stop.set()
stop.set()
for t in ts:
    t.join()
print(f"serve_fuzz: {sum(stats.values())} requests in {secs:.0f} s, by status {dict(sorted(stats.items(), key=str))}")
if failure:
    print(f"serve_fuzz: FAIL: {failure[0]}")
    sys.exit(1)
