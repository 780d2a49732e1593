#!/usr/bin/env bash
# tests/gpu/steps.sh — the decode-step kernels at every step size that takes them: each fixture's prompt cut
# to 1, 2, 3, 5, 8 and 9 tokens is prefilled on the GPU (f32: and decoded 3 more tokens; bf16 may pick
# other tokens than the CPU, so its run stops after the prefill); every logits row must match the same
# plan run by the CPU reference (f32 1e-4, bf16 2e-2, the GPU contract) and be finite.
# Steps of up to 8 tokens run the fused decode GEMVs; 9 takes the prefill kernels. Plans come from
# $OUT/<fixture>-<dtype>.plan when tests/gpu/run.sh made them, else are compiled here. Env: MODELS, DTYPES,
# LENGTHS, GPUFLAGS (more glmrun flags for the GPU runs, e.g. --pdl: the same bounds must hold), GLMC_FLAGS
# (more glmc flags for the plans it compiles, e.g. --fallback all).
set -u
cd "$(dirname "$0")/../.."
FIX=${FIX:-build/fixtures}
OUT=${OUT:-/tmp/glm-gpu}
MODELS=${MODELS:-llama qwen3 qwen3_moe glm4_moe deepseek_v3 glm4_moe_lite glm_moe_dsa}
DTYPES=${DTYPES:-f32 bf16}
LENGTHS=${LENGTHS:-1 2 3 5 8 9}
GPUFLAGS=${GPUFLAGS:-} # more glmrun flags for the GPU runs (e.g. --pdl)
CMP=build/tools/cmplogits
mkdir -p "$OUT"
pass=0
fail=0
for m in $MODELS; do
	model=$m
	[ $m = glm_moe_dsa ] && model=glm5
	for dt in $DTYPES; do
		tol=1e-4
		[ $dt = bf16 ] && tol=2e-2
		plan=$OUT/$m-$dt.plan
		if [ ! -s "$plan" ] && ! bin/glmc compile models/$model.lua --weights $FIX/$m --dtype $dt ${GLMC_FLAGS:-} -o $plan 2>"$OUT/err"; then
			echo "FAIL - $m $dt: compile: $(head -c 300 "$OUT/err")"
			fail=$((fail + 1))
			continue
		fi
		n=4
		[ $dt = bf16 ] && n=1
		for np in $LENGTHS; do
			toks=$($CMP --prompt $FIX/$m | cut -d, -f1-$np)
			g=$OUT/steps-$m-$dt-$np-gpu.f32
			c=$OUT/steps-$m-$dt-$np-cpu.f32
			bin/glmrun $plan --device cuda $GPUFLAGS --tokens "$toks" -n $n --dump-logits $g >/dev/null 2>"$OUT/err.g"
			rg=$?
			bin/glmrun $plan --device cpu --tokens "$toks" -n $n --dump-logits $c >/dev/null 2>"$OUT/err.c"
			r=$($CMP --pair $g $c $tol 2>&1)
			rc=$?
			what="$m $dt $np-token prompt$([ $n = 4 ] && echo ' + 3 decode steps')"
			if [ $rg = 0 ] && [ $rc = 0 ]; then
				echo "ok - $what: $r"
				pass=$((pass + 1))
			else
				echo "FAIL - $what: rc $rg $r $(head -c 200 "$OUT/err.g")"
				fail=$((fail + 1))
			fi
		done
	done
done
echo "steps: $pass passed, $fail failed"
[ $fail = 0 ]
