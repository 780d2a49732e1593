#!/usr/bin/env python3
# tests/serve_client.py — the client side of tests/serve.sh: drives a running `glmrun serve` with the openai
# package (and http.client where the raw bytes matter: errors, [DONE], a client that goes away) and checks
# every answer against glmrun run alone on the same prompt (greedy). Prints "ok - NAME" / "FAIL - NAME: why".
# usage: serve_client.py main|auth|fake|tp2|tp2gpu URL PLAN LOG TOKENIZER (tp2, tp2gpu: PLAN is the tp 1 plan the
# answers must equal)
import concurrent.futures
import http.client
import json
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

import openai

mode, url, plan, log = sys.argv[1:5]
u = urllib.parse.urlparse(url)
HOST, PORT = u.hostname, u.port
failed = 0


def ok(name):
    print(f"ok - serve.sh {name}", flush=True)


def bad(name, why):
    global failed
    failed = 1
    print(f"FAIL - serve.sh {name}: {why}", flush=True)


def check(name, cond, why=""):
    ok(name) if cond else bad(name, why)


def glmrun(*args):
    """glmrun PLAN --device cpu ARGS: (stdout without its last newline, stderr)."""
    p = subprocess.run(["bin/glmrun", plan, "--device", "cpu", *args], capture_output=True)
    if p.returncode:
        raise RuntimeError(f"glmrun {' '.join(args)}: {p.stderr.decode(errors='replace')}")
    out = p.stdout.decode()
    return out[:-1] if out.endswith("\n") else out, p.stderr.decode()


def ref_ids(ids, n, *more):
    return [int(x) for x in glmrun("--tokens", ",".join(map(str, ids)), "-n", str(n), *more)[0].split()]


def raw(method, path, body=None, headers=None, timeout=30):
    """One HTTP request: (status, parsed JSON or text)."""
    c = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    h = {"Content-Type": "application/json", **(headers or {})}
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read().decode()
    c.close()
    try:
        return r.status, json.loads(data)
    except ValueError:
        return r.status, data


def sse(path, body):
    """A streamed request over http.client: the data: payloads in order."""
    c = http.client.HTTPConnection(HOST, PORT, timeout=30)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read().decode()
    c.close()
    return r.status, r.getheader("Content-Type"), [ln[6:] for ln in text.split("\n") if ln.startswith("data: ")]


def metrics():
    st, text = raw("GET", "/metrics")
    m = {}
    for ln in text.splitlines():
        if ln and not ln.startswith("#"):
            k, v = ln.rsplit(" ", 1)
            m[k] = float(v)
    return m


def extra(obj, key):
    return (obj.model_extra or {}).get(key)


def log_lines(pattern):
    with open(log) as f:
        return [ln for ln in f if re.search(pattern, ln)]


