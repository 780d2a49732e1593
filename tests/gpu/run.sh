#!/usr/bin/env bash
# tests/gpu/run.sh — one GPU round on the device machine. Builds nothing there: bin/, build/gpu/ and the
# fixtures in build/fixtures/ come from `make gpu-bundle` on the development machine. Runs the kernel
# tests, every fixture through --device cuda (f32 and bf16) against the fixture logits and the CPU
# reference (--verify), each bf16 run against the CPU's prediction of it (glmrun --round-bf16),
# the sampling contract, and compute-sanitizer on one fixture; prints a table.
# STEPS_LENGTHS (prompt lengths for tests/gpu/steps.sh; default 1 2 3 5 8 9), SKIP_TP=1 (tp.sh run on
# its own) and SKIP_KERNELS=1 (the kernel test binaries run on their own) shorten a round that must fit
# the device's 10-minute command limit.
# GLMC_FLAGS (e.g. "--fallback all") compiles the fixture plans with more glmc flags.
set -u
cd "$(dirname "$0")/../.."
FIX=${FIX:-build/fixtures}
OUT=${OUT:-/tmp/glm-gpu}
mkdir -p "$OUT"
CMP=build/tools/cmplogits
rows=()
pass=0
fail=0
record() { # NAME STATUS DETAIL (also printed at once, so a run cut by a time limit still shows it)
	rows+=("$(printf '%-44s %-5s %s' "$1" "$2" "$3")")
	echo "row: ${rows[-1]}" 
	case "$2" in ok) pass=$((pass + 1)) ;; info) ;; *) fail=$((fail + 1)) ;; esac
}
record_tap() { # PREFIX LOG: a row per "ok - NAME" / "FAIL - NAME" line of a test script's log
	while IFS= read -r line; do
		case "$line" in
		"ok - "*) record "$1: ${line#ok - }" ok "" ;;
		"FAIL - "*) record "$1: ${line#FAIL - }" FAIL "" ;;
		esac
	done <"$2"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

if [ "${SKIP_KERNELS:-0}" = 1 ]; then
	record "kernel tests (test_kernels, test_fused, test_qgemv)" info "skipped (SKIP_KERNELS=1)"
elif [ -x build/gpu/test_kernels ]; then
	build/gpu/test_kernels >"$OUT/kernels.log" 2>&1
	rc=$?
	grep '^FAIL' "$OUT/kernels.log" | head -20
	record "kernel tests (build/gpu/test_kernels)" "$([ $rc = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$OUT/kernels.log")"
else
	record "kernel tests" FAIL "build/gpu/test_kernels missing"
fi
if [ "${SKIP_KERNELS:-0}" = 1 ]; then
	:
elif [ -x build/gpu/test_fused ]; then
	build/gpu/test_fused >"$OUT/fused.log" 2>&1
	rc=$?
	grep '^FAIL' "$OUT/fused.log" | head -20
	record "fused kernel tests (build/gpu/test_fused)" "$([ $rc = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$OUT/fused.log")"
else
	record "fused kernel tests" FAIL "build/gpu/test_fused missing"
fi

[ "${SKIP_KERNELS:-0}" = 1 ] ||
	{ build/gpu/test_qgemv >"$OUT/qgemv.log" 2>&1; record "quantized kernels (build/gpu/test_qgemv)" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep '^FAIL' "$OUT/qgemv.log" | head -3) $(tail -1 "$OUT/qgemv.log")"; }

