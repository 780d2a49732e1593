#!/usr/bin/env python3
"""tests/tools/render_templates.py — the expected renderings for tests/test_jinja.c.

Renders the real chat templates in tests/data/templates/*.jinja on several message lists with
transformers' own renderer (transformers.utils.chat_template_utils.render_jinja_template: jinja2's
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loopcontrols, its tojson, raise_exception,
strftime_now, dict and namespace), and small snippet templates (one Jinja construct each) with the same
environment, and writes tests/data/templates/expected.json:
  {"cases": [{"name", "template" (a file in tests/data/templates) or "source" (the text), "vars", "want" or
  "error"}]}
"vars" is everything the template sees (transformers adds tools and documents as None: so does the C side).
strftime_now is replaced by a fixed clock (2025-01-15 09:30:00) so that the data does not change by date;
test_jinja.c gives its renderer the same time. Run once: python3 tests/tools/render_templates.py
"""
import datetime
import json
import os
import sys

import jinja2
from transformers.utils import chat_template_utils as ctu

HERE = os.path.dirname(os.path.abspath(__file__))
TDIR = os.path.join(HERE, "..", "data", "templates")
FIXED = datetime.datetime(2025, 1, 15, 9, 30, 0)


class FixedClock(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED


# transformers' strftime_now calls datetime.now(): pin it.
ctu.datetime = FixedClock


def env_render(source, variables):
    """A snippet rendered by the environment transformers builds (compiled afresh)."""
    tmpl = ctu._cached_compile_jinja_template.__wrapped__(source) if hasattr(
        ctu._cached_compile_jinja_template, "__wrapped__") else ctu._cached_compile_jinja_template(source)
    return tmpl.render(**variables)


def chat_render(source, variables):
    """A chat template rendered as apply_chat_template does."""
    v = dict(variables)
    msgs = v.pop("messages")
    tools = v.pop("tools", None)
    v.pop("documents", None)
    gen = v.pop("add_generation_prompt", False)
    out = ctu.render_jinja_template(conversations=[msgs], tools=tools, chat_template=source, add_generation_prompt=gen,
                                    **v)
    return out[0][0]


SYS = {"role": "system", "content": "You are terse.\nAnswer in one line."}
U1 = {"role": "user", "content": "Hello!"}
A1 = {"role": "assistant", "content": "<think>\nThe user greets.\n</think>\n\nHi there.  "}
U2 = {"role": "user", "content": "  Héllo — 世界 🌍\nsecond line\n\n\tindented  "}
A2 = {"role": "assistant", "content": "Plain answer\nwith two lines"}
U3 = {"role": "user", "content": "What is 2+2?"}

CONVS = {
    "user": [U1],
    "sys-user": [SYS, U1],
    "multi": [SYS, U1, A1, U2],
    "multi-nosys": [U1, A1, U2, A2, U3],
    "ends-assistant": [U1, A2],
    "two-systems": [SYS, {"role": "system", "content": "Second system."}, U1],
}

# Tools (JSON schemas), for the templates that print them with tojson.
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city, in °C",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "e.g. Zürich"},
                                                         "days": {"type": "integer"}}, "required": ["city"]}}}]
TOOL_TEMPLATES = ["qwen3.jinja", "llama-3.3.jinja", "llama-3.2.jinja", "glm-4.6.jinja", "glm-4.7.jinja"]

# Per template: its bos/eos token texts, and whether it reads enable_thinking.
TEMPLATES = {
    "glm-4.6.jinja": ("", "<|endoftext|>", True),
    "glm-4.5-llamacpp.jinja": ("", "<|endoftext|>", True),
    "glm-4.7.jinja": ("", "<|endoftext|>", True),
    "deepseek-v3.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", False),
    "deepseek-v3.1.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", True),
    "qwen3.jinja": (None, "<|im_end|>", True),
    "llama-3.3.jinja": ("<|begin_of_text|>", "<|eot_id|>", False),
    "llama-3.2.jinja": ("<|begin_of_text|>", "<|eot_id|>", False),
    "smollm2.jinja": ("<|im_start|>", "<|im_end|>", False),
}