def main_tests():
    cl = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    models = cl.models.list()
    check("/v1/models lists the served model", [m.id for m in models.data] == ["tiny"], str(models))

    # A completion from token ids: the ids glmrun --tokens gives (12 prompt tokens: prefilled in two chunks of 8).
    m0 = metrics()
    n_ok, ptoks, gtoks = 0, 0, 0
    ids = [5, 17, 300, 42, 7, 7, 99, 120, 64, 3, 250, 11]
    r = cl.completions.create(model="tiny", prompt=ids, max_tokens=10, extra_body={"return_token_ids": True, "ignore_eos": True})
    want = ref_ids(ids, 10)
    check("completion token ids equal glmrun --tokens -n 10", extra(r.choices[0], "token_ids") == want,
          f"{extra(r.choices[0], 'token_ids')} vs {want}")
    check("usage counts the prompt and the answer", (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (12, 10, 22),
          str(r.usage))
    check("finish_reason length at max_tokens", r.choices[0].finish_reason == "length", r.choices[0].finish_reason)
    n_ok, ptoks, gtoks = n_ok + 1, ptoks + 12, gtoks + 10

    # A text prompt: the text glmrun -p gives.
    r = cl.completions.create(model="tiny", prompt="Hello world, said the", max_tokens=12, extra_body={"ignore_eos": True})
    want, _ = glmrun("-p", "Hello world, said the", "-n", "12", "--ignore-eos")
    check("text completion equals glmrun -p", r.choices[0].text == want, f"{r.choices[0].text!r} vs {want!r}")
    n_ok, ptoks, gtoks = n_ok + 1, ptoks + r.usage.prompt_tokens, gtoks + r.usage.completion_tokens
    text12, p_hello = r.choices[0].text, r.usage.prompt_tokens

    # Chat: the template's rendering, the answer glmrun --chat -p gives (it ends at end-of-turn or -n).
    for sysmsg in (None, "Be brief."):
        msgs = ([{"role": "system", "content": sysmsg}] if sysmsg else []) + [{"role": "user", "content": "Hello there"}]
        r = cl.chat.completions.create(model="tiny", messages=msgs, max_tokens=14)
        want, err = glmrun("--chat", "-p", "Hello there", "-n", "14", *(["--system", sysmsg] if sysmsg else []))
        np = int(re.search(r"prefill (\d+) tokens", err).group(1))
        name = "with a system message" if sysmsg else "one user message"
        check(f"chat ({name}) equals glmrun --chat -p", r.choices[0].message.content == want,
              f"{r.choices[0].message.content!r} vs {want!r}")
        check(f"chat ({name}) usage: the templated prompt's tokens", r.usage.prompt_tokens == np, f"{r.usage.prompt_tokens} vs {np}")
        n_ok, ptoks, gtoks = n_ok + 1, ptoks + r.usage.prompt_tokens, gtoks + r.usage.completion_tokens
    chat_text, chat_usage = r.choices[0].message.content, r.usage

    # A conversation with a past answer renders as the template renders it: the same as --tokens of its ids.
    conv = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": [{"type": "text", "text": "Again"}]}]
    r = cl.chat.completions.create(model="tiny", messages=conv, max_tokens=6, extra_body={"return_token_ids": True, "ignore_eos": True})
    tmpl = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n"
    tk = subprocess.run(["bin/glmc", "tokenize", sys.argv[5], "--parse-special"], input=tmpl.encode(), capture_output=True).stdout.decode().split()
    want = ref_ids([int(x) for x in tk], 6)
    check("a conversation with a past answer (content as text parts) answers as its template text",
          extra(r.choices[0], "token_ids") == want and r.usage.prompt_tokens == len(tk), f"{extra(r.choices[0], 'token_ids')} vs {want}")
    n_ok, ptoks, gtoks = n_ok + 1, ptoks + r.usage.prompt_tokens, gtoks + r.usage.completion_tokens

    # Streaming: the chunks concatenate to the whole answer; the last event is [DONE]; usage in the final chunk.
    st, ctype, ev = sse("/v1/chat/completions", {"messages": msgs, "max_tokens": 14, "stream": True})
    chunks = [json.loads(e) for e in ev[:-1]]
    got = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    check("stream: text/event-stream ending with data: [DONE]", st == 200 and ctype == "text/event-stream" and ev[-1] == "[DONE]",
          f"{st} {ctype} {ev[-1:]}")
    check("stream: chat chunks concatenate to the whole answer", got == chat_text, f"{got!r} vs {chat_text!r}")
    fin = chunks[-1]
    check("stream: the final chunk has finish_reason and usage",
          fin["choices"][0]["finish_reason"] in ("stop", "length") and fin["usage"]["completion_tokens"] == chat_usage.completion_tokens
          and chunks[0]["choices"][0]["delta"].get("role") == "assistant", json.dumps(fin))
    n_ok, ptoks, gtoks = n_ok + 1, ptoks + chat_usage.prompt_tokens, gtoks + chat_usage.completion_tokens
    s = cl.completions.create(model="tiny", prompt="Hello world, said the", max_tokens=12, stream=True, extra_body={"ignore_eos": True})
    parts = [c.choices[0].text for c in s if c.choices]
    check("stream (openai client): completion chunks concatenate to the whole answer", "".join(parts) == text12 and len(parts) > 1,
          f"{parts} vs {text12!r}")
    n_ok, ptoks, gtoks = n_ok + 1, ptoks + p_hello, gtoks + 12

    # Stop strings: the answer ends just before the first one (a string or a list; streamed or not).
    cut = text12[4:7]
    want = text12[:text12.index(cut)]
    for stop in (cut, ["\u00a7never\u00a7", cut]):
        r = cl.completions.create(model="tiny", prompt="Hello world, said the", max_tokens=12, stop=stop, extra_body={"ignore_eos": True})
        check(f"stop {json.dumps(stop)} ends the answer before it", r.choices[0].text == want and r.choices[0].finish_reason == "stop",
              f"{r.choices[0].text!r} ({r.choices[0].finish_reason}) vs {want!r}")
        n_ok, ptoks, gtoks = n_ok + 1, ptoks + r.usage.prompt_tokens, gtoks + r.usage.completion_tokens
    st, _, ev = sse("/v1/completions", {"prompt": "Hello world, said the", "max_tokens": 12, "stop": cut, "stream": True, "ignore_eos": True})
    got = "".join(json.loads(e)["choices"][0]["text"] for e in ev[:-1])
    check("stop in a stream: nothing past the stop string is sent", got == want and json.loads(ev[-2])["choices"][0]["finish_reason"] == "stop",
          f"{got!r} vs {want!r}")
    n_ok, ptoks, gtoks = n_ok + 1, ptoks + json.loads(ev[-2])["usage"]["prompt_tokens"], gtoks + json.loads(ev[-2])["usage"]["completion_tokens"]

    # A full context ends the answer (finish length) with the tokens that fit: 90 + 7 - 1 = 96 positions.
    long_ids = [(i * 37 + 11) % 500 for i in range(90)]
    r = cl.completions.create(model="tiny", prompt=long_ids, max_tokens=50, extra_body={"return_token_ids": True, "ignore_eos": True})
    want = ref_ids(long_ids, 7)
    check("a full context ends the answer: 7 tokens after 90 in --max-seq 96", extra(r.choices[0], "token_ids") == want and
          r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 7, f"{extra(r.choices[0], 'token_ids')} vs {want}")
    n_ok, ptoks, gtoks = n_ok + 1, ptoks + 90, gtoks + 7

    # 32 clients at once, 4 slots: prompts of 1..40 tokens and answers of 3..40, every 4th streamed; each answer
    # equals glmrun alone on its prompt, and steps ran several sequences together.
    rng = random.Random(49)
    jobs = [([rng.randrange(512) for _ in range(rng.randint(1, 40))], rng.randint(3, 40)) for _ in range(32)]
    refs = [ref_ids(p, n) for p, n in jobs]
    mb = metrics()

    def one(k):
        p, n = jobs[k]
        time.sleep(0.003 * k)
        eb = {"return_token_ids": True, "ignore_eos": True}
        if k % 4 == 3:
            got = []
            for c in cl.completions.create(model="tiny", prompt=p, max_tokens=n, stream=True, extra_body=eb):
                if c.choices:
                    got += extra(c.choices[0], "token_ids") or []
            return got
        return extra(cl.completions.create(model="tiny", prompt=p, max_tokens=n, extra_body=eb).choices[0], "token_ids")

    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        outs = list(ex.map(one, range(32)))
    wrong = [k for k in range(32) if outs[k] != refs[k]]
    check("32 concurrent clients: every answer equals glmrun alone", not wrong,
          f"{len(wrong)} differ, e.g. #{wrong[:1]}: {outs[wrong[0]] if wrong else ''} vs {refs[wrong[0]] if wrong else ''}")
    ma = metrics()
    steps, rows = ma["glmc_decode_steps_total"] - mb["glmc_decode_steps_total"], ma["glmc_decode_rows_total"] - mb["glmc_decode_rows_total"]
    check(f"continuous batching: {int(rows)} sequence steps in {int(steps)} decode steps", rows > 2 * steps, f"rows {rows} steps {steps}")
    n_ok, ptoks, gtoks = n_ok + 32, ptoks + sum(len(p) for p, _ in jobs), gtoks + sum(n for _, n in jobs)

    # The metrics add up: responses, prompt and generated tokens since the first scrape.
    m1 = metrics()
    d = lambda k: m1[k] - m0[k]
    k200 = 'glmc_requests_total{status="200"}'
    check("metrics: 200 responses, prompt and generated tokens add up",
          d(k200) == n_ok + 3 and d("glmc_prompt_tokens_total") == ptoks and d("glmc_generation_tokens_total") == gtoks,
          f"200s {d(k200)} vs {n_ok + 3}, prompt {d('glmc_prompt_tokens_total')} vs {ptoks}, "
          f"generated {d('glmc_generation_tokens_total')} vs {gtoks}")
    check("metrics: nothing running or waiting when idle; TTFT and TPOT histograms count",
          m1["glmc_requests_running"] == 0 and m1["glmc_requests_waiting"] == 0 and m1["glmc_kv_slots_used"] == 0 and
          d("glmc_time_to_first_token_seconds_count") == n_ok and m1['glmc_time_to_first_token_seconds_bucket{le="+Inf"}'] == m1["glmc_time_to_first_token_seconds_count"]
          and d("glmc_time_per_output_token_seconds_count") > 30, json.dumps({k: v for k, v in m1.items() if "bucket" not in k}))

    # Bad input: OpenAI's error object with the right status, one log line each, and the server keeps serving.
    big = b'{"prompt": "' + b"a" * (5 << 20) + b'"}'
    cases = [
        ("malformed JSON", "POST", "/v1/completions", b'{"prompt": [1, 2', 400, "malformed JSON"),
        ("a body that is not an object", "POST", "/v1/completions", b"[1, 2]", 400, "must be a JSON object"),
        ("no prompt", "POST", "/v1/completions", b'{"max_tokens": 3}', 400, "'prompt' is required"),
        ("no messages", "POST", "/v1/chat/completions", b'{"max_tokens": 3}', 400, "'messages' is required"),
        ("max_tokens of the wrong type", "POST", "/v1/completions", b'{"prompt": [1], "max_tokens": "3"}', 400, "'max_tokens' must be an integer >= 1"),
        ("max_tokens 0", "POST", "/v1/completions", b'{"prompt": [1], "max_tokens": 0}', 400, "'max_tokens' must be an integer >= 1"),
        ("stream not a boolean", "POST", "/v1/completions", b'{"prompt": [1], "stream": "yes"}', 400, "'stream' must be a boolean"),
        ("stop not a string", "POST", "/v1/completions", b'{"prompt": [1], "stop": 5}', 400, "'stop' must be a string or a list"),
        ("a prompt of the wrong type", "POST", "/v1/completions", b'{"prompt": {"a": 1}}', 400, "'prompt' must be a string or a list"),
        ("a token id outside the vocabulary", "POST", "/v1/completions", b'{"prompt": [1, 99999]}', 400, "outside the vocabulary"),
        ("a message that is not an object", "POST", "/v1/chat/completions", b'{"messages": ["hi"]}', 400, "messages[0] must be an object"),
        ("an unknown role", "POST", "/v1/chat/completions", b'{"messages": [{"role": "wizard", "content": "hi"}]}', 400, "unknown role 'wizard'"),
        ("an empty prompt", "POST", "/v1/completions", b'{"prompt": []}', 400, "the prompt is empty"),
        ("a prompt longer than --max-seq", "POST", "/v1/completions", json.dumps({"prompt": list(range(97))}).encode(), 400,
         "the prompt is 97 tokens; the context (--max-seq) holds 96"),
        ("a negative temperature", "POST", "/v1/completions", b'{"prompt": [1], "temperature": -0.7}', 400, "'temperature' -0.7: must be a number >= 0"),
        ("top_p 0", "POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "top_p": 0}', 400,
         "'top_p' 0: must be a number in (0, 1]"),
        ("top_k -2", "POST", "/v1/completions", b'{"prompt": [1], "top_k": -2}', 400, "'top_k' must be an integer >= -1"),
        ("a seed past 32 bits", "POST", "/v1/completions", b'{"prompt": [1], "seed": 4294967296}', 400, "'seed' 4294967296: must be an integer in [0, 4294967295]"),
        ("chat logprobs", "POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "logprobs": true}', 400,
         "'logprobs': this server does not return log probabilities"),
        ("completion logprobs", "POST", "/v1/completions", b'{"prompt": [1], "logprobs": 2}', 400, "'logprobs': this server does not return log probabilities"),
        ("top_logprobs", "POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}', 400,
         "'top_logprobs': this server does not return log probabilities"),
        ("n of 2", "POST", "/v1/completions", b'{"prompt": [1], "n": 2}', 400, "one choice per request"),
        ("an unknown path", "GET", "/v2/everything", None, 404, "no such path"),
        ("the wrong method", "GET", "/v1/completions", None, 405, "/v1/completions takes POST, not GET"),
        ("a body over 4 MiB", "POST", "/v1/completions", big, 413, "more than 4194304 bytes"),
    ]
    mb = metrics()
    nlog = len(log_lines(r" (400|404|405|413): "))
    for name, meth, path, body, status, msg in cases:
        st, j = raw(meth, path, body)
        e = j.get("error", {}) if isinstance(j, dict) else {}
        check(f"error: {name} -> {status}", st == status and msg in e.get("message", "") and e.get("type"), f"{st} {j}")
    st, j = raw("POST", "/v1/completions", b'{"prompt": [1], "temperature": -0.7}')
    check("error: the refused sampling field is named as 'param'", j["error"]["param"] == "temperature", str(j))
    st, j = raw("POST", "/v1/completions", json.dumps({"prompt": list(range(97))}).encode())
    check("error: a long prompt has code context_length_exceeded", j["error"]["code"] == "context_length_exceeded", str(j))
    ma = metrics()
    n400 = sum(1 for c in cases if c[4] == 400) + 2
    check("error: one log line each, counted by status in /metrics",
          len(log_lines(r" (400|404|405|413): ")) - nlog == len(cases) + 2 and
          ma['glmc_requests_total{status="400"}'] - mb['glmc_requests_total{status="400"}'] == n400 and
          ma['glmc_requests_total{status="413"}'] - mb['glmc_requests_total{status="413"}'] == 1,
          f"{len(log_lines(r' (400|404|405|413): ')) - nlog} lines for {len(cases) + 2}")
    r = cl.completions.create(model="tiny", prompt=ids, max_tokens=10, extra_body={"return_token_ids": True, "ignore_eos": True})
    check("the server still answers after the errors", extra(r.choices[0], "token_ids") == ref_ids(ids, 10))

    # A client that goes away cancels its request and frees its slot: mid-stream, and while waiting whole.
    mb = metrics()
    c = http.client.HTTPConnection(HOST, PORT, timeout=30)
    c.request("POST", "/v1/completions", body=json.dumps({"prompt": [1, 2, 3], "max_tokens": 90, "stream": True, "ignore_eos": True}),
              headers={"Content-Type": "application/json"})
    resp = c.getresponse()
    resp.fp.readline()
    resp.fp.readline()
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    s = socket.create_connection((HOST, PORT))
    body = json.dumps({"prompt": [4, 5, 6], "max_tokens": 90, "ignore_eos": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.05)
    s.close()
    for _ in range(100):
        ma = metrics()
        if ma["glmc_requests_cancelled_total"] - mb["glmc_requests_cancelled_total"] >= 2 and ma["glmc_kv_slots_used"] == 0:
            break
        time.sleep(0.05)
    gen = ma["glmc_generation_tokens_total"] - mb["glmc_generation_tokens_total"]
    check("a client gone mid-stream or before the answer cancels it and frees the slot",
          ma["glmc_requests_cancelled_total"] - mb["glmc_requests_cancelled_total"] == 2 and ma["glmc_kv_slots_used"] == 0 and gen < 2 * 90
          and len(log_lines("cancelled after")) == 2, f"cancelled {ma['glmc_requests_cancelled_total'] - mb['glmc_requests_cancelled_total']}, "
          f"slots {ma['glmc_kv_slots_used']}, generated {gen}")


def samp_flags(temp, seed, top_p=None, top_k=None):
    """glmrun's flags for a request's sampling fields."""
    f = ["--temp", str(temp)] + (["--seed", str(seed)] if seed is not None else [])
    return f + (["--top-p", str(top_p)] if top_p is not None else []) + (["--top-k", str(top_k)] if top_k is not None else [])


def sampling_tests():
    """Per-request sampling on a greedy server: a request's temperature, top_p, top_k and seed give the tokens
    glmrun gives with those flags, alone and batched with requests that sample otherwise."""
    cl = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    eb = {"return_token_ids": True, "ignore_eos": True}
    p = [5, 17, 300, 42, 7]
    greedy = ref_ids(p, 16)
    r = cl.completions.create(model="tiny", prompt=p, max_tokens=16, temperature=0.8, seed=5, extra_body=eb)
    want = ref_ids(p, 16, *samp_flags(0.8, 5))
    check("temperature 0.8 seed 5 equals glmrun --temp 0.8 --seed 5 (and not greedy)",
          extra(r.choices[0], "token_ids") == want and want != greedy, f"{extra(r.choices[0], 'token_ids')} vs {want}")
    r = cl.completions.create(model="tiny", prompt=p, max_tokens=16, temperature=1.0, seed=9, extra_body={**eb, "top_k": 1})
    check("top_k 1 equals greedy", extra(r.choices[0], "token_ids") == greedy, f"{extra(r.choices[0], 'token_ids')} vs {greedy}")
    r = cl.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hello there"}], max_tokens=14,
                                   temperature=0.8, seed=5)
    want, _ = glmrun("--chat", "-p", "Hello there", "-n", "14", *samp_flags(0.8, 5))
    check("chat with temperature 0.8 seed 5 equals glmrun --chat -p --temp 0.8 --seed 5", r.choices[0].message.content == want,
          f"{r.choices[0].message.content!r} vs {want!r}")
    r = cl.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}], max_completion_tokens=3,
                                   extra_body={"ignore_eos": True})
    check("max_completion_tokens 3: three tokens, finish length", r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length",
          f"{r.usage} {r.choices[0].finish_reason}")

    # Six requests at once over four slots, each its own sampling (one greedy, one the same prompt with another
    # seed), every other one streamed: each equals its own run alone, and steps ran several of them together.
    rng = random.Random(7)
    jobs = [(p, 24, 0.8, 5, None, None), ([rng.randrange(512) for _ in range(9)], 20, 1.5, 11, None, None),
            ([rng.randrange(512) for _ in range(3)], 18, 0, None, None, None), ([rng.randrange(512) for _ in range(14)], 22, 0.7, 3, 0.9, None),
            ([rng.randrange(512) for _ in range(6)], 16, 1.0, 9, None, 5), (p, 24, 0.8, 6, None, None)]
    refs = [ref_ids(q, n, *samp_flags(t, sd, tp, tk)) for q, n, t, sd, tp, tk in jobs]
    mb = metrics()

    def one(k):
        q, n, t, sd, tp, tk = jobs[k]
        kw = {"temperature": t, **({"seed": sd} if sd is not None else {}), **({"top_p": tp} if tp is not None else {})}
        body = {**eb, **({"top_k": tk} if tk is not None else {})}
        if k % 2:
            got = []
            for c in cl.completions.create(model="tiny", prompt=q, max_tokens=n, stream=True, extra_body=body, **kw):
                if c.choices:
                    got += extra(c.choices[0], "token_ids") or []
            return got
        return extra(cl.completions.create(model="tiny", prompt=q, max_tokens=n, extra_body=body, **kw).choices[0], "token_ids")

    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as ex:
        outs = list(ex.map(one, range(len(jobs))))
    ma = metrics()
    wrong = [k for k in range(len(jobs)) if outs[k] != refs[k]]
    check("six concurrent requests, each its own temperature/top_p/top_k/seed: each equals its glmrun run alone", not wrong,
          f"#{wrong}: {[outs[k] for k in wrong][:1]} vs {[refs[k] for k in wrong][:1]}")
    check("the same prompt with seeds 5 and 6 samples differently", refs[0] != refs[5], str(refs[0]))
    steps, rows = ma["glmc_decode_steps_total"] - mb["glmc_decode_steps_total"], ma["glmc_decode_rows_total"] - mb["glmc_decode_rows_total"]
    check(f"the sampled requests shared decode steps ({int(rows)} rows in {int(steps)} steps)", rows > 2 * steps, f"rows {rows} steps {steps}")
    ps, parts = ma["glmc_prefill_steps_total"] - mb["glmc_prefill_steps_total"], ma["glmc_prefill_parts_total"] - mb["glmc_prefill_parts_total"]
    check(f"their prompts shared prefill steps ({int(parts)} pieces in {int(ps)} steps of at most 8 tokens)", parts > ps, f"parts {parts} steps {ps}")