for m in llama qwen3 qwen3_moe glm4_moe deepseek_v3 glm4_moe_lite glm_moe_dsa; do
	model=$m
	[ $m = glm_moe_dsa ] && model=glm5
	prompt=$($CMP --prompt $FIX/$m)
	want=$($CMP --greedy $FIX/$m)
	for dt in f32 bf16; do
		tol=1e-4
		[ $dt = bf16 ] && tol=2e-2
		plan=$OUT/$m-$dt.plan
		if ! bin/glmc compile models/$model.lua --weights $FIX/$m --dtype $dt ${GLMC_FLAGS:-} -o $plan 2>"$OUT/err" ||
			grep -q "CPU only" "$OUT/err"; then
			record "$m $dt compile" FAIL "$(head -c 300 "$OUT/err")"
			continue
		fi
		got=$(bin/glmrun $plan --device cuda --tokens "$prompt" -n 12 --dump-logits $OUT/$m-$dt.f32 --stats 2>"$OUT/$m-$dt.stats")
		grep stats: "$OUT/$m-$dt.stats" | sed "s/^/  [$m $dt] /"
		if [ "$got" = "$want" ]; then
			record "$m $dt greedy tokens" ok "$got"
		elif [ $dt = bf16 ] && [ -n "$got" ]; then
			# bf16 rounding may flip a near-tie of these tiny random models; the logits below decide.
			record "$m $dt greedy tokens (bf16: informational)" info "got '$got' want '$want'"
		else
			record "$m $dt greedy tokens" FAIL "got '$got' want '$want' $(grep -v stats: "$OUT/$m-$dt.stats" | head -c 300)"
		fi
		if [ "$got" = "$want" ]; then
			r=$($CMP $OUT/$m-$dt.f32 $FIX/$m $tol)
			record "$m $dt logits vs fixture" "$([ $? = 0 ] && echo ok || echo FAIL)" "$r"
		else
			# Teacher-forced: the prompt and the fixture's greedy tokens in one prefill give every row the
			# fixture has, whatever this run sampled (n_prompt + 12 - 1 rows, -n 1). Not exact for DSA,
			# whose tie rule depends on how the tokens are split into steps.
			forced="$prompt,$(echo $want | tr ' ' ',' | cut -d, -f1-11)"
			bin/glmrun $plan --device cuda --tokens "$forced" -n 1 --dump-logits $OUT/$m-$dt-forced.f32 >/dev/null 2>"$OUT/err"
			r=$($CMP $OUT/$m-$dt-forced.f32 $FIX/$m $tol 2>&1)
			record "$m $dt teacher-forced logits vs fixture" "$([ $? = 0 ] && echo ok || echo FAIL)" "$r"
		fi
		launches=$(sed -n 's/.*graph launches \([0-9]*\) (\([0-9.]*\) per step).*/\2/p' "$OUT/$m-$dt.stats")
		record "$m $dt graph launches per step" "$([ "$launches" = 1.00 ] && echo ok || echo FAIL)" "$launches"
		bin/glmrun $plan --device cuda --tokens "$prompt" --verify >"$OUT/$m-$dt.verify" 2>&1
		rc=$?
		sed "s/^/  [$m $dt] /" "$OUT/$m-$dt.verify"
		record "$m $dt --verify against the CPU" "$([ $rc = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$OUT/$m-$dt.verify")"
		if [ $dt = bf16 ] && [ -n "$got" ]; then
			# The CPU's prediction of this run (glmrun --round-bf16; tests/bf16_cpu.sh holds its figures against
			# the fixtures on CI): the tokens this run saw in the same steps (the prompt prefilled, then the 12
			# it generated forced back with --force, one 1-token decode step each, whose norm GEMVs read their
			# norm unrounded as the GPU's one-token launches do: LAUNCH_NORM_LATE), every other value rounded as
			# the GPU stores it. First GPU figures (2026-11-30, the CPU side then one prefill of the same
			# tokens): 0 to 4.2e-3 (glm4_moe), so 1e-2 is the check. DSA was informational then (0.157: its
			# selection depends on how the tokens are split into steps); with the same split (--force) it gave
			# 0.00023 on 2026-12-01 (the other fixtures 0 to 0.000975), so it is held to 1e-2 too.
			# Then --verify with the rounded CPU side (per layer, how far each kernel is
			# from the bf16 it should store; it passed on every fixture in that round, also where the plain
			# bf16 --verify fails).
			bin/glmrun $plan --device cpu --round-bf16 --tokens "$prompt" --force "$(echo $got | tr ' ' ',')" \
				--dump-logits $OUT/$m-bf16-cpu.f32 >/dev/null 2>"$OUT/err"
			r=$($CMP --pair $OUT/$m-bf16.f32 $OUT/$m-bf16-cpu.f32 1e-2 2>&1)
			rc=$?
			st=$([ $rc = 0 ] && echo ok || echo FAIL)
			record "$m bf16 GPU vs CPU --round-bf16 (same tokens)" $st "$r $(head -c 200 "$OUT/err")"
			bin/glmrun $plan --device cuda --tokens "$prompt" --verify --round-bf16 >"$OUT/$m-bf16r.verify" 2>&1
			rc=$?
			sed "s/^/  [$m bf16 --round-bf16] /" "$OUT/$m-bf16r.verify"
			record "$m bf16 --verify against the CPU --round-bf16" "$([ $rc = 0 ] && echo ok || echo FAIL)" \
				"$(tail -1 "$OUT/$m-bf16r.verify")"
		fi
	done
