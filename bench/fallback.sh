#!/usr/bin/env bash
# bench/fallback.sh — the newer kernels against the older ones glmc --fallback keeps (attn_split, moe_tc,
# dsa_tc, mla_expand, mla_split_tc, indexer_tc), run on the device machine from the repository root with bin/
# and build/ carried. For each kernel, a plan of a real shape (random weights) compiled with --fallback KERNEL
# (old) and without (new):
#   - the same 300-token prompt and 8 decode steps through both: greedy ids and the logits' rel-L2
#     (bf16 plans: the two differ in summation order, so rel-L2 stays at the bf16 level, ~1e-2, unless a
#     routed model's router meets a near tie: tests/gpu/prefill.sh tells those apart);
#   - glmrun --bench: prefill ms (moe_tc and mla_expand: GLM-4.7-Flash; dsa_tc with moe_tc, indexer_tc: the GLM-5 slice)
#     at PROMPTS,
#     and decode ms/step (attn_split: Llama-3.1-8B) at CONTEXTS, old against new in the same run.
# The kernels' own GPU tests are rows of build/gpu/test_kernels and test_qgemv (tests/gpu/run.sh runs
# them); tests/gpu/run.sh and prefill.sh take GLMC_FLAGS="--fallback all" for the fixtures.
# Environment: OUT (/tmp/glm-fallback), KERNELS ("attn_split moe_tc dsa_tc mla_expand mla_split_tc indexer_tc"), PROMPTS ("1024 4096"), CONTEXTS
# ("1000 8000 32000"), DEVICE (cuda; cpu checks the script on the llama fixture: tests/bench.sh).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/glm-fallback}
KERNELS=${KERNELS:-"attn_split moe_tc dsa_tc mla_expand mla_split_tc indexer_tc"}
PROMPTS=${PROMPTS:-"1024 4096"}
CONTEXTS=${CONTEXTS:-"1000 8000 32000"}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
value() { sed -n "s/^$1: \([^ ]*\).*/\1/p" "$2" 2>/dev/null | head -1; }
# shape KERNEL: model, config, weights, layers, the --fallback value
shape() {
	case $1 in
	attn_split) echo "llama models/configs/llama3_1_8b.json bf16 0 attn_split" ;;
	moe_tc) echo "glm4_moe_lite models/configs/glm4_7_flash.json bf16 0 moe_tc" ;;
	dsa_tc) echo "glm5 models/configs/glm5.json q4_k_m 8 dsa_tc,moe_tc" ;; # old: both older kernels
	mla_expand) echo "glm4_moe_lite models/configs/glm4_7_flash.json bf16 0 mla_expand" ;;
	mla_split_tc) echo "glm4_moe_lite models/configs/glm4_7_flash.json bf16 0 mla_split_tc" ;;
	indexer_tc) echo "glm5 models/configs/glm5.json q4_k_m 8 indexer_tc" ;;
	esac
}
rows=()
for k in $KERNELS; do
	read -r m cfg w layers x <<<"$(shape $k)"
	lf=""
	[ "$layers" != 0 ] && lf="--layers $layers"
	if [ "$DEVICE" != cuda ]; then # the script's own check: the llama fixture's config, two layers
		m=llama cfg=$(ls ../shared/fixtures/hf/llama/config.json build/fixtures/llama/config.json 2>/dev/null | head -1)
		w=bf16 lf="--layers 2"
	fi
	for v in old new; do
		xf=""
		[ $v = old ] && xf="--fallback $x"
		# shellcheck disable=SC2086
		bin/glmc compile models/$m.lua --config "$cfg" --random-weights $w --dtype bf16 $lf $xf -o "$OUT/$k-$v.plan" \
			>"$OUT/$k-$v.compile.txt" 2>&1 || { echo "$k $v: compile failed: $(tail -1 "$OUT/$k-$v.compile.txt")"; continue 2; }
		bin/glmrun "$OUT/$k-$v.plan" --device "$DEVICE" --tokens "$(seq -s, 1 300)" -n 8 --dump-logits "$OUT/$k-$v.f32" \
			>"$OUT/$k-$v.ids" 2>"$OUT/$k-$v.err" || echo "$k $v: run failed: $(tail -1 "$OUT/$k-$v.err")"
	done
	same=DIFF
	cmp -s "$OUT/$k-old.ids" "$OUT/$k-new.ids" && same=same
	rel=$(build/tools/cmplogits --pair "$OUT/$k-old.f32" "$OUT/$k-new.f32" 1 2>&1 | grep -o 'rel-L2 [0-9.e+-]*' | head -1)
	rows+=("| $k | correctness | greedy ids $same | logits $rel |")
	case $k in attn_split | mla_split_tc) lens=$CONTEXTS ;; *) lens=$PROMPTS ;; esac
	for L in $lens; do
		line="| $k | L=$L |"
		for v in old new; do
			bin/glmrun "$OUT/$k-$v.plan" --device "$DEVICE" --bench -n 16 --bench-prompt "$L" -c $((L + 32)) \
				>"$OUT/$k-$v-$L.txt" 2>&1
			line="$line $v prefill $(value prefill_ms "$OUT/$k-$v-$L.txt") ms, decode $(value ms_per_step_median "$OUT/$k-$v-$L.txt") ms |"
		done
		rows+=("$line")
	done
done
echo "| kernel | what | old (--fallback) | new (default) |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