def tp2_tests(where="on the CPU ranks"):
    """A tp 2 plan on the CPU ranks (or on two GPUs of the simt driver double): answers equal the tp 1 plan's
    (glmrun PLAN is the tp 1 plan here, on the CPU)."""
    cl = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    eb = {"return_token_ids": True, "ignore_eos": True}
    rng = random.Random(2)
    jobs = [([rng.randrange(512) for _ in range(rng.randint(2, 20))], rng.randint(4, 20), (0.8, k) if k % 2 else (0, None)) for k in range(6)]
    refs = [ref_ids(q, n, *(samp_flags(t, sd) if t else ())) for q, n, (t, sd) in jobs]

    def one(k):
        q, n, (t, sd) = jobs[k]
        return extra(cl.completions.create(model="tiny", prompt=q, max_tokens=n, temperature=t, extra_body=eb,
                                           **({"seed": sd} if sd is not None else {})).choices[0], "token_ids")

    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as ex:
        outs = list(ex.map(one, range(len(jobs))))
    wrong = [k for k in range(len(jobs)) if outs[k] != refs[k]]
    check(f"tp 2 {where}: six concurrent requests (greedy and sampled) equal the tp 1 plan's glmrun", not wrong,
          f"#{wrong}: {[outs[k] for k in wrong][:1]} vs {[refs[k] for k in wrong][:1]}")
    r = cl.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hello there"}], max_tokens=14)
    want, _ = glmrun("--chat", "-p", "Hello there", "-n", "14")
    check(f"tp 2 {where}: chat equals the tp 1 plan's glmrun --chat -p", r.choices[0].message.content == want,
          f"{r.choices[0].message.content!r} vs {want!r}")