done

# The peer's bf16 error on the same fixtures: transformers in bfloat16 against the fixtures' float32
# logits, the measure above (informational: what bf16 itself costs on these tiny random models).
if python3 -c "import transformers" 2>/dev/null; then
	PYTHONUNBUFFERED=1 python3 tests/gpu/hf_bf16.py $FIX >"$OUT/hf_bf16.log" 2>&1
	grep '^hf ' "$OUT/hf_bf16.log" | while IFS= read -r line; do echo "  [peer] $line"; done
	while IFS= read -r line; do
		record "peer transformers ${line#hf }" info ""
	done < <(grep '^hf ' "$OUT/hf_bf16.log")
	grep -q '^hf ' "$OUT/hf_bf16.log" || record "peer transformers bf16" info "$(tail -3 "$OUT/hf_bf16.log" | tr '\n' ' ' | head -c 300)"
fi

# Fused decode kernels at a multi-token step: a 5-token prompt is prefilled by the decode-step kernels
# (steps of up to 8 tokens), compared node by node with the CPU reference.
for m in llama qwen3 glm_moe_dsa deepseek_v3; do
	short=$($CMP --prompt $FIX/$m | cut -d, -f1-5)
	bin/glmrun $OUT/$m-f32.plan --device cuda --tokens "$short" --verify >"$OUT/$m-short.verify" 2>&1
	rc=$?
	record "$m f32 5-token step (fused kernels) --verify" "$([ $rc = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$OUT/$m-short.verify")"
done

# A 16-bit checkpoint in an f32 plan: GLM-4.5's attention biases are widened to float at upload (the
# kernels add a bias as an activation value); the GPU gives the CPU's greedy tokens and logits.
if build/tools/mkhf $FIX/glm4_moe $OUT/glm4_moe-bf16w --dtype bf16 >/dev/null 2>&1 &&
	bin/glmc compile models/glm4_moe.lua --weights $OUT/glm4_moe-bf16w -o $OUT/gbw.plan 2>"$OUT/err"; then
	p=$($CMP --prompt $FIX/glm4_moe)
	gc=$(bin/glmrun $OUT/gbw.plan --device cuda --tokens "$p" -n 12 --dump-logits $OUT/gbw-cuda.f32 2>"$OUT/err")
	gp=$(bin/glmrun $OUT/gbw.plan --device cpu --tokens "$p" -n 12 --dump-logits $OUT/gbw-cpu.f32 2>>"$OUT/err")
	r=$($CMP --pair $OUT/gbw-cuda.f32 $OUT/gbw-cpu.f32 1e-4 2>&1)
	rc=$?
	[ -n "$gc" ] && [ "$gc" = "$gp" ] || { rc=1; r="cuda '$gc', cpu '$gp' $(tail -c 200 "$OUT/err")"; }
	record "glm4_moe bf16 checkpoint in an f32 plan: cuda = cpu" "$([ $rc = 0 ] && echo ok || echo FAIL)" "$r"
else
	record "glm4_moe bf16 checkpoint in an f32 plan" FAIL "$(tail -c 300 "$OUT/err")"
fi

