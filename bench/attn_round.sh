#!/usr/bin/env bash
# bench/attn_round.sh — one device call for the prefill attentions' probabilities rounded once to bf16
# and k_attn_tc's two-stage 32-key tiles (ops/prefill.cuh): plans compiled before the change (PLANS/<shape>-a0.plan)
# against after it (<shape>-a1.plan), both run by this bin/glmrun, alternated, ROUNDS times: Llama-3-8B's
# prefill at 8K and 32K tokens, GLM-4.7-Flash's at 8K (TTFT as glmrun --bench's prefill_ms, and the decode
# step after it). Carry bin and PLANS.   PLANS (build/probe/plans)  ROUNDS (2)  CASES (all: "llama:8192
# llama:32768 flash:8192")
set -u
cd "$(dirname "$0")/.."
PLANS=${PLANS:-build/probe/plans} ROUNDS=${ROUNDS:-2} CASES=${CASES:-llama:8192 llama:32768 flash:8192}
T0=$(date +%s)
say() { echo "[$(printf '%4d' $(($(date +%s) - T0)))s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader || { echo "attn_round: no GPU"; exit 1; }
val() { sed -n "s/^$1: \([^ ]*\).*/\1/p" | head -1; }
med() { printf '%s\n' $1 | grep -v fail | sort -n | awk '{a[NR]=$1} END{if(NR) print a[int((NR+1)/2)]; else print "fail"}'; }
for c in $CASES; do
	s=${c%%:*} L=${c#*:}
	po= pn= so= sn=
	for r in $(seq "$ROUNDS"); do
		for v in a0 a1; do
			out=$(timeout 240 bin/glmrun "$PLANS/$s-$v.plan" --bench -n 8 --bench-prompt "$L" -c $((L + 64)) 2>&1)
			p=$(echo "$out" | val prefill_ms) st=$(echo "$out" | val ms_per_step_median)
			[ -z "$p" ] && echo "  $s $v failed: $(echo "$out" | tail -1)"
			if [ $v = a0 ]; then po="$po ${p:-fail}" so="$so ${st:-fail}"; else pn="$pn ${p:-fail}" sn="$sn ${st:-fail}"; fi
		done
	done
	say "$s $L: prefill_ms before $(med "$po") after $(med "$pn") (before:$po after:$pn); decode ms/step $(med "$so") / $(med "$sn")"
done