def auth_tests():
    key = "sekrit"
    st, j = raw("POST", "/v1/completions", b'{"prompt": [1], "max_tokens": 2}')
    check("--api-key: no Authorization -> 401", st == 401 and j["error"]["type"] == "authentication_error", f"{st} {j}")
    st, j = raw("GET", "/v1/models", None, {"Authorization": "Bearer nope"})
    check("--api-key: a wrong key -> 401", st == 401, f"{st} {j}")
    st, j = raw("GET", "/health")
    check("--api-key: /health needs no key", st == 200 and j == {"status": "ok"}, f"{st} {j}")
    try:
        openai.OpenAI(base_url=url + "/v1", api_key="nope", max_retries=0).models.list()
        bad("--api-key: the openai client with a wrong key gets AuthenticationError", "no error")
    except openai.AuthenticationError:
        ok("--api-key: the openai client with a wrong key gets AuthenticationError")
    cl = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
    # This server samples (--temp 0.8 --top-k 40 --seed 5); idle, a request takes slot 0 and so samples with
    # seed 5 + 0, as glmrun does; the fields a request gives replace the server's.
    samp = ("--temp", "0.8", "--top-k", "40", "--seed", "5")
    r = cl.completions.create(model="x", prompt=[1, 2], max_tokens=12, temperature=0.8, seed=5,
                              extra_body={"return_token_ids": True, "ignore_eos": True, "top_k": 40})
    want = ref_ids([1, 2], 12, *samp)
    check("--api-key: the right key is served; sampling as glmrun --temp 0.8 --top-k 40 --seed 5",
          extra(r.choices[0], "token_ids") == want and want != ref_ids([1, 2], 12), f"{extra(r.choices[0], 'token_ids')} vs {want}")
    for field, flags in (({"temperature": 0}, ()), ({"seed": 6}, ("--temp", "0.8", "--top-k", "40", "--seed", "6")),
                         ({"top_k": 5}, ("--temp", "0.8", "--top-k", "5", "--seed", "5"))):
        r = cl.completions.create(model="x", prompt=[1, 2], max_tokens=12, extra_body={"return_token_ids": True, "ignore_eos": True, **field})
        want = ref_ids([1, 2], 12, *flags)
        check(f"a sampling server takes the request's {json.dumps(field)}: glmrun {' '.join(flags) or 'greedy'}",
              extra(r.choices[0], "token_ids") == want, f"{extra(r.choices[0], 'token_ids')} vs {want}")

    # One slot, a queue of one: a running stream, one waiting request, then 503.
    s = cl.completions.create(model="x", prompt=[1, 2], max_tokens=60, stream=True, extra_body={"ignore_eos": True})
    next(iter(s))
    waiting = {}
    t = threading.Thread(target=lambda: waiting.update(r=cl.completions.create(model="x", prompt=[3], max_tokens=2)))
    t.start()
    for _ in range(100):
        if metrics()["glmc_requests_waiting"] == 1:
            break
        time.sleep(0.02)
    st, j = raw("POST", "/v1/completions", b'{"prompt": [1], "max_tokens": 2}', {"Authorization": "Bearer " + key})
    check("a full queue -> 503 with an error, not a hang", st == 503 and "wait for a slot" in j["error"]["message"], f"{st} {j}")
    rest = [c for c in s]
    t.join()
    check("the running and the waiting request both finish", len(rest) > 1 and waiting.get("r") and waiting["r"].usage.completion_tokens == 2,
          str(waiting))