# Programmatic dependent launch (glmrun --pdl, an experiment): every kernel may start while the one before
# finishes and waits for it first; the logits of the same run without it, within 1e-6.
for m in llama glm_moe_dsa qwen3_moe; do
	for dt in f32 bf16; do
		bin/glmrun $OUT/$m-$dt.plan --device cuda --pdl --tokens "$($CMP --prompt $FIX/$m)" -n 12 \
			--dump-logits $OUT/$m-$dt-pdl.f32 --stats >/dev/null 2>"$OUT/$m-$dt-pdl.stats"
		r=$($CMP --pair $OUT/$m-$dt-pdl.f32 $OUT/$m-$dt.f32 1e-6 2>&1)
		rc=$?
		grep -q "programmatic launch on" "$OUT/$m-$dt-pdl.stats" || { rc=1; r="programmatic launch not on: $(grep 'kernels per step' "$OUT/$m-$dt-pdl.stats")"; }
		record "$m $dt --pdl: logits as without it" "$([ $rc = 0 ] && echo ok || echo FAIL)" "$r"
	done
done

# Every step size through the decode-step kernels: prompts of 1, 2, 3, 5, 8 and 9 tokens against the CPU
# running the same plan (tests/gpu/steps.sh; reuses the plans above).
OUT=$OUT LENGTHS=${STEPS_LENGTHS:-1 2 3 5 8 9} tests/gpu/steps.sh >"$OUT/steps.log" 2>&1
record_tap steps "$OUT/steps.log"
# Non-finite logits are refused, greedy, sampled and batched (tests/gpu/nan.sh).
OUT=$OUT tests/gpu/nan.sh >"$OUT/nan.log" 2>&1
record_tap nan "$OUT/nan.log"

# Llama 3.1+ rotary scaling (llama3 from HF and as a GGUF's rope_freqs.weight; linear): tests/gpu/llama3_rope.sh.
OUT=$OUT tests/gpu/llama3_rope.sh >"$OUT/llama3_rope.log" 2>&1
record_tap llama3_rope "$OUT/llama3_rope.log"

# Fusion and memory planning on the GPU: -O0 (no fusion, a buffer per value) gives the same tokens and
# logits within 1e-5 of the optimised plan; a plan compiled for sm_80 is recompiled from its source here.
p0=$OUT/llama-O0.plan
bin/glmc compile models/llama.lua --weights $FIX/llama -O0 -o $p0 2>/dev/null
bin/glmrun $p0 --device cuda --tokens "$($CMP --prompt $FIX/llama)" -n 12 --dump-logits $OUT/o0.f32 >/dev/null 2>&1
r=$($CMP --pair $OUT/o0.f32 $OUT/llama-f32.f32 1e-5)
record "llama fused+planned vs -O0 on the GPU" "$([ $? = 0 ] && echo ok || echo FAIL)" "$r"
bin/glmc compile models/llama.lua --weights $FIX/llama --arch sm_80 -o $OUT/sm80.plan 2>/dev/null
got=$(bin/glmrun $OUT/sm80.plan --device cuda --tokens "$($CMP --prompt $FIX/llama)" -n 12 --stats 2>$OUT/sm80.err)
record "sm_80 plan recompiled for this GPU" "$([ "$got" = "$($CMP --greedy $FIX/llama)" ] && grep -q recompiled $OUT/sm80.err && echo ok || echo FAIL)" "$(grep 'stats: gpu' $OUT/sm80.err)"

