#!/usr/bin/env bash
# tests/gguf_moe.sh — the MoE / MLA fixtures converted to GGUF the way llama.cpp converts them
# (tests/tools/mkgguf: architectures qwen3moe, glm4moe, deepseek2 for deepseek_v3 and glm4_moe_lite,
# glm-dsa; stacked experts, kv_b split into attn_k_b / attn_v_b, llama.cpp's metadata keys), compiled and
# run through glmc on the CPU.
#   F32:  the fixture's greedy tokens, its logits within 1e-5, and bit for bit the logits glmc computes
#         from the Hugging Face checkpoint itself.
#   Q8_0: the quantized kernels give exactly what the F32 kernels give on the same (dequantized) numbers
#         (mkgguf --roundtrip); then against the fixture: the greedy tokens where Q8_0's rounding keeps
#         them. These tiny random models make discrete choices (the top-2 of 8 experts, DSA's top-8
#         positions) whose margins are often smaller than what Q8_0's weight error moves them by, and a
#         flipped choice changes that position's logits by O(1) (and, through attention, later ones).
#         Where the greedy tokens part the test says at which step and with what top-2 margin in the
#         fixture, and compares teacher-forced (the prompt and the fixture's tokens in one prefill, as
#         tests/cli.sh does for llama): most positions must stay within Q8_0's own error.
# Prints "ok - NAME" / "FAIL - NAME: why" lines for tests/run.sh to count.
set -u
cd "$(dirname "$0")/.."
FIX=../shared/fixtures/hf
CMP=build/tools/cmplogits
MKGGUF=build/tools/mkgguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1: $2"; }

# Q8_0's own error on these fixtures is 1-4% (relative L2) per position; past 5% a position has had an
# expert or DSA choice flipped, at it or at a position it attends to. At least half of the 31
# teacher-forced positions must stay under it (a mis-read tensor puts nearly all of them near 1).
ROW_TOL=5e-2

model_of() { case $1 in glm_moe_dsa) echo glm5 ;; *) echo "$1" ;; esac; }
arch_of() {
	case $1 in
	qwen3_moe) echo qwen3moe ;;
	glm4_moe) echo glm4moe ;;
	deepseek_v3 | glm4_moe_lite) echo deepseek2 ;;
	glm_moe_dsa) echo glm-dsa ;;
	esac
}

# rows FILE: one line of floats per logits row (the vocabulary is 512 in every fixture).
rows() { od -An -v -f -w2048 "$1"; }

# The fixture's logits in teacher-forced order: every prompt row, then decode rows 1.. (row 0 of the
# decode file is the last prompt row again).
fixture_rows() { rows "$1/prefill_logits.f32"; rows "$1/decode_logits.f32" | tail -n +2; }

# row_errors DUMP FIXTURE_DIR: per-row relative L2 errors, one per line (NaN -> inf).
row_errors() {
	fixture_rows "$2" | awk 'NR == FNR { for (i = 1; i <= NF; i++) ref[FNR, i] = $i; next }
		{ num = 0; den = 0
		  for (i = 1; i <= NF; i++) { if ($i ~ /nan|inf/) { num = -1; break }
		      d = $i - ref[FNR, i]; num += d * d; den += ref[FNR, i] * ref[FNR, i] }
		  print (num < 0 || den == 0) ? "inf" : sqrt(num / den) }' - <(rows "$1")
}

# margin FIXTURE_DIR STEP: the top-2 margin of the fixture's decode logits at a generated step.
margin() {
	rows "$1/decode_logits.f32" | sed -n "$(($2 + 1))p" | awk '{ a = -1e30; b = -1e30
		for (i = 1; i <= NF; i++) if ($i > a) { b = a; a = $i } else if ($i > b) b = $i
		printf "%.4g", a - b }'
}

# compile NAME MODEL WEIGHTS PLAN: compile; prints a FAIL line and returns 1 on error.
compile() {
	if ! bin/glmc compile "$2" --weights "$3" -o "$4" 2>"$tmp/err"; then
		bad "$1 compile" "$(tail -1 "$tmp/err")"
		return 1
	fi
}