def fake_tests():
    """The GPU path through the test doubles of the driver and NCCL (no kernels run: the tokens mean nothing):
    buckets of rows with the padding slot, prefill on the ranks, five requests over three slots."""
    def one(k):
        samp = {"temperature": 0.5 + k, "seed": k, "top_p": 0.9} if k % 2 else {}  # rows that sample otherwise reach the GPU's step buffer
        st, j = raw("POST", "/v1/completions", json.dumps({"prompt": list(range(1, 3 + 5 * k)), "max_tokens": 5 + 3 * k, **samp}).encode())
        return st, j.get("usage", {}).get("completion_tokens"), j.get("choices", [{}])[0].get("finish_reason")
    mb = metrics()
    with concurrent.futures.ThreadPoolExecutor(5) as ex:
        got = list(ex.map(one, range(5)))
    ma = metrics()
    steps, rows = ma["glmc_decode_steps_total"] - mb["glmc_decode_steps_total"], ma["glmc_decode_rows_total"] - mb["glmc_decode_rows_total"]
    check("tp 2 on the fake GPUs: five requests over three slots all answered in full, steps of several rows",
          got == [(200, 5 + 3 * k, "length") for k in range(5)] and rows > steps and ma["glmc_kv_slots_used"] == 0,
          f"{got}, rows {rows} steps {steps}")


