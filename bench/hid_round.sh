#!/usr/bin/env bash
# bench/hid_round.sh — one device call for moe_tc's bf16 hidden rows (bench/NOTES.md 71) and the shared
# --bench prefill (73): the kernel tests (build/gpu/test_kernels), tests/gpu/prefill.sh on the MoE
# fixtures, then GLM-4.7-Flash plans of the float-hid kernels (PLANS/flash-old.plan, compiled by the glmc of
# that commit) against the bf16-hid ones (PLANS/flash-$NEW.plan), both run by this bin/glmrun, alternated:
# a batch of 32 prompts of 160 tokens (prefill_ms, then decode ms/step), 8 prompts of 1024, one of 8192.
# Carry bin, build/gpu, build/tools, build/fixtures and PLANS.
#   ROUND=check|bench|all (all)  PLANS (build/probe/plans)  ROUNDS (2)  NEW (new)  PREFILL_MODELS (the MoE
#   fixtures)  KERNELS (1; 0 skips test_kernels)
set -u
cd "$(dirname "$0")/.."
ROUND=${ROUND:-all} PLANS=${PLANS:-build/probe/plans} ROUNDS=${ROUNDS:-2} NEW=${NEW:-new}
PREFILL_MODELS=${PREFILL_MODELS:-qwen3_moe glm4_moe deepseek_v3 glm4_moe_lite}
T0=$(date +%s)
say() { echo "[$(printf '%4d' $(($(date +%s) - T0)))s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader || { echo "hid_round: no GPU"; exit 1; }
if [ "$ROUND" != bench ] && [ "${KERNELS:-1}" = 1 ]; then
	timeout 240 build/gpu/test_kernels >/tmp/tk.log 2>&1
	say "test_kernels (rc $?): $(tail -1 /tmp/tk.log); failed: $(grep -c '^FAIL' /tmp/tk.log); moe_tc rows: $(grep -ci 'moe_tc\|moe_up_tc\|moe_down_tc' /tmp/tk.log)"
	grep '^FAIL' /tmp/tk.log | head -20
fi
if [ "$ROUND" != bench ]; then
	MODELS="$PREFILL_MODELS" LENGTHS="9 65 300" OUT=/tmp/glm-prefill timeout 300 tests/gpu/prefill.sh >/tmp/pf.log 2>&1
	say "prefill.sh (rc $?): $(grep -c '^ok' /tmp/pf.log) ok, $(grep -c '^FAIL' /tmp/pf.log) failed"
	grep -v '^ok' /tmp/pf.log | head -30
fi
[ "$ROUND" = check ] && exit 0
val() { sed -n "s/^$1: \([^ ]*\).*/\1/p" | head -1; }
med() { printf '%s\n' $1 | grep -v fail | sort -n | awk '{a[NR]=$1} END{if(NR) print a[int((NR+1)/2)]; else print "fail"}'; }
# case NAME ARGS...: ROUNDS alternated runs of both plans; prints prefill_ms and ms_per_step_median medians.
case_ab() {
	local name=$1
	shift
	local po= pn= so= sn=
	for r in $(seq "$ROUNDS"); do
		for v in old new; do
			out=$(timeout 200 bin/glmrun "$PLANS/flash-$([ $v = old ] && echo old || echo "$NEW").plan" --bench "$@" 2>&1)
			p=$(echo "$out" | val prefill_ms) s=$(echo "$out" | val ms_per_step_median)
			[ -z "$p" ] && echo "  $v failed: $(echo "$out" | tail -1)"
			if [ $v = old ]; then po="$po ${p:-fail}" so="$so ${s:-fail}"; else pn="$pn ${p:-fail}" sn="$sn ${s:-fail}"; fi
		done
	done
	say "$name: prefill_ms old $(med "$po") new $(med "$pn") (old:$po new:$pn); ms/step old $(med "$so") new $(med "$sn")"
}
case_ab "batch 32 x 160" -n 16 --batch 32 --bench-prompt 160
case_ab "batch 8 x 1024" -n 8 --batch 8 --bench-prompt 1024 -c 1100
case_ab "one 8192" -n 4 --bench-prompt 8192 -c 8300
# Where the 8K prefill goes (new plan): CUPTI's kernels outside the decode graphs (graph id 0), summed by
# name over one --bench run: its two prefills (--bench times the second), and glm_rand_* making the random
# weights. TRACE_LIB: a folder holding libglmtrace.so and libcupti.so.13.
TRACE_LIB=${TRACE_LIB:-build/probe/trace}
if [ -f "$TRACE_LIB/libglmtrace.so" ]; then
	CUDA_INJECTION64_PATH=$PWD/$TRACE_LIB/libglmtrace.so GLM_TRACE=/tmp/p8k.tsv LD_LIBRARY_PATH=$PWD/$TRACE_LIB \
		timeout 200 bin/glmrun "$PLANS/flash-$NEW.plan" --bench -n 4 --bench-prompt 8192 -c 8300 >/tmp/p8k.out 2>&1
	say "8K prefill trace (prefill_ms $(val prefill_ms </tmp/p8k.out)): kernel ms outside graphs, by name"
	# "glm_kN k_template" lines: the wrapper names the trace shows, and what each runs (from the plan's source)
	grep -ao 'glm_k[0-9]*([^)]*) *{[^}]*}' "$PLANS/flash-$NEW.plan" |
		sed -E 's/^(glm_k[0-9]+)\(.*\{.*[^a-z_](k_[a-z_0-9]+)[<(].*/\1 \2/' | awk 'NF == 2' >/tmp/p8k.kmap
	awk 'FNR == NR { m[$1] = $2; next }
		$4 == 0 { n = $1; sub(/\(.*/, "", n); if (n in m) n = n " " m[n]; t[n] += ($3 - $2) / 1e6; c[n]++; all += ($3 - $2) / 1e6 }
		END { for (k in t) printf "  %9.2f ms %6d  %s\n", t[k], c[k], k; printf "  %9.2f ms total\n", all }' \
		/tmp/p8k.kmap /tmp/p8k.tsv |
		sort -rn | head -25
fi
