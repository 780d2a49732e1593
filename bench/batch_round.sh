#!/usr/bin/env bash
# bench/batch_round.sh — one device call for the decode GEMVs of 2..8-token steps (k_gemv_tc, issue 8's
# batch 4 and 16 rows): the kernel checks, the GPU against the CPU at those step sizes, then old against
# new plans at every batch size, alternated, with one traced run. Plans are compiled on the development
# machine (PLANS holds <shape>-old.plan and <shape>-new.plan, e.g. llama, flash) and carried with bin,
# build/gpu/test_qgemv, build/tools, build/fixtures, build/bench.
#   ROUND=check|bench|all (all)  PLANS (build/probe/plans)  SHAPES ("llama flash")  BATCHES ("1 2 4 8 16")
#   ROUNDS (3)  STEPS (64)  L2 (a 2-layer bf16 plan for --verify, optional)  OLDRUN (the glmrun that runs the
#   old plans; default bin/glmrun, which runs the new ones)  QGEMV (1; 0 skips build/gpu/test_qgemv)
set -u
cd "$(dirname "$0")/.."
ROUND=${ROUND:-all} PLANS=${PLANS:-build/probe/plans} SHAPES=${SHAPES:-llama flash}
BATCHES=${BATCHES:-1 2 4 8 16} ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-64} L2=${L2:-} OLDRUN=${OLDRUN:-bin/glmrun}
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader || { echo "batch_round: no GPU"; exit 1; }
if [ "$ROUND" != bench ]; then
	if [ "${QGEMV:-1}" = 1 ]; then
		build/gpu/test_qgemv > /tmp/qgemv.log 2>&1
		echo "test_qgemv: $(tail -1 /tmp/qgemv.log) (gemv_tc rows: $(grep -c 'gemv_tc' /tmp/qgemv.log), failed: $(grep -c '^FAIL' /tmp/qgemv.log))"
		grep '^FAIL' /tmp/qgemv.log | head -20
	fi
	if [ -n "$L2" ]; then
		for toks in 1,2 1,2,3,4,5 1,2,3,4,5,6,7,8; do
			echo "verify $L2 prompt $toks: $(timeout 300 bin/glmrun "$L2" --device cuda --verify --round-bf16 --tokens $toks 2>&1 | tail -1)"
		done
	fi
	MODELS="llama qwen3 glm4_moe_lite" DTYPES=bf16 LENGTHS="2 5 8" OUT=/tmp/steps tests/gpu/steps.sh 2>&1 | tail -12
	# batches of 4 (k_gemv_tc in bf16) and 12 (cuBLASLt inside the decode graph) on the GPU against the same
	# batch on the CPU reference, sequence by sequence (ids identical, logits within the dtype's bound)
	for m in llama qwen3; do
		for dt in f32 bf16; do
			tol=1e-4 n=4
			[ $dt = bf16 ] && tol=2e-2 n=2 # bf16: one batched step after the prompts (a flipped argmax would part them)
			bin/glmc compile models/$m.lua --weights build/fixtures/$m --dtype $dt -o /tmp/bt-$m-$dt.plan >/dev/null 2>&1 ||
				{ echo "FAIL - batch $m $dt: compile"; continue; }
			for B in 4 12; do
				args=
				for i in $(seq $B); do args="$args --tokens $((i + 3)),$((2 * i + 5)),$((i * i % 50 + 1))"; done
				# shellcheck disable=SC2086
				bin/glmrun /tmp/bt-$m-$dt.plan --device cuda $args -n $n --dump-logits /tmp/bg >/tmp/bg.ids 2>/tmp/bg.err &&
					bin/glmrun /tmp/bt-$m-$dt.plan --device cpu $args -n $n --dump-logits /tmp/bc >/tmp/bc.ids 2>/tmp/bc.err ||
					{ echo "FAIL - batch $B $m $dt: $(head -c 200 /tmp/bg.err /tmp/bc.err)"; continue; }
				worst=0 bad=0
				for i in $(seq 0 $((B - 1))); do
					r=$(build/tools/cmplogits --pair /tmp/bg.$i /tmp/bc.$i $tol 2>&1) || bad=$((bad + 1))
					worst="$worst $(echo "$r" | sed -n 's/.*rel-L2 \([0-9.e+-]*\).*/\1/p')"
				done
				same=$(cmp -s /tmp/bg.ids /tmp/bc.ids && echo "ids identical" || echo "ids differ")
				# f32 must pick the same ids; bf16 may flip a near tie (its logits still bounded)
				[ $dt = f32 ] && [ "$same" != "ids identical" ] && bad=$((bad + 1))
				echo "$([ $bad = 0 ] && echo ok || echo FAIL) - batch of $B, $m $dt, GPU against CPU: $same, $bad of $B over $tol (rel-L2:$worst)"
			done
		done
	done
fi
[ "$ROUND" = check ] && exit 0
export LD_LIBRARY_PATH=$PWD/build/bench${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
med() { printf '%s\n' $1 | grep -v fail | sort -n | awk '{a[NR]=$1} END{if(NR) print a[int((NR+1)/2)]; else print "fail"}'; }
for s in $SHAPES; do
	for b in $BATCHES; do
		fl=; [ "$b" != 1 ] && fl="--batch $b"
		declare -A ms=()
		for r in $(seq "$ROUNDS"); do
			for v in old new; do
				run=bin/glmrun
				[ $v = old ] && run=$OLDRUN
				# shellcheck disable=SC2086
				m=$(timeout 150 $run "$PLANS/$s-$v.plan" --bench -n "$STEPS" $fl 2>&1 | sed -n 's/^ms_per_step_median: //p')
				ms[$v]="${ms[$v]:-} ${m:-fail}"
			done
		done
		o=$(med "${ms[old]}") n=$(med "${ms[new]}")
		echo "ab $s batch $b: old $o new $n ms/step (old:${ms[old]} new:${ms[new]}) tok/s $(awk -v b="$b" -v a="$o" -v c="$n" 'BEGIN{if(a>0&&c>0) printf "%.0f -> %.0f", 1000*b/a, 1000*b/c}')"
		unset ms
	done
	if [ -f build/bench/libglmtrace.so ]; then
		for b in 4; do
			CUDA_INJECTION64_PATH=$PWD/build/bench/libglmtrace.so GLM_TRACE=/tmp/$s-b$b.tsv timeout 150 bin/glmrun "$PLANS/$s-new.plan" \
				--bench -n "$STEPS" --batch $b >/dev/null 2>&1
			echo "trace $s new batch $b:"; python3 bench/trace.py /tmp/$s-b$b.tsv --top 12 2>&1 | sed -n '1,/^first /p' | sed '$d'
		done
	fi
done