# Snippets: one construct each, rendered with these variables.
SNIP_VARS = {
    "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}],
    "s": "  Héllo, World  ", "n": 7, "f": 2.5, "l": [3, 1, 2], "d": {"b": 1, "a": [1, "x", None, True]},
    "none": None, "t": True, "e": "", "u8": "añ世🌍",
}
SNIPPETS = [
    ("text", "plain text\n"),
    ("var", "{{ n }} {{ f }} {{ s }} {{ none }} {{ t }} {{ l }} {{ d }} {{ missing }}|"),
    ("ws-dash", "a  {{- n -}}  b\n  {%- if t %} c {% endif -%}  d"),
    ("trim-lstrip", "x\n  {% if t %}\n    yes\n  {% endif %}\ny\n    {# comment #}\nz"),
    ("plus", "a\n  {%+ if t %}b{% endif %}\n"),
    ("comment", "a{# a comment {{ x }} #}b{#- c -#} c"),
    ("raw", "{% raw %}{{ not evaluated }}{% endraw %}"),
    ("for-loop", "{% for x in l %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.first }}/{{ loop.last }}/"
                 "{{ loop.length }}/{{ loop.revindex }}/{{ loop.revindex0 }}:{{ x }} {% endfor %}"),
    ("for-else", "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}"),
    ("for-if", "{% for x in l if x > 1 %}{{ x }}{{ loop.length }}{% endfor %}"),
    ("for-dict", "{% for k in d %}{{ k }}{% endfor %}{% for k, v in d.items() %}[{{ k }}={{ v }}]{% endfor %}"),
    ("for-prev", "{% for x in l %}{{ loop.previtem }}>{{ x }}>{{ loop.nextitem }};{% endfor %}"),
    ("for-nested", "{% for a in [1,2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}{% endfor %}"),
    ("for-break", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("for-scope", "{% set x = 1 %}{% for i in l %}{% set x = i %}{% endfor %}{{ x }}"),
    ("if-elif", "{% for v in [0, 1, 2] %}{% if v == 0 %}zero{% elif v == 1 %}one{% else %}many{% endif %},{% endfor %}"),
    ("set-ns", "{% set ns = namespace(a=1, b='x') %}{% for i in l %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}"),
    ("set-block", "{% set blk %}inside {{ n }}{% endset %}[{{ blk }}]"),
    ("set-tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}"),
    ("macro", "{% macro m(x, y='d') %}<{{ x }}|{{ y }}>{% endmacro %}{{ m(1) }}{{ m(2, 'e') }}{{ m(y=3, x=4) }}"),
    ("logic", "{{ t and n }} {{ none or 'dflt' }} {{ not t }} {{ 1 in l }} {{ 5 not in l }} {{ 'ell' in 'hello' }} {{ 'a' in d }}"),
    ("compare", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ n == 7.0 }} {{ n != 7 }} {{ 1 < 2 < 3 }} {{ [1,2] == [1,2] }}"),
    ("arith", "{{ 7 + 2 }} {{ 7 - 2 }} {{ 7 * 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 'ab' * 3 }} {{ 'a' ~ 1 ~ none }} {{ [1] + [2] }} {{ -n }}"),
    ("float-repr", "{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 3.0 }} {{ 10 / 4 }} {{ 1/3 }} {{ 123456789.0 * 1000 }} {{ 1e16 }}"),
    ("literals", "{{ 'a\\'b' }} {{ \"q\\\"d\" }} {{ 'x\\ny' }} {{ 'tab\\there' }} {{ 'u\\u00e9' }} {{ 'ab' 'cd' }} {{ [1, 'two', 3.0] }} {{ {'k': 'v', 'n': 1} }} {{ (1, 2) }} {{ 1_000 }} {{ True }} {{ None }}"),
    ("subscript", "{{ l[0] }} {{ l[-1] }} {{ d['a'][1] }} {{ d.a[3] }} {{ s[2] }} {{ u8[1] }} {{ messages[0].role }} {{ messages[1]['content'] }}"),
    ("slice", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ s[2:7] }} {{ u8[::-1] }} {{ l[::2] }} {{ 'abcdef'[-3:] }} {{ l[5:] }}"),
    ("ternary", "{{ 'yes' if t else 'no' }} {{ 'yes' if none else 'no' }} [{{ 'x' if none }}]"),
    ("tests", "{{ n is defined }} {{ missing is defined }} {{ missing is undefined }} {{ none is none }} {{ s is string }} "
              "{{ d is mapping }} {{ l is iterable }} {{ s is iterable }} {{ n is number }} {{ n is integer }} {{ f is float }} "
              "{{ n is odd }} {{ n is even }} {{ l is sequence }} {{ t is boolean }} {{ t is true }} {{ none is false }} "
              "{{ n is divisibleby 7 }} {{ n is eq 7 }} {{ n is not none }} {{ 'x' is in 'xy' }} {{ d is not mapping }}"),
    ("filters-str", "{{ s | trim }}|{{ s | upper }}|{{ s | lower }}|{{ 'ab cd' | capitalize }}|{{ 'hello world-x' | title }}|"
                    "{{ s | replace('l', 'L') }}|{{ s | replace('l', 'L', 1) }}|{{ s | length }}|{{ u8 | length }}|{{ 'x' | default('y') }}|"
                    "{{ missing | default('dflt') }}|{{ e | default('emp', true) }}|{{ missing | d('short') }}|{{ s | safe }}|{{ 'xxhixx' | trim('x') }}"),
    ("filters-list", "{{ l | first }} {{ l | last }} {{ l | length }} {{ l | join(',') }} {{ l | list }} {{ 'abc' | list }} "
                     "{{ l | sort }} {{ l | reverse | list }} {{ l | sum }} {{ l | min }} {{ l | max }} {{ [1,1,2] | unique | list }} "
                     "{{ l | map('string') | join('-') }} {{ d | items | list }} {{ d | length }} {{ [1, 2] | count }} {{ l | batch(2) | list }}"),
    ("filters-attr", "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} "
                     "{{ messages | rejectattr('role', 'eq', 'user') | map(attribute='content') | join }} "
                     "{{ messages | map(attribute='role') | list }} {{ messages | selectattr('content') | list | length }} "
                     "{{ [none, 1, 0, 'a'] | select | list }} {{ [1, 2, 3] | reject('odd') | list }} {{ l | select('gt', 1) | list }} "
                     "{{ messages | map(attribute='missing', default='-') | join }} {{ messages | sort(attribute='role') | map(attribute='role') | join }}"),
    ("filters-num", "{{ '42' | int }} {{ 3.9 | int }} {{ 'x' | int }} {{ '2.5' | float }} {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ n | string }}{{ l | string }} {{ 7 | float }}"),
    ("tojson", "{{ d | tojson }} {{ s | tojson }} {{ u8 | tojson }} {{ 'a\"b\\\\c\\n\\t\\u0001' | tojson }} {{ f | tojson }} {{ none | tojson }} "
               "{{ l | tojson(indent=2) }} {{ {'z': 1, 'a': {}} | tojson(sort_keys=true) }} {{ d | tojson(separators=(',', ':')) }} {{ u8 | tojson(ensure_ascii=true) }}"),
    ("dictsort", "{{ d | dictsort }} {% for k, v in {'b': 2, 'a': 1} | dictsort %}{{ k }}{{ v }}{% endfor %}"),
    ("str-methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ s.startswith('  H') }}|{{ s.endswith('d') }}|"
                    "{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ s.replace('l', '_') }}|{{ s.upper() }}|"
                    "{{ s.lower() }}|{{ 'hello world'.title() }}|{{ 'hello'.capitalize() }}|{{ s.find('l') }}|{{ s.find('zz') }}|"
                    "{{ 'a-b'.rsplit('-') }}|{{ '-'.join(['a', 'b']) }}|{{ 'abcabc'.count('b') }}|{{ 'ab'.startswith(('x', 'a')) }}|{{ '{} and {}'.format(1, 'x') }}|{{ 'abc'.rfind('c') }}"),
    ("dict-methods", "{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 5) }} {{ d['b'] }}"),
    ("range", "{{ range(3) | list }} {{ range(1, 4) | list }} {{ range(10, 0, -3) | list }}"),
    ("dict-global", "{{ dict(a=1, b='x') }} {{ dict(a=1).a }}"),
    ("strftime", "{{ strftime_now('%Y-%m-%d %H:%M') }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%B %A %j') }}"),
    ("messages-loop", "{% for m in messages %}{% if loop.first %}[{% endif %}{{ m.role }}:{{ m['content'] }}{% if not loop.last %}, {% endif %}{% if loop.last %}]{% endif %}{% endfor %}"),
    ("filter-block", "{% filter upper %}up {{ n }}{% endfilter %}"),
    ("generation", "{% generation %}gen {{ n }}{% endgeneration %}"),
    ("in-macro-scope", "{% set g = 'G' %}{% macro m() %}{{ g }}{{ n }}{% endmacro %}{{ m() }}"),
    ("unicode-text", "Ünïcödé ✓ {{ u8 }} {{ u8 | upper }} {{ 'ß'.upper() }}\n"),
    ("trailing-newline", "line\n"),
    ("crlf", "a\r\nb{% if t %}\r\nc{% endif %}\r\n"),
    ("loop-cycle", "{% for x in l %}{{ loop.cycle('odd', 'even') }} {% endfor %}"),
    ("string-iter", "{% for ch in u8 %}{{ ch }}.{% endfor %}"),
    ("concat-types", "{{ 'n=' ~ n ~ ' f=' ~ f ~ ' l=' ~ l }}"),
    ("neg-filter", "{{ -3 | abs }} {{ (-3) | abs }} {{ not none is none }}"),
    ("raise", "{% if t %}{{ raise_exception('bad role: ' ~ messages[0].role) }}{% endif %}"),
    ("is-mapping-iter", "{{ d is iterable }} {{ none is iterable }} {{ 'x' is sequence }} {{ d is sequence }} {{ messages[0] is mapping }}"),
    ("none-attr", "{{ messages[0].missing is none }} {{ messages[0].missing is defined }} {{ messages[0].get('role') }}"),
    ("equality-types", "{{ 1 == 1.0 }} {{ 1 == '1' }} {{ none == none }} {{ t == 1 }} {{ {'a': 1} == {'a': 1} }} {{ 'a' != 'b' }}"),
    ("loop-set-carry", "{% for i in [1, 2] %}{% if i == 2 %}[{{ y }}]{% endif %}{% set y = i %}{% endfor %}[{{ y }}]"),
    ("none-access", "[{{ none.x }}][{{ messages[5] }}][{{ d['zz'] }}][{{ missing ~ 'x' }}][{{ missing is none }}][{{ loop }}]"),
    ("ws-combos", "a\n  {%- if t -%}\n  b  \n  {%- endif -%}\n  c\n\t{% if t %}\td{% endif %}\n  {{ n }}  {# c #}\n   {# d #}\ne"),
    ("ws-raw", "x  {%- raw -%}  {{ y }}  {%- endraw -%}  z\n  {% raw %}\nr{% endraw %}\n"),
    ("macro-nested", "{% macro a(x) %}<{{ x }}>{% endmacro %}{% macro b(y, z=n) %}{{ a(y) }}{{ z }}{% endmacro %}{{ b(1) }}{{ b(2, z=3) }}"),
    ("sorting", "{{ [3, 1, 2] | sort(reverse=true) }} {{ ['b', 'A', 'a', 'B'] | sort }} {{ ['b', 'A', 'a'] | unique | list }} "
                "{{ ['b', 'A', 'a'] | sort(case_sensitive=true) }} {{ {'b': 1, 'a': 2} | dictsort(reverse=true) }} {{ {'b': 1, 'a': 2} | dictsort(by='value') }}"),
    ("escapes", "{{ '\\x41\\101\\u00e9\\U0001F600|\\\\|\\q' }}"),
    ("arith-more", "{{ 10 // 3 }} {{ 10.5 // 3 }} {{ -10.5 % 3 }} {{ 7 // -2 }} {{ 7 % -3 }} {{ 2 ** -1 }} {{ (1, 2) + (3,) }} {{ [1, 2] * 2 }} {{ 3 * 'ab' }}"),
    ("float-more", "{{ 1.0e-7 }} {{ 12345678901234567.0 }} {{ 0.5 }} {{ 100.0 }} {{ -0.0 }} {{ 2.0 ** 0.5 }} {{ 1e300 * 1e10 }} {{ 5e-324 }} {{ 1.5e16 }} {{ 123456789012345.6 }}"),
    ("containers", "{{ 'x' in ['x', 'y'] }} {{ 1 in {1: 2} }} {{ {1: 'a', 'b': none} }} {{ ('a', 'b') | join }} {{ ['x'] | first | upper }} {{ l.0 }} {{ (1,) }} {{ () }}"),
    ("str-more", "{{ 'é' | length }} {{ 'é' | upper }} {{ 'hello-world foo_bar' | title }} {{ ' '.join(['a', 'b']) }} {{ 'A B'.lower().split() }} "
                 "{{ 'abc'[5:] }}|{{ 'abc'[-10:2] }} {{ l[-100:] }} {{ l[::-2] }} {{ 'a, b, c'.split(', ') }} {{ 'x' ~ 1.0 }}"),
    ("tojson-more", "{{ messages | tojson }} {{ {'k': [1, {'z': 'é\\u2028'}], 'e': [], 'o': {}} | tojson(indent=2) }} {{ [1.0, -0.5, 1e100] | tojson }} {{ (1, 'a') | tojson }}"),
    ("ns-more", "{% set x = namespace() %}{% set x.y = [1] %}{{ x.y }}{% set x.y = x.y + [2] %}{{ x.y | length }}"),
    ("loop-nested-index", "{% for m in messages %}{{ loop.index }}{% for k in m %}{{ loop.index }}{{ k }}{% endfor %};{% endfor %}"),
    ("if-chain", "{% if not messages %}empty{% elif messages | length > 1 %}many{% else %}one{% endif %} [{{ 'a' if 0 }}] {{ 'b' if 1 else 'c' if 0 else 'd' }}"),
    ("tests-more", "{{ n is sameas 7 }} {{ none is sameas none }} {{ range is callable }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 3 is ge 3 }} {{ 3 is lt 2 }} {{ 'a' is ne 'b' }}"),
    ("filters-more", "{{ range(5) | batch(2, 'x') | list }} {{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ '<a href=\"x\">&</a>' | e }} {{ 'one two  three' | wordcount }} {{ [1, 2.5] | sum }} {{ [{'a': 2}, {'a': 3}] | sum(attribute='a') }} {{ ['b', 'a'] | max }} {{ [] | first }}|"),
    ("set-in-if", "{% if t %}{% set v = 'inner' %}{% endif %}{{ v }} {% for i in [1] %}{% if t %}{% set w = 'loop' %}{% endif %}{{ w }}{% endfor %}[{{ w }}]"),
]


