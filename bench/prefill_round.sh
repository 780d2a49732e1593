#!/usr/bin/env bash
# bench/prefill_round.sh — this stop's whole device round in one call, most wanted first: the kernel tests
# (build/gpu/test_kernels), the prefill attentions before/after (bench/attn_round.sh, one round), moe_tc's
# bf16 hid against the float-hid plan with the 8K prefill's kernels by name (bench/hid_round.sh's bench,
# one round, NEW=a1: both changes), then tests/gpu/prefill.sh on dense and MoE fixtures (their bf16 runs
# against the CPU's --round-bf16). Carry bin, build/gpu/test_kernels, build/tools, build/fixtures,
# build/probe (plans and the CUPTI tracer).
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
say() { echo "[$(printf '%4d' $(($(date +%s) - T0)))s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader || { echo "prefill_round: no GPU"; exit 1; }
timeout 200 build/gpu/test_kernels >/tmp/tk.log 2>&1
say "test_kernels (rc $?): $(tail -1 /tmp/tk.log); failed: $(grep -c '^FAIL' /tmp/tk.log)"
grep '^FAIL' /tmp/tk.log | head -20
grep -E "attn_tc|mla_xattn" /tmp/tk.log | head -12
ROUNDS=${ROUNDS:-1} bench/attn_round.sh 2>&1 | sed 1d
ROUND=bench ROUNDS=${ROUNDS:-1} NEW=a1 bench/hid_round.sh 2>&1 | sed 1d
MODELS=${PREFILL_MODELS:-llama qwen3 glm4_moe_lite qwen3_moe} LENGTHS="9 65 300" OUT=/tmp/glm-prefill \
	timeout 240 tests/gpu/prefill.sh >/tmp/pf.log 2>&1
say "prefill.sh (rc $?): $(grep -c '^ok' /tmp/pf.log) ok, $(grep -c '^FAIL' /tmp/pf.log) failed"
grep -v '^ok' /tmp/pf.log | head -30