def alone_tests():
    """--prefill-alone on (with --max-num-batched-tokens 8): a 30-token prompt arriving while another request
    decodes prefills its whole chunks of 8 in steps of its own, the decoding request stepping in between; both
    answers equal the same requests run alone (greedy)."""
    def one(ids, n, delay):
        time.sleep(delay)
        body = {"prompt": ids, "max_tokens": n, "return_token_ids": True, "ignore_eos": True}
        st, j = raw("POST", "/v1/completions", json.dumps(body).encode())
        return st, j.get("choices", [{}])[0].get("token_ids") if st == 200 else j
    mb = metrics()
    a, b = [5, 9, 17], list(range(40, 70))
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        fa, fb = ex.submit(one, a, 40, 0), ex.submit(one, b, 10, 0.15)
        (sa, ta), (sb, tb) = fa.result(), fb.result()
    ma = metrics()
    alone = ma["glmc_prefill_alone_steps_total"] - mb["glmc_prefill_alone_steps_total"]
    want_a, want_b = ref_ids(a, 40, "--ignore-eos"), ref_ids(b, 10, "--ignore-eos")
    check("--prefill-alone: a long prompt's whole chunks prefill alone while another request decodes",
          1 <= alone <= 3 and ma["glmc_decode_steps_total"] - mb["glmc_decode_steps_total"] >= alone, f"alone steps {alone}, {ma}")
    check("--prefill-alone: both answers equal the requests run alone", (sa, sb) == (200, 200) and ta == want_a and tb == want_b,
          f"{sa} {ta!r} vs {want_a!r}; {sb} {tb!r} vs {want_b!r}")


try:
    {"main": lambda: (main_tests(), sampling_tests()), "auth": auth_tests, "fake": fake_tests, "tp2": tp2_tests, "alone": alone_tests,
     "tp2gpu": lambda: tp2_tests("on two simt GPUs")}[mode]()
except Exception as ex:  # a crash is a failure with its reason, not a silent exit
    bad(f"{mode} client", f"{type(ex).__name__}: {ex}")
sys.exit(failed)
