#!/usr/bin/env bash
# bench/plans_ab.sh — one device call comparing plans that differ only in their kernels (issue 8):
# plans compiled on the development machine and carried, <PLANS>/<shape>-<variant>.plan. For each shape:
# every variant's logits (--dump-logits, a 7-token prompt and 4 greedy steps) compared byte for byte with
# the first variant's (a change meant to keep the arithmetic must print "identical"), then the variants
# benchmarked ROUNDS times in turn (A B C A B C ..., medians of STEPS steps), then each one's kernels in
# the graph (bench/trace.py; the KERNELS rows, e.g. "glm_k19|glm_k27", and the step's totals).
#   PLANS (build/probe4)  SHAPES ("glm5:old,new")  ROUNDS (3)  STEPS (64)  KERNELS (rows to print)
#   BATCH (1; more: the benchmark rows again with --batch BATCH)
set -u
cd "$(dirname "$0")/.."
PLANS=${PLANS:-build/probe4} SHAPES=${SHAPES:-glm5:old,new} ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-64} KERNELS=${KERNELS:-}
BATCH=${BATCH:-1}
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader || { echo "plans_ab: no GPU"; exit 1; }
for sv in $SHAPES; do
	s=${sv%%:*} vs=$(echo "${sv#*:}" | tr , ' ')
	first=${vs%% *}
	for v in $vs; do
		timeout 300 bin/glmrun $PLANS/$s-$v.plan --device cuda --tokens 1,2,3,4,5,6,7 -n 4 --dump-logits /tmp/ab-lg-$s-$v >/tmp/ab-out 2>&1 ||
			{ echo "logits $s $v: glmrun failed: $(tail -1 /tmp/ab-out)"; continue; }
		[ $v = $first ] && continue
		cmp -s /tmp/ab-lg-$s-$first /tmp/ab-lg-$s-$v && echo "logits $s $v: identical to $first" || echo "logits $s $v: DIFFER from $first"
	done
	for b in $(echo 1 $BATCH | tr ' ' '\n' | sort -un); do
		bf=""
		[ $b -gt 1 ] && bf="--batch $b"
		declare -A ms=()
		for r in $(seq $ROUNDS); do
			for v in $vs; do
				ms[$v]="${ms[$v]:-} $(timeout 200 bin/glmrun $PLANS/$s-$v.plan --bench $bf -n $STEPS 2>&1 | sed -n 's/^ms_per_step_median: //p')"
			done
		done
		for v in $vs; do echo "bench $s $v batch $b ms/step:${ms[$v]}"; done
		unset ms
	done
	[ -f build/bench/libglmtrace.so ] || continue
	for v in $vs; do
		CUDA_INJECTION64_PATH=$PWD/build/bench/libglmtrace.so GLM_TRACE=/tmp/ab-tr-$s-$v bin/glmrun $PLANS/$s-$v.plan --bench -n 32 >/dev/null 2>&1
		python3 bench/trace.py /tmp/ab-tr-$s-$v --top 400 >/tmp/ab-tr.txt 2>&1
		echo "trace $s $v: $(grep '^trace_step_us' /tmp/ab-tr.txt)"
		[ -n "$KERNELS" ] && grep -E "^  ($KERNELS) +[0-9]" /tmp/ab-tr.txt | head -8
	done
done
