#!/usr/bin/env python3
"""
tests/tools/smol_refs.py — writes tests/data/smol/*, the references tests/smol.sh checks glmc against on the
real model SmolLM2-135M-Instruct (GGUF Q4_1, fetched by tests/tools/fetch_smollm2.sh).

Everything comes from Hugging Face transformers on the CPU, which reads the GGUF itself: its own GGUF
tokenizer conversion and its own dequantization (Q4_1 and Q8_0 to float32), float32 Llama modelling code.
Run by hand after changing a case; the test suite only reads the files:

    pip install torch transformers gguf
    python3 tests/tools/smol_refs.py [GGUF]     # from the repo root; GGUF defaults to the fetch script's

The stored files were written with transformers 5.25.0, tokenizers 0.23.3 and torch 2.15.0 (CPU).

Files:
    tok.inp / tok.out   the strings, separated by lines "__ggml_vocab_test__" (the newline before such a
                        line belongs to the marker, as in llama.cpp's vocab tests), and one line of
                        space-separated token ids per string (no BOS: the GGUF's add_bos_token is false).
    logits.f32          float32 logits of the last prompt position of the first raw prompt (49152 values).
    greedy.txt          one case a line, tab-separated: name, prompt ids, greedy ids, smallest logit margin,
                        the greedy ids decoded (backslash, newline and tab written \\\\, \\n and \\t).
                        The greedy ids are new tokens up to and including the first end of turn (id 2,
                        <|im_end|>) or MAXNEW tokens. "chat" cases' prompt ids are transformers'
                        apply_chat_template of one user message (the template's default system prompt
                        inserted), their name "chat:" followed by that message.

Near ties: glmc's CPU path and transformers both compute in float32 but in different orders, so their
logits differ by about 1e-6 relative (1e-4 absolute at most on logits of about 20); a greedy step whose two
best logits are closer than MARGIN (100 times that) could go either way. Every case below keeps a margin of at least MARGIN at every step (the script fails otherwise),
so the greedy ids must agree exactly; the margin is stored with each case.
"""
import os
import subprocess
import sys

import torch
from tokenizers import pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "smol")
MAXNEW = 24
MARGIN = 0.01
SEP = "\n__ggml_vocab_test__\n"

STRINGS = [
    "Hello world",
    " Hello world",
    "Hello World!",
    "The quick brown fox jumps over the lazy dog.",
    "It's what they'd've said; we're sure you'll see I'm right.",
    "DON'T SHOUT, it'S fine",
    "3.14159 and 2,718 and 1e-10",
    "Version 12345678901234567890",
    "Phone: +1 (555) 010-9999",
    "   leading spaces",
    "trailing spaces   ",
    "tabs\tand\t\ttabs",
    "line one\nline two\n\nline four\n",
    "\n\n\n",
    " ",
    "a  b   c    d     e",
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; i++) { sum += x[i]; }",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }",
    "SELECT * FROM users WHERE id = 7;",
    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
    "email: someone@example.com",
    "café naïve résumé Zürich",
    "Ελληνικά και русский язык",
    "日本語のテキストと中文",
    "emoji 🙂🚀 and ❤️",
    "mixed123abc456def",
    "CamelCaseIdentifier_with_snake_case",
    "<|im_start|>user\nHi<|im_end|>\n",
    "!!!???...,,,;;;",
    "ﬁ ligature and ½ fraction and ² superscript",
    "    indented\n        more\n",
    "x = [1, 2, 3]\ny = {'a': 1}",
    "It costs $1,000,000 (one million).",
]

RAW = [
    "The capital of France is",
    "def fibonacci(n):\n",
    "Once upon a time, there was a",
]
CHAT = [
    "What is the capital of France?",
    "Name three primary colors.",
]


def default_gguf():
    return subprocess.run([os.path.join(HERE, "fetch_smollm2.sh")], check=True, capture_output=True,
                          text=True).stdout.strip()


def greedy(model, ids):
    """The greedy new ids (to the first end of turn) and the smallest top-1/top-2 logit gap on the way."""
    x = torch.tensor([ids])
    out, gaps = [], []
    past = None
    with torch.no_grad():
        for _ in range(MAXNEW):
            r = model(input_ids=x, past_key_values=past, use_cache=True)
            past = r.past_key_values
            top = torch.topk(r.logits[0, -1].float(), 2)
            gaps.append(float(top.values[0] - top.values[1]))
            nxt = int(top.indices[0])
            out.append(nxt)
            if nxt == 2:
                break
            x = torch.tensor([[nxt]])
    return out, min(gaps)


def main():
    gguf = sys.argv[1] if len(sys.argv) > 1 else default_gguf()
    d, f = os.path.split(os.path.abspath(gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    # The GGUF's tokenizer.ggml.pre is "smollm": SmolLM2's own tokenizer.json splits every numeric code point
    # off first (pre_tokenizers.Digits(individual_digits=True), Rust's char::is_numeric: \p{N}), then applies
    # the GPT-2 byte-level regex; llama.cpp's smollm pre-tokenizer does the same. transformers' GGUF
    # conversion keeps only the byte-level step, which differs where a number other than an ASCII digit
    # follows a space (" ½": the vocabulary has no merges of ASCII digits). So the digit step is put back;
    # the strings where that changes the ids are printed.
    plain = [tok.encode(s, add_special_tokens=False) for s in STRINGS]
    bt = tok.backend_tokenizer
    bt.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bt.pre_tokenizer])
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model.eval()
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "tok.inp"), "w", encoding="utf-8", newline="") as fi, \
            open(os.path.join(OUT, "tok.out"), "w", newline="") as fo:
        fi.write(SEP.join(STRINGS))
        for s, p in zip(STRINGS, plain):
            ids = tok.encode(s, add_special_tokens=False)
            if ids != p:
                print(f"digit split changes {s!r}: {p} -> {ids}")
            fo.write(" ".join(str(i) for i in ids) + "\n")
    with torch.no_grad():
        last = model(torch.tensor([tok.encode(RAW[0], add_special_tokens=False)])).logits[0, -1].float()
    last.numpy().astype("<f4").tofile(os.path.join(OUT, "logits.f32"))
    lines, bad = [], []
    cases = [(p, tok.encode(p, add_special_tokens=False)) for p in RAW]
    for u in CHAT:
        ids = tok.apply_chat_template([{"role": "user", "content": u}], add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        cases.append(("chat:" + u, list(ids)))
    for name, ids in cases:
        out, gap = greedy(model, ids)
        print(f"{name!r}: {tok.decode(out)!r} (margin {gap:.4f})")
        if gap < MARGIN:
            bad.append(f"{name!r}: a greedy step's top two logits are {gap:.4g} apart (< {MARGIN})")
        text = tok.decode(out).replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
        lines.append("\t".join([name.replace("\n", "\\n"), " ".join(map(str, ids)), " ".join(map(str, out)),
                                f"{gap:.4f}", text]))
    if bad:
        sys.exit("smol_refs: near ties, pick other prompts:\n" + "\n".join(bad))
    with open(os.path.join(OUT, "greedy.txt"), "w", newline="") as fo:
        fo.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