# one_fixture NAME: every check of one fixture, in its own directory $tmp/NAME (fixtures run in parallel).
one_fixture() {
	local m=$1 tmp=$tmp/$1
	mkdir -p "$tmp"
	local fix=$FIX/$m model=models/$(model_of $m).lua arch=$(arch_of $m)
	local prompt want forced miss l e out r s n med over tf
	prompt=$($CMP --prompt "$fix") want=$($CMP --greedy "$fix")
	forced="$prompt,$(echo "$want" | tr ' ' ',' | cut -d, -f1-11)"

	# --- conversion: llama.cpp's architecture name, keys and tensor layout ---
	if ! $MKGGUF "$fix" "$tmp/$m.gguf" --type f32 2>"$tmp/err" ||
		! $MKGGUF "$fix" "$tmp/$m-q8.gguf" --type q8_0 2>>"$tmp/err" ||
		! $MKGGUF "$fix" "$tmp/$m-rt.gguf" --type q8_0 --roundtrip 2>>"$tmp/err"; then
		bad "$m GGUF conversion" "$(tail -1 "$tmp/err")"
		return
	fi
	bin/glmc inspect "$tmp/$m-q8.gguf" >"$tmp/inspect"
	miss=""
	local want_lines=("general.architecture +string += '$arch'" "$arch\.expert_count +uint32 += 8"
		"blk\.1\.ffn_gate_exps\.weight +Q8_0 +\[8, 32, 64\]" "blk\.1\.ffn_down_exps\.weight +Q8_0 +\[8, 64, 32\]"
		"blk\.1\.ffn_gate_inp\.weight +F32 +\[8, 64\]")
	case $arch in
	deepseek2 | glm-dsa)
		want_lines+=("$arch\.attention\.head_count_kv +uint32 += 1" "$arch\.attention\.key_length +uint32 += 40"
			"$arch\.attention\.key_length_mla +uint32 += 24" "$arch\.attention\.value_length_mla +uint32 += 16"
			"$arch\.attention\.kv_lora_rank +uint32 += 32" "$arch\.expert_gating_func +uint32 += 2"
			"blk\.1\.exp_probs_b\.bias +F32 +\[8\]" "blk\.1\.ffn_up_shexp\.weight +Q8_0 +\[32, 64\]"
			"blk\.0\.attn_k_b\.weight +F32 +\[4, 32, 16\]" "blk\.0\.attn_v_b\.weight +Q8_0 +\[4, 16, 32\]")
		;;
	glm4moe)
		want_lines+=("glm4moe\.block_count +uint32 += 4" "glm4moe\.nextn_predict_layers +uint32 += 1"
			"glm4moe\.rope\.dimension_count +uint32 += 8" "blk\.0\.attn_q\.bias +F32 +\[64\]")
		;;
	qwen3moe) want_lines+=("qwen3moe\.expert_gating_func +uint32 += 1" "blk\.0\.attn_k_norm\.weight +F32 +\[16\]") ;;
	esac
	[ $m = deepseek_v3 ] && want_lines+=("deepseek2\.rope\.scaling\.type +string += 'yarn'"
		"deepseek2\.rope\.scaling\.yarn_log_multiplier +float32 += 0\.1" "deepseek2\.expert_group_count +uint32 += 2")
	[ $arch = glm-dsa ] && want_lines+=("glm-dsa\.attention\.indexer\.top_k +uint32 += 8"
		"blk\.0\.indexer\.attn_q_b\.weight +Q8_0 +\[64, 32\]" "blk\.0\.indexer\.k_norm\.bias +F32 +\[16\]")
	for l in "${want_lines[@]}"; do
		grep -qE "^ *[0-9]+: $l" "$tmp/inspect" || miss="$miss '$l'"
	done
	[ -z "$miss" ] && ok "$m -> GGUF $arch: llama.cpp names, keys and shapes (${#want_lines[@]} checked)" ||
		bad "$m -> GGUF $arch: llama.cpp names, keys and shapes" "missing$miss"

	# The stacked experts are the per-expert tensors in expert order (bytes dumped by glmc inspect).
	l=1
	[ $m = qwen3_moe ] && l=0
	: >"$tmp/hf-exps"
	for e in 0 1 2 3 4 5 6 7; do
		bin/glmc inspect "$fix" --tensor model.layers.$l.mlp.experts.$e.down_proj.weight --dump "$tmp/e.f32" >/dev/null &&
			cat "$tmp/e.f32" >>"$tmp/hf-exps"
	done
	bin/glmc inspect "$tmp/$m.gguf" --tensor blk.$l.ffn_down_exps.weight --dump "$tmp/g-exps" >/dev/null &&
		cmp -s "$tmp/hf-exps" "$tmp/g-exps" && [ "$(stat -c %s "$tmp/g-exps")" = $((8 * 64 * 32 * 4)) ] &&
		ok "$m: blk.$l.ffn_down_exps holds the 8 experts' down_proj in order" ||
		bad "$m: blk.$l.ffn_down_exps holds the 8 experts' down_proj in order" "differs"

	# --- F32: the fixture exactly, and the very logits of the Hugging Face checkpoint ---
	if compile "$m F32 GGUF" $model "$tmp/$m.gguf" "$tmp/f32.plan"; then
		out=$(bin/glmrun "$tmp/f32.plan" --device cpu --tokens "$prompt" -n 12 --dump-logits "$tmp/f32.f32" 2>"$tmp/err")
		[ "$out" = "$want" ] && ok "$m F32 GGUF greedy tokens" || bad "$m F32 GGUF greedy tokens" "got '$out', want '$want' $(tail -1 "$tmp/err")"
		r=$($CMP "$tmp/f32.f32" "$fix" 1e-5) && ok "$m F32 GGUF logits ($r)" || bad "$m F32 GGUF logits" "$r"
		bin/glmc compile $model --weights "$fix" -o "$tmp/hf.plan" 2>/dev/null &&
			bin/glmrun "$tmp/hf.plan" --device cpu --tokens "$prompt" -n 12 --dump-logits "$tmp/hf.f32" >/dev/null 2>&1 &&
			cmp -s "$tmp/hf.f32" "$tmp/f32.f32" && ok "$m F32 GGUF logits are bit-identical to the HF checkpoint's" ||
			bad "$m F32 GGUF logits are bit-identical to the HF checkpoint's" "differ or failed"
	fi

	# --- Q8_0 ---
	compile "$m Q8_0 GGUF" $model "$tmp/$m-q8.gguf" "$tmp/q8.plan" || return
	compile "$m Q8_0 round-trip GGUF" $model "$tmp/$m-rt.gguf" "$tmp/rt.plan" || return
	bin/glmrun "$tmp/q8.plan" --device cpu -n 1 --tokens "$forced" --dump-logits "$tmp/tq.f32" >/dev/null 2>&1 &&
		bin/glmrun "$tmp/rt.plan" --device cpu -n 1 --tokens "$forced" --dump-logits "$tmp/tr.f32" >/dev/null 2>&1 &&
		r=$($CMP --pair "$tmp/tq.f32" "$tmp/tr.f32" 1e-5) && ok "$m Q8_0 kernels equal F32 kernels on the dequantized weights ($r)" ||
		bad "$m Q8_0 kernels equal F32 kernels on the dequantized weights" "${r:-run failed}"
	out=$(bin/glmrun "$tmp/q8.plan" --device cpu --tokens "$prompt" -n 12 --dump-logits "$tmp/q8.f32" 2>"$tmp/err")
	if [ "$out" = "$want" ]; then
		r=$($CMP "$tmp/q8.f32" "$fix" 1 | sed 's/ (tol 1)//')
		ok "$m Q8_0 GGUF greedy tokens (logits $r)"
		return
	fi
	# Where the greedy tokens part, and the fixture's top-2 margin there.
	local got exp
	read -ra got <<<"$out"
	read -ra exp <<<"$want"
	s=0
	while [ $s -lt 12 ] && [ "${got[$s]:-}" = "${exp[$s]}" ]; do s=$((s + 1)); done
	row_errors "$tmp/tq.f32" "$fix" >"$tmp/rowerr"
	n=$(wc -l <"$tmp/rowerr")
	med=$(sort -g "$tmp/rowerr" | sed -n "$(((n + 1) / 2))p")
	over=$(awk -v t=$ROW_TOL '$1 > t || $1 == "inf"' "$tmp/rowerr" | wc -l)
	tf=$($CMP "$tmp/tq.f32" "$fix" 1 | sed 's/ (tol 1)//')
	echo "# $m Q8_0: greedy '$out' parts from the fixture's at step $s (fixture top-2 margin there $(margin "$fix" $s))"
	if [ "$n" -eq 31 ] && awk -v m="$med" -v t=$ROW_TOL 'BEGIN { exit !(m != "inf" && m + 0 <= t + 0) }'; then
		ok "$m Q8_0 GGUF teacher-forced: median position within $ROW_TOL ($tf; median $med, $over of $n positions past it)"
	else
		bad "$m Q8_0 GGUF teacher-forced: median position within $ROW_TOL" "median $med over $n rows; $tf"
	fi
}