# Sampling: the same seed twice gives the same tokens, another seed differs, --temp 0 is greedy.
plan=$OUT/llama-f32.plan
prompt=$($CMP --prompt $FIX/llama)
s1=$(bin/glmrun $plan --device cuda --tokens "$prompt" -n 24 --temp 1.5 --seed 7 2>&1)
s2=$(bin/glmrun $plan --device cuda --tokens "$prompt" -n 24 --temp 1.5 --seed 7 2>&1)
s3=$(bin/glmrun $plan --device cuda --tokens "$prompt" -n 24 --temp 1.5 --seed 8 2>&1)
g0=$(bin/glmrun $plan --device cuda --tokens "$prompt" -n 12 --temp 0 2>&1)
record "same seed, same tokens" "$([ "$s1" = "$s2" ] && echo ok || echo FAIL)" "$s1"
record "another seed, other tokens" "$([ "$s1" != "$s3" ] && echo ok || echo FAIL)" "$s3"
record "--temp 0 equals greedy" "$([ "$g0" = "$($CMP --greedy $FIX/llama)" ] && echo ok || echo FAIL)" "$g0"
k1=$(bin/glmrun $plan --device cuda --tokens "$prompt" -n 12 --temp 1 --top-k 1 --seed 3 2>&1)
record "--top-k 1 equals greedy" "$([ "$k1" = "$($CMP --greedy $FIX/llama)" ] && echo ok || echo FAIL)" "$k1"
# --force on the GPU (the forced token written into the step buffer before each decode graph): a sampled
# run's tokens forced back give its logits (the same kernels and steps: within 1e-6, expected bit for bit),
# which differ from the greedy run's.
ss=$(bin/glmrun $plan --device cuda --tokens "$prompt" -n 12 --temp 1.5 --seed 7 --dump-logits $OUT/sampled.f32 2>&1)
fs=$(bin/glmrun $plan --device cuda --tokens "$prompt" --force "$(echo $ss | tr ' ' ',')" --dump-logits $OUT/forced.f32 2>&1)
r=$($CMP --pair $OUT/forced.f32 $OUT/sampled.f32 1e-6 2>&1)
rc=$?
record "--force on the GPU: a sampled run's tokens give its logits" "$([ $rc = 0 ] && [ -n "$fs" ] && [ "$fs" = "$ss" ] &&
	! cmp -s $OUT/forced.f32 $OUT/llama-f32.f32 && echo ok || echo FAIL)" "$r $(cmp -s $OUT/forced.f32 $OUT/sampled.f32 && echo '(bit for bit)')"

# Text in, text out on the GPU: the llama fixture with a 512-token GPT-2 vocabulary answers -p with the
# same greedy text as on the CPU.
build/tools/mkgguf $FIX/llama $OUT/l.gguf >/dev/null && build/tools/addvocab $OUT/l.gguf $FIX/ggml-vocab-gpt-2.gguf 512 $OUT/lv.gguf >/dev/null &&
	bin/glmc compile models/llama.lua --weights $OUT/lv.gguf -o $OUT/lv.plan 2>/dev/null
tg=$(bin/glmrun $OUT/lv.plan --device cuda -p "Good morning" -n 16 2>/dev/null)
tc=$(bin/glmrun $OUT/lv.plan --device cpu -p "Good morning" -n 16 2>/dev/null)
record "-p text on the GPU equals the CPU's" "$([ -n "$tg" ] && [ "$tg" = "$tc" ] && echo ok || echo FAIL)" "'$tg'"

# Batches on the GPU: every fixture decodes three sequences together (buckets 4, then 2 once one ends)
# and each equals the same prompt alone; then the batch path of the MLA+DSA model under memcheck.
FIX=$FIX DEVICE=cuda TOL=1e-5 tests/batch.sh >"$OUT/batch.log" 2>&1
record_tap batch "$OUT/batch.log"

# Chat on the GPU: two turns, the second prefilled at the next free positions of the KV cache (20+), give
# the CPU's greedy tokens on the llama fixture (chatml) and the GLM-5 fixture (glm5: MLA, DSA); a seed
# repeats. The token ids of each turn come from --stats.
build/tools/addvocab $OUT/l.gguf $FIX/ggml-vocab-gpt-2.gguf 512 $OUT/cm.gguf --special '<|im_start|>' --special '<|im_end|>' \
	--chat-template "$(cat tests/data/templates/qwen3.jinja)" >/dev/null
build/tools/addvocab $OUT/l.gguf $FIX/ggml-vocab-gpt-2.gguf 512 $OUT/g5.gguf --special '[gMASK]' --special '<sop>' \
	--special '<|system|>' --special '<|user|>' --special '<|assistant|>' --special '<think>' --special '</think>' \
	--chat-template "$(cat tests/data/templates/glm-4.7.jinja)" >/dev/null
