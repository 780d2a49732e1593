#!/usr/bin/env bash
# tests/gpu/quant_types.sh — every GGUF block type on the general path of ops/quant.cuh (qd_val, q_load/q_decode;
# issue 48) kept in its blocks on the GPU, end to end on the device machine. For each type a small llama
# model (hidden 256, 3 layers, every matrix of that type, the embedding and the LM head too:
# tests/tools/mk_iq_model.py --type) is compiled, and:
#   1. --device cuda and --device cpu logits of the same plan agree within 1e-4 (f32 activations): the
#      prompt (6 tokens: the decode GEMV groups, k_qgemv_fused, up to 8 rows), 20 tokens (k_qlinear_gemm)
#      and 40 tokens (the weight dequantized for cuBLASLt, runtime/cuda.c lt_qweight), 5 decoded after;
#   2. the same with bf16 activations within 2e-2 (6 tokens);
#   3. glmc stats: every quantized weight kept in blocks (gpu_block_weight_file_bytes equals the GGUF's
#      tensor bytes of that type, as glmc inspect lists them) and the padding reported (0: the general
#      types' rows are the file's);
#   4. GLM-5 256 wide (tests/data/glm5_q256.json: MLA, the DSA indexer, routed experts and a shared one)
#      with --random-weights TYPE (every matrix that type, generated on each device: k_qrand against
#      runtime/weights.c) and the iq_dyn mix (experts IQ1_M/IQ2_XXS, shared expert Q4_K, attention
#      Q6_K/Q8_0): cuda vs cpu within 1e-4 at 6 and 20 tokens (k_qmoe_up, k_qmoe_down_fused, the fused
#      groups with an f32 router member) and --verify;
# then build/bench/gemv's rows for the type (--only TYPE: 4096², 14336×4096, GLM-5's expert and LM head).
# The models come from python3 with gguf and numpy; where the device has none, make them here first:
#   tests/gpu/quant_types.sh --prepare      # writes build/qtypes/TYPE.gguf (about 15 MB; carry build)
# Needs bin/ and build/ from `make gpu-bundle`. TYPES="Q4_0 IQ2_XXS" runs only those; PARTS="models glm5
# bench" (the default: all three) picks the sections, for a round that must fit a time limit; BENCH=0 skips
# the bench rows. Prints a table and "N passed, N failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/glm-qtypes}
QDIR=${QDIR:-build/qtypes}
TYPES=${TYPES:-"Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K IQ4_NL IQ4_XS MXFP4 IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S TQ1_0 TQ2_0 NVFP4"}
CMP=build/tools/cmplogits
mkdir -p "$OUT" "$QDIR"

# the model of type $1 into $QDIR/$1.gguf (its F32 twin is not needed here)
make_model() {
	python3 tests/tools/mk_iq_model.py "$QDIR/$1.gguf" "$OUT/$1-f32.gguf" --type "$1" && rm -f "$OUT/$1-f32.gguf"
}

if [ "${1:-}" = --prepare ]; then
	for t in $TYPES; do
		make_model "$t" || { echo "mk_iq_model.py --type $t failed (needs: pip install gguf numpy)"; exit 1; }
	done
	ls -l "$QDIR"
	exit 0
fi

rows=()
pass=0
fail=0
record() { # NAME STATUS DETAIL (also printed at once, so a run cut by a time limit still shows it)
	rows+=("$(printf '%-44s %-5s %s' "$1" "$2" "$3")")
	echo "row: ${rows[-1]}"
	case "$2" in ok) pass=$((pass + 1)) ;; *) fail=$((fail + 1)) ;; esac
}

# compare NAME PLAN TOKENS TOL: cuda vs cpu logits of every row (prompt + 5 decoded)
compare() {
	local name=$1 plan=$2 toks=$3 tol=$4
	bin/glmrun "$plan" --device cuda --tokens "$toks" -n 5 --dump-logits "$OUT/g.f32" --stats >"$OUT/g.out" 2>"$OUT/g.err"
	local rg=$?
	bin/glmrun "$plan" --device cpu --tokens "$toks" -n 5 --dump-logits "$OUT/c.f32" >"$OUT/c.out" 2>"$OUT/c.err"
	local rc=$?
	if [ $rg != 0 ] || [ $rc != 0 ]; then
		record "$name" FAIL "$(tail -c 300 "$OUT/g.err") $(tail -c 200 "$OUT/c.err")"
		return
	fi
	local r
	r=$($CMP --pair "$OUT/g.f32" "$OUT/c.f32" "$tol" 2>&1)
	record "$name (tol $tol)" "$([ $? = 0 ] && echo ok || echo FAIL)" "$r; $(grep -o 'memory weights [^,]*' "$OUT/g.err" | head -1)"
}

