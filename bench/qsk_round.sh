#!/usr/bin/env bash
# bench/qsk_round.sh — one device call for k_qgemv_sk (the one-token Q4_K/Q6_K SwiGLU + down GEMV past
# K 8192 as one stream of weights, bench/NOTES.md entry 46): the GPU against the CPU reference (--verify
# --round-bf16) on plans that emit it, then the old against the new plan of a shape in turn, and the new
# plan's in-graph kernel times (bench/trace.py). Plans are compiled on the development machine and carried:
#   PLANS (build/probe3): <v>.plan for each of VPLANS, <s>-old.plan (OLDRUN, the glmrun of its plan format)
#   and <s>-new.plan for each of SHAPES.  VPLANS ("llamaq2 g5l2"; empty: none)  SHAPES ("glm5")  ROUNDS (3)  STEPS (64)
set -u
cd "$(dirname "$0")/.."
PLANS=${PLANS:-build/probe3} VPLANS=${VPLANS-llamaq2 g5l2} SHAPES=${SHAPES:-glm5} ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-64}
OLDRUN=${OLDRUN:-oldbin/glmrun_base}
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader || { echo "qsk_round: no GPU"; exit 1; }
for p in $VPLANS; do
	for n in 2 7; do
		toks=$(seq -s, 1 $n | sed 's/,$//')
		timeout 400 bin/glmrun $PLANS/$p.plan --device cuda --verify --round-bf16 --tokens $toks -n 3 >/tmp/qv.txt 2>&1
		echo "verify $p prompt $n: $(tail -1 /tmp/qv.txt)"
		grep -iE "above|error" /tmp/qv.txt | grep -v '^verify: FAILED' | head -3
	done
done
for s in $SHAPES; do
	o= n=
	for r in $(seq $ROUNDS); do
		o="$o $(timeout 120 $OLDRUN $PLANS/$s-old.plan --bench -n $STEPS 2>&1 | sed -n 's/^ms_per_step_median: //p')"
		n="$n $(timeout 120 bin/glmrun $PLANS/$s-new.plan --bench -n $STEPS 2>&1 | sed -n 's/^ms_per_step_median: //p')"
	done
	echo "bench $s ms/step old:$o new:$n"
	if [ -f build/bench/libglmtrace.so ]; then
		for v in old new; do
			run=bin/glmrun; [ $v = old ] && run=$OLDRUN
			CUDA_INJECTION64_PATH=$PWD/build/bench/libglmtrace.so GLM_TRACE=/tmp/tr-$s-$v $run $PLANS/$s-$v.plan --bench -n 32 >/dev/null 2>&1
			echo "trace $s $v:"; LD_LIBRARY_PATH=build/bench python3 bench/trace.py /tmp/tr-$s-$v --top 8 2>&1 | head -14
		done
	fi
done