FIXTURES="qwen3_moe glm4_moe deepseek_v3 glm4_moe_lite glm_moe_dsa"
for m in $FIXTURES; do
	one_fixture $m >"$tmp/$m.log" 2>&1 &
done
wait
for m in $FIXTURES; do cat "$tmp/$m.log"; done

# Fused decode kernels over GGUF blocks (ops/qfused.cuh): a GLM-5 of the glm_moe_dsa fixture's layout
# widened so every GEMV row is whole 256-value blocks (tests/data/glm5_q256.json), with random weights in
# llama.cpp's Q4_K_M mix (Q4_K, Q5_K and Q6_K tensors, Q8_0 ones, the f32 router beside the shared
# expert's Q4_K gate and up) and in each block type alone. A decode step launches as many kernels per
# layer as with bf16 weights (10 dense, 12 MoE: the fused GEMVs and the MoE layer's end read the blocks);
# the Q4_K_M plan's kernels compile for sm_90 within the launch limits, and on the CPU that fused,
# memory-planned plan (liveness from its launch list) gives -O0's logits.
G5Q="models/glm5.lua --config tests/data/glm5_q256.json"
per_layer() { bin/glmc dump $G5Q --random-weights $1 --after emit 2>/dev/null | sed -n 's/^kernels (decode step of 1 token): [0-9]* per step; per layer: //p'; }
want_k=$(per_layer bf16)
for q in q4_k_m q4_k q5_k q6_k q8_0 iq_dyn iq2_xxs q4_0 nvfp4; do
	k=$(per_layer $q)
	[ -n "$k" ] && [ "$k" = "$want_k" ] && [ "$(echo $k | tr ' ' '\n' | sort -n | tail -1)" -le 12 ] &&
		ok "GLM-5 (256-wide) ${q^^} blocks on the GPU: kernels per layer as bf16's ($k)" ||
		bad "GLM-5 (256-wide) ${q^^}: kernels per layer as bf16's" "got '$k', bf16 '$want_k'"