PARTS=${PARTS:-"models glm5 bench"}
part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
short=1,17,42,99,3,200
mid=$(seq -s, 3 22)
long=$(seq -s, 3 42)
for t in $TYPES; do
	part models || break
	q=$QDIR/$t.gguf
	if [ ! -s "$q" ] && ! make_model "$t" 2>"$OUT/err"; then
		record "$t model" FAIL "no $q and mk_iq_model.py failed: $(tail -1 "$OUT/err") (run --prepare where gguf is)"
		continue
	fi
	if ! bin/glmc compile --weights "$q" -o "$OUT/$t.plan" 2>"$OUT/err"; then
		record "$t compile" FAIL "$(tail -c 300 "$OUT/err")"
		continue
	fi
	compare "$t cuda vs cpu, 6 tokens" "$OUT/$t.plan" "$short" 1e-4
	compare "$t cuda vs cpu, 20 tokens" "$OUT/$t.plan" "$mid" 1e-4
	compare "$t cuda vs cpu, 40 tokens" "$OUT/$t.plan" "$long" 1e-4
	if bin/glmc compile --weights "$q" --dtype bf16 -o "$OUT/$t-bf.plan" 2>"$OUT/err"; then
		compare "$t cuda vs cpu, bf16 activations" "$OUT/$t-bf.plan" "$short" 2e-2
	else
		record "$t bf16 compile" FAIL "$(tail -c 300 "$OUT/err")"
	fi
	# the GGUF's bytes of this type against what the plan keeps in blocks on the GPU
	file=$(bin/glmc inspect "$q" | awk -v t="$t" '$3 == t && $NF == "bytes" { s += $(NF - 1) } END { print s + 0 }')
	bin/glmc stats "$OUT/$t.plan" >"$OUT/stats"
	kept=$(awk '/^gpu_block_weight_file_bytes:/ { print $2 }' "$OUT/stats")
	dev=$(awk '/^gpu_block_weight_bytes:/ { print $2 }' "$OUT/stats")
	pad=$(awk '/^gpu_block_weight_pad_bytes:/ { print $2 }' "$OUT/stats")
	[ -n "$kept" ] && [ "$kept" = "$file" ] && [ "$file" -gt 0 ] && [ "$dev" = $((kept + pad)) ]
	record "$t glmc stats: blocks kept = GGUF bytes" "$([ $? = 0 ] && echo ok || echo FAIL)" \
		"GGUF $file, kept $kept, on the GPU $dev (padding $pad)"
done

# 4. GLM-5 with random weights of each type, and the dynamic mix
for t in $TYPES iq_dyn; do
	part glm5 || break
	plan=$OUT/glm5-$t.plan
	if ! bin/glmc compile models/glm5.lua --config tests/data/glm5_q256.json --random-weights "${t,,}" -o "$plan" 2>"$OUT/err"; then
		record "glm5 random $t compile" FAIL "$(tail -c 300 "$OUT/err")"
		continue
	fi
	conv=$(bin/glmc explain "$plan" | grep -o '[0-9]* converted to')
	compare "glm5 256 random $t, 6 tokens ($conv f32)" "$plan" "$short" 1e-4
	compare "glm5 256 random $t, 20 tokens" "$plan" "$mid" 1e-4
	bin/glmrun "$plan" --device cuda --tokens "$short" --verify >"$OUT/v.out" 2>&1
	record "glm5 256 random $t --verify" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$OUT/v.out")"
done

if part bench && [ "${BENCH:-1}" = 1 ] && [ -x build/bench/gemv ]; then
	for t in $TYPES; do
		build/bench/gemv --only "$t" | grep -v "^type" | sed 's/^/bench: /'
	done
fi

echo
printf '%s\n' "${rows[@]}"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