chat_ids() { printf 'Hello\nAgain\n' | bin/glmrun "$1" --tokenizer "$2" --device "$3" --chat -n 8 --system Brief --stats "${@:4}" 2>&1 >/dev/null | grep '^stats: chat'; }
for c in "llama chatml:$OUT/lv.plan:$OUT/cm.gguf" "glm_moe_dsa glm5:$OUT/glm_moe_dsa-f32.plan:$OUT/g5.gguf"; do
	IFS=: read -r name plan tk <<<"$c"
	cg=$(chat_ids "$plan" "$tk" cuda)
	cc=$(chat_ids "$plan" "$tk" cpu)
	record "chat $name: 2 turns on the GPU equal the CPU" "$([ -n "$cg" ] && [ "$cg" = "$cc" ] && echo ok || echo FAIL)" \
		"$(echo "$cg" | tail -1 | cut -c1-120)"
	[ "$cg" = "$cc" ] || diff <(echo "$cg") <(echo "$cc") | head -6
	r1=$(chat_ids "$plan" "$tk" cuda --temp 1 --seed 3)
	r2=$(chat_ids "$plan" "$tk" cuda --temp 1 --seed 3)
	record "chat $name: same seed, same conversation (GPU)" "$([ -n "$r1" ] && [ "$r1" = "$r2" ] && echo ok || echo FAIL)" ""
done

# compute-sanitizer on one fixture. API errors are not counted: prefill steps above 8 tokens go through
# cuBLASLt, whose own probing returns errors the tool reports, and NCCL's start probes kernels for other GPUs
# (the 4 errors a DSA batch reported with API errors counted were those: cudaErrorNoKernelImageForDevice in
# ncclCommInitRank, read one by one on an H100 on 2026-12-06).
if command -v compute-sanitizer >/dev/null; then
	compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 bin/glmrun $plan --device cuda --tokens "$prompt" -n 4 >"$OUT/memcheck.log" 2>&1
	rc=$?
	record "compute-sanitizer memcheck (llama f32)" "$([ $rc = 0 ] && echo ok || echo FAIL)" "$(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
	bin/glmc compile models/glm5.lua --weights $FIX/glm_moe_dsa -o $OUT/dsa.plan 2>/dev/null
	compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 bin/glmrun $OUT/dsa.plan --device cuda --tokens 1,2,3 \
		--tokens 4,5,6,7,8,9,10 --tokens 11 -n 8 --max-seq 12 >"$OUT/memcheck-batch.log" 2>&1
	rc=$?
	record "compute-sanitizer memcheck (glm5 DSA, batch 3)" "$([ $rc = 0 ] && echo ok || echo FAIL)" "$(grep -E 'ERROR SUMMARY' "$OUT/memcheck-batch.log" | tail -1)"
	[ $rc = 0 ] || grep -m6 -E "^========= (Invalid|Program hit|    at )" "$OUT/memcheck-batch.log"
else
	record "compute-sanitizer memcheck" FAIL "compute-sanitizer not found"
fi

# Tensor parallelism through the worker/NCCL path: tp 1 here, every tp the visible GPUs allow, the stall
# test and the allreduce benchmark (its own table is in $OUT/tp.log).
if [ "${SKIP_TP:-0}" = 1 ]; then
	tp_rc=skipped
else
	tests/gpu/tp.sh >"$OUT/tp.log" 2>&1
	tp_rc=$?
fi
if [ "$tp_rc" = skipped ]; then
	record "tests/gpu/tp.sh" info "skipped (SKIP_TP=1)"
else
	grep -E '^(allreduce|check:| *[0-9]+ +[0-9.]+)|FAIL' "$OUT/tp.log" | head -40
	record "tests/gpu/tp.sh (tp, stall test, allreduce bench)" "$([ $tp_rc = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$OUT/tp.log")"
fi

echo
printf '%-44s %-5s %s\n' CHECK RESULT DETAIL
printf '%s\n' "${rows[@]}"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