done
# the iq_dyn mix (issue 48): the routed experts' gate/up stay IQ1_M blocks and their down IQ2_XXS, read by
# quant.cuh's general path beside the shared expert's Q4_K (k_qmoe_up, k_qmoe_down_fused)
bin/glmc dump $G5Q --random-weights iq_dyn --after emit 2>/dev/null | grep -o 'k_qmoe_[a-z_]*<[^>]*>' | sort -u >$tmp/qkd
grep -q 'k_qmoe_up<float, 29, 29>' $tmp/qkd && grep -q 'k_qmoe_down_fused<float, 16, 12, true, true>' $tmp/qkd &&
	ok "GLM-5 (256-wide) iq_dyn: the experts' kernels read IQ1_M and IQ2_XXS blocks ($(tr '\n' ' ' <$tmp/qkd))" ||
	bad "GLM-5 (256-wide) iq_dyn: the experts' kernels read IQ1_M and IQ2_XXS blocks" "$(tr '\n' ' ' <$tmp/qkd)"
if bin/glmc compile $G5Q --random-weights q4_k_m -o $tmp/g5q.plan 2>$tmp/err &&
	bin/glmc compile $G5Q --random-weights q4_k_m -O0 -o $tmp/g5q0.plan 2>>$tmp/err; then
	bin/glmc dump $G5Q --random-weights q4_k_m --after emit 2>/dev/null | grep -o 'k_q[a-z_]*fused<\|k_qmoe_down_mma<' | sort | uniq -c >$tmp/qk
	[ "$(grep -c 'k_qgemv_fused<\|k_qmoe_down_mma<' $tmp/qk)" = 2 ] && ! grep -q 'k_qmoe_down_fused<' $tmp/qk &&
		ok "GLM-5 (256-wide) Q4_K_M: decode steps run k_qgemv_fused and, its down projections Q4_K/Q6_K, k_qmoe_down_mma ($(tr -s ' \n' ' ' <$tmp/qk))" ||
		bad "GLM-5 (256-wide) Q4_K_M: decode steps run k_qgemv_fused and k_qmoe_down_mma" "$(cat $tmp/qk)"
	bin/glmc dump $G5Q --random-weights q8_0 --after emit 2>/dev/null | grep -o 'k_qmoe_down_[a-z]*<' | sort -u >$tmp/qk8
	[ "$(cat $tmp/qk8)" = "k_qmoe_down_fused<" ] &&
		ok "GLM-5 (256-wide) Q8_0: the MoE layer's end is k_qmoe_down_fused (Q8_0 is not on the tensor cores)" ||
		bad "GLM-5 (256-wide) Q8_0: the MoE layer's end is k_qmoe_down_fused" "$(cat $tmp/qk8)"
	st=$(bin/glmc stats $tmp/g5q.plan | sed -n 's/^kernels_per_layer\.[0-9]*: //p' | tr '\n' ' ')
	[ "$(echo $st | tr ' ' '\n' | sort -n | tail -1)" = 12 ] && [ "$(echo $st | cut -d' ' -f1)" -le 10 ] &&
		ok "GLM-5 (256-wide) Q4_K_M plan: glmc stats counts at most 12 kernels per MoE layer, 10 dense ($st)" ||
		bad "GLM-5 (256-wide) Q4_K_M plan: glmc stats kernels per layer" "'$st'"
	c=$(build/tools/checkplan $tmp/g5q.plan --max-t 40 2>&1) && [ "$(bin/glmc explain $tmp/g5q.plan | grep -c 'refused:.*quantized')" = 0 ] &&
		ok "GLM-5 (256-wide) Q4_K_M: fused kernels over blocks compiled for sm_90 ($c)" ||
		bad "GLM-5 (256-wide) Q4_K_M: fused kernels over blocks compiled for sm_90" "$c"
	bin/glmrun $tmp/g5q.plan --device cpu --tokens 3,1,4,1,5,9,2,6,5,3,5 -n 6 --dump-logits $tmp/g5q.f32 >/dev/null 2>&1 &&
		bin/glmrun $tmp/g5q0.plan --device cpu --tokens 3,1,4,1,5,9,2,6,5,3,5 -n 6 --dump-logits $tmp/g5q0.f32 >/dev/null 2>&1 &&
		r=$($CMP --pair $tmp/g5q.f32 $tmp/g5q0.f32 1e-6) && ok "GLM-5 (256-wide) Q4_K_M fused + planned equals -O0 on the CPU ($r)" ||
		bad "GLM-5 (256-wide) Q4_K_M fused + planned equals -O0 on the CPU" "${r:-run failed}"
else
	bad "GLM-5 (256-wide) Q4_K_M compiles" "$(tail -1 $tmp/err)"
fi

# Tensor order: the stacked experts and the split kv_b bind by name, not by position.
for m in deepseek_v3 glm_moe_dsa; do
	for order in reverse shuffle; do
		$MKGGUF $FIX/$m "$tmp/o.gguf" --type f32 --order $order --seed 5 >/dev/null 2>&1 &&
			bin/glmc compile models/$(model_of $m).lua --weights "$tmp/o.gguf" -o "$tmp/o.plan" 2>/dev/null &&
			bin/glmrun "$tmp/o.plan" --device cpu --tokens "$($CMP --prompt $FIX/$m)" -n 12 --dump-logits "$tmp/o.f32" >/dev/null &&
			cmp -s "$tmp/o.f32" "$tmp/$m/f32.f32" && ok "$m GGUF in $order order gives bit-identical logits" ||
			bad "$m GGUF in $order order gives bit-identical logits" "differs or failed"
	done
done
exit 0
