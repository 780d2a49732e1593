#!/usr/bin/env bash
# tests/gpu/prefill.sh — the tensor-core prefill kernels (ops/prefill.cuh: k_attn_tc, and k_gemm_tc, which
# runs where cuBLASLt does not: --no-cublaslt) on every fixture's bf16 plan at prompt lengths that cross
# the 64-token query tiles and 64-key tiles (9: the first prefill step; 63, 64, 65, 130; 300: five key
# tiles), random token ids (seeded). Each GPU run is held to the CPU's prediction of it (glmrun
# --round-bf16: every value rounded as the GPU stores it; 1e-2, as tests/gpu/run.sh) and its per-layer
# --verify --round-bf16 passes; f32 plans (which keep the CUDA-core kernels) to the CPU at 1e-4.
# Fixtures that route (MoE experts, DSA's top-k keys) may pick another expert or key than the CPU on a
# near tie of bf16 scores, and then differ past any bound whatever the attention kernel: with BASE (a
# folder with the glmc and glmrun of an earlier build, e.g. the CUDA-core prefill) a run above the bound
# passes when the earlier build's run of the same tokens is above it too, and is reported with both.
# Env: MODELS, LENGTHS, FIX (build/fixtures), OUT (/tmp/glm-prefill), BASE.
set -u
cd "$(dirname "$0")/../.."
FIX=${FIX:-build/fixtures}
OUT=${OUT:-/tmp/glm-prefill}
MODELS=${MODELS:-llama qwen3 qwen3_moe glm4_moe deepseek_v3 glm4_moe_lite glm_moe_dsa}
LENGTHS=${LENGTHS:-9 63 64 65 130 300}
BASE=${BASE:-}
CMP=build/tools/cmplogits
mkdir -p "$OUT"
pass=0
fail=0
say() { # STATUS WHAT DETAIL
	echo "$1 - $2: $3"
	if [ "$1" = ok ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
}
for m in $MODELS; do
	model=$m
	[ $m = glm_moe_dsa ] && model=glm5
	V=$(python3 -c "import json; print(json.load(open('$FIX/$m/config.json'))['vocab_size'])")
	for dt in bf16 f32; do
		plan=$OUT/$m-$dt.plan
		if ! bin/glmc compile models/$model.lua --weights $FIX/$m --dtype $dt -o $plan 2>"$OUT/err"; then
			say FAIL "$m $dt compile" "$(head -c 300 "$OUT/err")"
			continue
		fi
		[ -z "$BASE" ] || $BASE/glmc compile models/$model.lua --weights $FIX/$m --dtype $dt -o $OUT/$m-$dt-base.plan 2>"$OUT/err"
		echo "# $m $dt: $(strings $plan | grep -o 'k_attn_tc<[0-9]*>\|k_gemm_tc<[a-z]*>\|k_attention<[a-z]*, 4>' | sort -u | tr '\n' ' ')"
		for L in $LENGTHS; do
			[ $dt = f32 ] && [ $L != 130 ] && continue
			toks=$(python3 -c "import random; random.seed($L); print(','.join(str(random.randrange($V)) for _ in range($L)))")
			c=$OUT/$m-$dt-$L-cpu.f32
			if [ $dt = bf16 ]; then
				bin/glmrun $plan --device cpu --round-bf16 -c 1024 --tokens "$toks" -n 1 --dump-logits $c >/dev/null 2>"$OUT/err.c"
			else
				bin/glmrun $plan --device cpu -c 1024 --tokens "$toks" -n 1 --dump-logits $c >/dev/null 2>"$OUT/err.c"
			fi
			for lt in "" --no-cublaslt; do
				gg=$OUT/$m-$dt-$L-gpu$lt.f32
				bin/glmrun $plan --device cuda $lt -c 1024 --tokens "$toks" -n 1 --dump-logits $gg >/dev/null 2>"$OUT/err.g"
				rg=$?
				tol=1e-2
				[ $dt = f32 ] && tol=1e-4
				r=$($CMP --pair $gg $c $tol 2>&1)
				rc=$?
				st=FAIL
				[ $rg = 0 ] && [ $rc = 0 ] && st=ok
				if [ $st = FAIL ] && [ $rg = 0 ] && [ -n "$BASE" ]; then
					bf=$OUT/$m-$dt-$L-base.f32
					[ -s $bf ] || $BASE/glmrun $OUT/$m-$dt-base.plan --device cuda -c 1024 --tokens "$toks" -n 1 \
						--dump-logits $bf >/dev/null 2>&1
					rb=$($CMP --pair $bf $c $tol 2>&1) && rbc=0 || rbc=1
					[ $rbc = 1 ] && st=ok
					r="$r; earlier build: $rb"
				fi
				say $st "$m $dt $L tokens ${lt:-cuBLASLt} vs CPU" "$r $(head -c 200 "$OUT/err.g")"
			done
			if [ $dt = bf16 ] && { [ $L = 130 ] || [ $L = 300 ]; }; then
				bin/glmrun $plan --device cuda --no-cublaslt -c 1024 --tokens "$toks" -n 1 --verify --round-bf16 >"$OUT/v" 2>&1
				rc=$?
				grep -iE "attention|worst|fail" "$OUT/v" | head -4 | sed "s/^/  [$m $L] /"
				say "$([ $rc = 0 ] && echo ok || echo FAIL)" "$m bf16 $L tokens --verify --round-bf16" "$(tail -1 "$OUT/v")"
			fi
		done
	done
done
echo "prefill: $pass passed, $fail failed"
[ $fail = 0 ]