def main():
    cases = []
    for fname, (bos, eos, thinks) in TEMPLATES.items():
        with open(os.path.join(TDIR, fname), encoding="utf-8") as fp:
            source = fp.read()
        for cname, msgs in CONVS.items():
            for gen in (True, False):
                think_opts = [None, False, True] if thinks else [None]
                for think in think_opts:
                    v = {"messages": msgs, "tools": None, "documents": None, "add_generation_prompt": gen,
                         "eos_token": eos}
                    if bos is not None:
                        v["bos_token"] = bos
                    if think is not None:
                        v["enable_thinking"] = think
                    name = f"{fname}:{cname}:gen={int(gen)}" + ("" if think is None else f":think={int(think)}")
                    case = {"name": name, "template": fname, "vars": v}
                    try:
                        case["want"] = chat_render(source, v)
                    except jinja2.TemplateError as e:
                        case["error"] = str(e)
                    cases.append(case)
    for fname in TOOL_TEMPLATES:
        with open(os.path.join(TDIR, fname), encoding="utf-8") as fp:
            source = fp.read()
        bos, eos, _ = TEMPLATES[fname]
        v = {"messages": [SYS, U1], "tools": TOOLS, "documents": None, "add_generation_prompt": True, "eos_token": eos}
        if bos is not None:
            v["bos_token"] = bos
        case = {"name": f"{fname}:tools", "template": fname, "vars": v}
        try:
            case["want"] = chat_render(source, v)
        except jinja2.TemplateError as e:
            case["error"] = str(e)
        cases.append(case)
    for name, source in SNIPPETS:
        case = {"name": "snippet:" + name, "source": source, "vars": SNIP_VARS}
        try:
            case["want"] = env_render(source, SNIP_VARS)
        except jinja2.TemplateError as e:
            case["error"] = str(e)
        cases.append(case)
    out = os.path.join(TDIR, "expected.json")
    with open(out, "w", encoding="utf-8") as fp:
        json.dump({"cases": cases}, fp, ensure_ascii=False, indent=0)
        fp.write("\n")
    errs = [c["name"] + ": " + c["error"] for c in cases if "error" in c]
    print(f"{out}: {len(cases)} cases, {len(errs)} errors", file=sys.stderr)
    for e in errs:
        print("  " + e, file=sys.stderr)


if __name__ == "__main__":
    main()
