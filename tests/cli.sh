#!/usr/bin/env bash
# tests/cli.sh — end-to-end checks through the real binaries: fixtures reproduced exactly, and bad
# input (models, weights, plans, prompts) refused with a one-line message that names the culprit.
# Prints "ok - NAME" / "FAIL - NAME: why" lines for tests/run.sh to count.
set -u
cd "$(dirname "$0")/.."
FIX=../shared/fixtures/hf
CMP=build/tools/cmplogits
MKHF=build/tools/mkhf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1: $2"; }

# expect_fail NAME SUBSTRING CMD...: CMD must exit non-zero without crashing, printing exactly one
# line on stderr that contains SUBSTRING.
expect_fail() {
	local name=$1 want=$2
	shift 2
	"$@" >"$tmp/out" 2>"$tmp/err"
	local rc=$? lines
	lines=$(wc -l <"$tmp/err")
	if [ $rc -eq 0 ]; then
		bad "$name" "succeeded, expected an error containing '$want'"
	elif [ $rc -ge 128 ]; then
		bad "$name" "crashed (status $rc): $(head -c 300 "$tmp/err")"
	elif ! grep -qF -- "$want" "$tmp/err"; then
		bad "$name" "error '$(head -c 300 "$tmp/err")' does not contain '$want'"
	elif [ "$lines" -ne 1 ]; then
		bad "$name" "error is $lines lines, expected one: $(head -c 300 "$tmp/err")"
	else
		ok "$name"
	fi
}

# run_fixture NAME MODEL WEIGHTS TOL [FIXTURE]: compile, run the fixture prompt for 12 tokens, compare
# greedy ids exactly and logits within TOL of the fixture's (FIXTURE defaults to NAME).
run_fixture() {
	local name=$1 model=$2 weights=$3 tol=$4 fixture=$FIX/${5:-$1}
	local plan=$tmp/$name.plan
	if ! bin/glmc compile "$model" --weights "$weights" -o "$plan" 2>"$tmp/err"; then
		bad "$name compile" "$(cat "$tmp/err")"
		return
	fi
	ok "$name compile"
	local c
	if grep -q "runs on the CPU only" "$tmp/err"; then
		echo "# $name: $(grep -o 'the plan runs on the CPU only.*' "$tmp/err")"
	else
		c=$(build/tools/checkplan "$plan" 2>&1) && ok "$name kernels compiled for sm_90 and launch limits checked" ||
			bad "$name kernels compiled for sm_90 and launch limits checked" "$c"
	fi
	local out
	if ! out=$(bin/glmrun "$plan" --device cpu --tokens "$($CMP --prompt "$fixture")" -n 12 \
		--dump-logits "$tmp/$name.f32" 2>"$tmp/err"); then
		bad "$name run" "$(cat "$tmp/err")"
		return
	fi
	local want
	want=$($CMP --greedy "$fixture")
	[ "$out" = "$want" ] && ok "$name greedy tokens" || bad "$name greedy tokens" "got '$out', want '$want'"
	local r
	r=$($CMP "$tmp/$name.f32" "$fixture" "$tol") && ok "$name logits ($r)" || bad "$name logits" "$r"
}

# The acceptance checks: float32 checkpoints as Hugging Face saved them.
run_fixture llama models/llama.lua $FIX/llama 1e-5
run_fixture qwen3 models/qwen3.lua $FIX/qwen3 1e-5

# The GLM-5 family and its relatives: MLA over a latent cache, MoE (softmax and sigmoid routing, groups,
# shared experts), and DeepSeek sparse attention (glm_moe_dsa: index_topk 8 < 20 prompt tokens).
run_fixture qwen3_moe models/qwen3_moe.lua $FIX/qwen3_moe 1e-5
run_fixture glm4_moe models/glm4_moe.lua $FIX/glm4_moe 1e-5
run_fixture deepseek_v3 models/deepseek_v3.lua $FIX/deepseek_v3 1e-5
run_fixture glm4_moe_lite models/glm4_moe_lite.lua $FIX/glm4_moe_lite 1e-5
run_fixture glm_moe_dsa models/glm5.lua $FIX/glm_moe_dsa 1e-5

# Memory planning: the planned arena (in-place reuse, best-fit offsets) gives bit-identical logits to
# -O0 (a buffer per value) on every fixture; the plan's overlap checker runs when glmrun loads it.
for m in llama qwen3 qwen3_moe glm4_moe deepseek_v3 glm4_moe_lite glm_moe_dsa; do
	model=$m
	[ $m = glm_moe_dsa ] && model=glm5
	if bin/glmc compile models/$model.lua --weights $FIX/$m -o "$tmp/o0.plan" -O0 2>/dev/null &&
		bin/glmrun "$tmp/o0.plan" --device cpu --tokens "$($CMP --prompt $FIX/$m)" -n 12 --dump-logits "$tmp/o0.f32" >/dev/null &&
		cmp -s "$tmp/o0.f32" "$tmp/$m.f32"; then
		ok "$m: memory-planned and -O0 logits are identical ($(bin/glmc stats $tmp/$m.plan | grep -E '^arena_(bytes_per_token|lower_bound_per_token)' | tr '\n' ' '))"
	else
		bad "$m: memory-planned and -O0 logits are identical" "differs or failed"
	fi
done

# Fusion: the decode step (1 token, tp 1) launches at most 7 kernels per dense llama/qwen3 layer (glmc stats
# counts the launches of a 1-token step), and every fixture's activation arena is within 1.10 of its lower
# bound (the peak of live bytes); GLM-5's full configuration is checked further down.
for m in llama qwen3; do
	per=$(bin/glmc stats $tmp/$m.plan | sed -n 's/^kernels_per_layer\.[0-9]*: //p' | tr '\n' ' ')
	max=$(echo $per | tr ' ' '\n' | sort -n | tail -1)
	[ -n "$max" ] && [ "$max" -le 7 ] && ok "$m: at most 7 kernels per layer in a decode step ($per)" ||
		bad "$m: at most 7 kernels per layer in a decode step" "per layer: '$per'"
done
for m in llama qwen3 qwen3_moe glm4_moe deepseek_v3 glm4_moe_lite glm_moe_dsa; do
	r=$(bin/glmc explain $tmp/$m.plan | sed -n 's/^memory: .* ratio //p')
	awk -v r="$r" 'BEGIN { exit !(r != "" && r <= 1.10) }' && ok "$m: activation arena within 1.10 of its lower bound ($r)" ||
		bad "$m: activation arena within 1.10 of its lower bound" "ratio '$r'"
done

# Tensor parallelism on the CPU: every fixture at tp 2 and 4 (N ranks in one process, collectives in
# memory) gives the tp 1 tokens and logits within 1e-6; the schedule is reported by glmc stats.
for m in llama qwen3 qwen3_moe glm4_moe deepseek_v3 glm4_moe_lite glm_moe_dsa; do
	model=$m
	[ $m = glm_moe_dsa ] && model=glm5
	for tp in 2 4; do
		if bin/glmc compile models/$model.lua --weights $FIX/$m -o "$tmp/tp.plan" --tp $tp 2>/dev/null &&
			out=$(bin/glmrun "$tmp/tp.plan" --device cpu --tokens "$($CMP --prompt $FIX/$m)" -n 12 --dump-logits "$tmp/tp.f32") &&
			[ "$out" = "$($CMP --greedy $FIX/$m)" ] && r=$($CMP --pair "$tmp/tp.f32" "$tmp/$m.f32" 1e-6); then
			ok "$m tp $tp equals tp 1 ($r; $(bin/glmc stats "$tmp/tp.plan" | grep -E '^all' | tr '\n' ' '))"
		else
			bad "$m tp $tp equals tp 1" "${r:-failed} tokens '${out:-}'"
		fi
		# The GPU side of the same plan: kernels (vocab-parallel embedding included) and its collectives
		# in the launch list, checked without a GPU (tests/gpu/tp.sh runs it).
		# Every allreduce before a residual sum and its norm may be done by that sum's kernel (k_add_rmsnorm_ar).
		c=$(build/tools/checkplan "$tmp/tp.plan" 2>&1) && n=$(echo "$c" | sed -n 's/.* \([0-9]*\) collectives (\([0-9]*\) allreduces the next.*/\1 \2/p') &&
			[ "${n#* }" -gt 0 ] && [ "${n#* }" -le "${n% *}" ] &&
			ok "$m tp $tp: GPU kernels and collective launches checked ($(echo "$c" | grep -o '[0-9]* collectives ([^)]*)'))" ||
			bad "$m tp $tp: GPU kernels and collective launches checked" "$c"
	done
done

# Multi-GPU runs without a GPU: a tp plan on --device cuda is refused in one line; the watchdog's
# --timeout and the stall test hook are checked before any GPU is touched.
expect_fail "tp 4 plan on --device cuda without a GPU refused clearly" "run with --device cpu" bin/glmrun $tmp/tp.plan --device cuda --tokens 1,2
expect_fail "--timeout must be positive" "--timeout must be a number in" bin/glmrun $tmp/tp.plan --device cuda --tokens 1,2 --timeout 0
expect_fail "stall hook outside the plan's ranks refused" "GLMRUN_TEST_STALL_RANK=9: not a rank of this plan (0..3)" \
	env GLMRUN_TEST_STALL_RANK=9 bin/glmrun $tmp/tp.plan --device cuda --tokens 1,2

# More experts than the routing kernels keep on chip (1024): the plan falls back to the CPU, and says
# which node and why, rather than launching a kernel that would overrun its shared arrays.
sed 's/"num_local_experts": 8/"num_local_experts": 2048/' $FIX/qwen3_moe/config.json >$tmp/e2048.json
if bin/glmc compile models/qwen3_moe.lua --config $tmp/e2048.json --random-weights bf16 -o $tmp/e2048.plan 2>$tmp/err &&
	grep -q "moe_route (%[0-9]*, models/qwen3_moe.lua:[0-9]*) over 2048 experts has no CUDA kernel (at most 1024)" $tmp/err &&
	bin/glmc stats $tmp/e2048.plan | grep -qx "device: cpu"; then
	ok "2048 experts: a CPU plan, with the reason"
else
	bad "2048 experts: a CPU plan, with the reason" "$(head -c 300 $tmp/err)"
fi

# GLM-4.7-Flash's real widths at 2 layers: its one-token float GEMVs whose grids fit 8 blocks an SM (o, the
# q_a/kv_a pair, the router with the shared gate/up) declare that register budget, as ops/gemv_shape.h
# says (checkplan compares every such launch with gemv_min_blocks1)
if bin/glmc compile models/glm4_moe_lite.lua --config models/configs/glm4_7_flash.json --random-weights bf16 \
	--layers 2 -o $tmp/f2.plan 2>$tmp/err && c=$(build/tools/checkplan $tmp/f2.plan 2>&1) &&
	echo "$c" | grep -q ", 6 one-token GEMV launches with a register budget$"; then
	ok "GLM-4.7-Flash's one-token GEMVs declare their register budget"
else
	bad "GLM-4.7-Flash's one-token GEMVs declare their register budget" "${c:-$(tail -c 300 $tmp/err)}"
fi

# GLM-5's first (dense) layer at full width, Q4_K_M: its one-token SwiGLU + Q6_K down (K 12288, past one
# staged chunk) is k_qgemv_sk, the stream of weights with its dynamic shared memory (checkplan: the launch
# asks for it and its wrapper hands it over, within an H200 block's 232448 bytes)
if bin/glmc compile models/glm5.lua --config models/configs/glm5.json --random-weights q4_k_m --dtype bf16 \
	--layers 1 -o $tmp/g51.plan 2>$tmp/err && c=$(build/tools/checkplan $tmp/g51.plan 2>&1) &&
	strings $tmp/g51.plan | grep -q "k_qgemv_sk<bf16, 14, bf16, 2, 16, 8, 3>(.*glm_dsm); }"; then
	ok "GLM-5's dense SwiGLU + down takes the weight stream with its shared memory"
else
	bad "GLM-5's dense SwiGLU + down takes the weight stream with its shared memory" "${c:-$(tail -c 300 $tmp/err)}"
fi

# Plans without weights: the full GLM-5 configuration (78 layers, 256 experts, 64 heads, vocab 154880)
# from its hyperparameters with random Q4_K weights, partitioned for tp 8: two allreduces per layer
# (attention out, MLP/MoE out), one allgather (the vocab-parallel logits), and the sharded weights split
# evenly across the 8 GPUs.
start=$(date +%s)
if bin/glmc compile models/glm5.lua --config models/configs/glm5.json --random-weights q4_k --tp 8 -o $tmp/glm5.plan 2>/dev/null; then
	secs=$(($(date +%s) - start))
	bin/glmc stats $tmp/glm5.plan >$tmp/stats
	ar=$(sed -n 's/^allreduces_per_step: //p' $tmp/stats)
	per=$(sed -n 's/^weight_bytes_per_gpu: //p' $tmp/stats)
	tot=$(sed -n 's/^weight_bytes_total: //p' $tmp/stats)
	spl=$(sed -n 's/^weight_bytes_split: //p' $tmp/stats)
	[ "$ar" = 156 ] && ok "GLM-5 tp 8: 156 allreduces for 78 layers" || bad "GLM-5 tp 8: 156 allreduces for 78 layers" "$ar"
	# The sharded part on each GPU is within 2% of (sharded bytes)/8; the rest (norms, router, latent
	# projections) is replicated.
	awk -v p="$per" -v t="$tot" -v s="$spl" 'BEGIN { r = (p - (t - s)) / (s / 8); exit !(r > 0.98 && r < 1.02) }' &&
		ok "GLM-5 tp 8: $per weight bytes per GPU ($((spl / 8)) of them sharded = 1/8 of $spl; $((tot - spl)) replicated; compiled in ${secs}s)" ||
		bad "GLM-5 tp 8: per-GPU weight bytes" "$per of $tot"
	[ "$secs" -lt 60 ] && ok "GLM-5 tp 8 plan built in under a minute" || bad "GLM-5 tp 8 plan built in under a minute" "${secs}s"
	grep -q "^cache_bytes_per_token: 219648" $tmp/stats && ok "GLM-5 cache: (576 latent + 128 indexer-key) values per token per layer" ||
		bad "GLM-5 cache bytes per token" "$(grep cache_bytes $tmp/stats)"
else
	bad "GLM-5 full configuration compiles for tp 8" "$(bin/glmc compile models/glm5.lua --config models/configs/glm5.json --random-weights q4_k --tp 8 -o $tmp/glm5.plan 2>&1 | tail -1)"
fi
# The full GLM-5 at tp 1: at most 12 kernel launches per MoE layer of a decode step (launches only, so no
# NVRTC), with bf16 weights and with Q4_K weights kept in their blocks on the GPU (the fused GEMVs and the
# MoE layer's end read the blocks, ops/qfused.cuh: as many launches per layer as bf16), and the arena
# within 1.10 of its bound at tp 1 and tp 8.
G5="models/glm5.lua --config models/configs/glm5.json --random-weights q4_k"
kq=$(bin/glmc dump $G5 --after emit 2>/dev/null | sed -n 's/^kernels (decode step of 1 token): \([0-9]*\) per step; per layer: //p')
qmax=$(echo $kq | tr ' ' '\n' | sort -n | tail -1)
[ -n "$qmax" ] && [ "$qmax" -le 12 ] && ok "GLM-5 tp 1, Q4_K kept quantized: at most 12 kernels per layer in a decode step ($qmax)" ||
	bad "GLM-5 tp 1, Q4_K: at most 12 kernels per layer" "'$kq'"
kl=$(bin/glmc dump ${G5/q4_k/bf16} --after emit 2>/dev/null | sed -n 's/^kernels (decode step of 1 token): \([0-9]*\) per step; per layer: //p')
dense=$(sed -n 's/.*"first_k_dense_replace": *\([0-9]*\).*/\1/p' models/configs/glm5.json)
moe_max=$(echo $kl | tr ' ' '\n' | tail -n +$((${dense:-0} + 1)) | sort -n | tail -1)
[ -n "$kl" ] && [ -n "$moe_max" ] && [ "$moe_max" -le 12 ] &&
	ok "GLM-5 tp 1 (bf16 weights): at most 12 kernels per MoE layer in a decode step ($moe_max; dense layers $(echo $kl | cut -d' ' -f1))" ||
	bad "GLM-5 tp 1: at most 12 kernels per MoE layer in a decode step" "per layer: '$kl'"
# LAUNCH_NORM_LATE (what --round-bf16 models): a launch carries it exactly when its template forms the
# norm after the dots (prologue 3, GEMV_PRO_RMSLATE) in each of emit_cuda.c's three places: k_gemv_fused
# (llama bf16), k_qgemv_fused_mma (Q4_K) and k_qgemv_fused (a Q4_K/Q8_0 mix; Q8_0), one-token launches; and
# k_qgemv_tc (Q4_K/Q6_K groups in a bf16 plan), whose 2..8-token launches form it late too.
late_re='k_gemv_fused<[^,]*, [^,]*, [^,]*, 3,|k_qgemv_fused_mma<[^,]*, [^,]*, [^,]*, 3,|k_qgemv_fused<([^,]*, ){6}3,|k_qgemv_tc<([^,]*, ){3}3,'
for src in "models/llama.lua --weights $FIX/llama --dtype bf16" "models/glm5.lua --config tests/data/glm5_q256.json --random-weights q4_k_m" \
	"models/glm5.lua --config tests/data/glm5_q256.json --random-weights q8_0" \
	"models/glm5.lua --config tests/data/glm5_q256.json --random-weights q4_k_m --dtype bf16"; do
	bin/glmc dump $src --after emit 2>/dev/null | grep '^launch ' >$tmp/launches
	nl=$(grep -cE "$late_re" $tmp/launches)
	nm=$(grep -c '(norm read late, unrounded)$' $tmp/launches)
	nb=$(grep -E "$late_re" $tmp/launches | grep -c '(norm read late, unrounded)$')
	kinds=$(grep -E "$late_re" $tmp/launches | grep -oE 'k_q?gemv_(fused(_mma)?|tc)<' | sort -u | tr -d '<' | paste -sd' ')
	[ "$nl" -gt 0 ] && [ "$nl" = "$nm" ] && [ "$nl" = "$nb" ] && ! grep '(norm read late, unrounded)' $tmp/launches | grep -v 'k_qgemv_tc<' | grep -qv 't=\[1,1\]' &&
		ok "${src%% *} ${src##* }: the $nl launches forming the norm late are marked so, no other ($kinds)" ||
		bad "${src%% *} ${src##* }: launches forming the norm late marked" "$nl late templates, $nm marked, $nb both"
done
# LAUNCH_NORM_TC: k_gemv_tc's launches with the late norm (prologue 3: bf16(x·nw) into the mma) carry it,
# for the 2..8- and 9..16-token steps of a bf16 plan's norm groups; no other launch does.
bin/glmc dump models/glm4_moe_lite.lua --config models/configs/glm4_7_flash.json --random-weights bf16 --dtype bf16 --layers 2 --after emit 2>/dev/null | grep "^launch " >$tmp/launches
tc_re='k_gemv_tc<([^,]*, ){3}3,'
nl=$(grep -cE "$tc_re" $tmp/launches) nm=$(grep -c '(norm read late, bf16(x·nw))$' $tmp/launches)
nb=$(grep -E "$tc_re" $tmp/launches | grep -c '(norm read late, bf16(x·nw))$')
[ "$nl" -gt 0 ] && [ "$nl" = "$nm" ] && [ "$nl" = "$nb" ] && ! grep -E "$tc_re" $tmp/launches | grep -q 't=\[1,' &&
	ok "GLM-4.7-Flash bf16 (2 layers): the $nl k_gemv_tc launches with the late norm are marked LAUNCH_NORM_TC, no other" ||
	bad "GLM-4.7-Flash bf16: k_gemv_tc launches with the late norm marked LAUNCH_NORM_TC" "$nl late templates, $nm marked, $nb both"
for tp in 1 8; do
	a=$(bin/glmc dump $G5 --tp $tp --after memplan 2>/dev/null | sed -n 's/^arena: //p')
	r=$(echo "$a" | awk '{ if ($10 + $14 > 0) printf "%.3f", ($1 + $6) / ($10 + $14) }')
	awk -v r="$r" 'BEGIN { exit !(r != "" && r <= 1.10) }' && ok "GLM-5 tp $tp: activation arena within 1.10 of its lower bound ($r)" ||
		bad "GLM-5 tp $tp: activation arena within 1.10 of its lower bound" "arena line '$a'"
done
bin/glmc compile models/glm5.lua --config $FIX/glm_moe_dsa/config.json --random-weights bf16 -o $tmp/rnd.plan 2>/dev/null &&
	bin/glmrun $tmp/rnd.plan --device cpu --tokens 1,2,3 -n 4 >$tmp/out 2>$tmp/err && grep -q "RANDOM WEIGHTS (bf16)" $tmp/err &&
	[ "$(wc -w <$tmp/out)" = 4 ] && ok "random-weight plans run and say so" || bad "random-weight plans run and say so" "$(cat $tmp/err)"

# Other storage: sharded f32 must give the very same logits; f16 and bf16 weights within their error.
if [ -x $MKHF ]; then
	$MKHF $FIX/llama "$tmp/llama-sharded" --shards 3 >/dev/null &&
		bin/glmc compile models/llama.lua --weights "$tmp/llama-sharded" -o "$tmp/sh.plan" 2>/dev/null &&
		bin/glmrun "$tmp/sh.plan" --tokens "$($CMP --prompt $FIX/llama)" -n 12 --dump-logits "$tmp/sh.f32" >/dev/null &&
		cmp -s "$tmp/sh.f32" "$tmp/llama.f32" && ok "sharded checkpoint gives identical logits" ||
		bad "sharded checkpoint gives identical logits" "differs or failed"
	for dt in f16 bf16; do
		tol=2e-3
		[ $dt = bf16 ] && tol=2e-2
		$MKHF $FIX/qwen3 "$tmp/qwen3-$dt" --dtype $dt >/dev/null &&
			bin/glmc compile models/qwen3.lua --weights "$tmp/qwen3-$dt" -o "$tmp/$dt.plan" 2>/dev/null &&
			bin/glmrun "$tmp/$dt.plan" --tokens "$($CMP --prompt $FIX/qwen3)" -n 12 --dump-logits "$tmp/$dt.f32" >/dev/null &&
			r=$($CMP "$tmp/$dt.f32" $FIX/qwen3 $tol) && ok "qwen3 $dt weights ($r)" || bad "qwen3 $dt weights" "${r:-failed}"
		# GLM-4.5's attention has biases: an f32 plan of a 16-bit checkpoint widens them to the activation
		# type at upload (the kernels add a bias as an A value), and its GPU kernels compile
		$MKHF $FIX/glm4_moe "$tmp/glm4_moe-$dt" --dtype $dt >/dev/null &&
			bin/glmc compile models/glm4_moe.lua --weights "$tmp/glm4_moe-$dt" -o "$tmp/g$dt.plan" 2>"$tmp/err" &&
			build/tools/checkplan "$tmp/g$dt.plan" >/dev/null 2>>"$tmp/err" &&
			bin/glmrun "$tmp/g$dt.plan" --device cpu -n 1 --dump-logits "$tmp/g$dt.f32" \
				--tokens "$($CMP --prompt $FIX/glm4_moe),$($CMP --greedy $FIX/glm4_moe | tr ' ' ',' | cut -d, -f1-11)" >/dev/null &&
			r=$($CMP "$tmp/g$dt.f32" $FIX/glm4_moe $tol) && ok "glm4_moe $dt checkpoint (biases) in an f32 plan ($r)" ||
			bad "glm4_moe $dt checkpoint (biases) in an f32 plan" "${r:-$(tail -c 300 "$tmp/err")}"
	done
else
	bad "mkhf tool" "build/tools/mkhf is missing"
fi

# GGUF: the fixtures converted with llama.cpp's names and keys (llama's q/k rows permuted as its
# converter does), in F32 and Q8_0, in file, reverse and shuffled tensor order.
MKGGUF=build/tools/mkgguf
for m in llama qwen3; do
	$MKGGUF $FIX/$m "$tmp/$m.gguf" --type f32 >/dev/null
	run_fixture $m-gguf models/$m.lua "$tmp/$m.gguf" 1e-5 $m
	for order in reverse shuffle; do
		$MKGGUF $FIX/$m "$tmp/$m-$order.gguf" --type f32 --order $order >/dev/null &&
			bin/glmc compile models/$m.lua --weights "$tmp/$m-$order.gguf" -o "$tmp/o.plan" 2>/dev/null &&
			bin/glmrun "$tmp/o.plan" --device cpu --tokens "$($CMP --prompt $FIX/$m)" -n 12 --dump-logits "$tmp/o.f32" >/dev/null &&
			cmp -s "$tmp/o.f32" "$tmp/$m-gguf.f32" && ok "$m GGUF in $order order gives bit-identical logits" ||
			bad "$m GGUF in $order order gives bit-identical logits" "differs or failed"
	done
done
# Q8_0: qwen3 keeps the fixture's greedy tokens. llama's fixture has a near-tie at its second generated
# token (top-2 logits 0.0055 apart), which Q8_0's weight error flips, so it is compared teacher-forced
# (the prompt and the fixture's tokens in one prefill), like any quantized model.
$MKGGUF $FIX/qwen3 "$tmp/qwen3-q8.gguf" --type q8_0 >/dev/null
run_fixture qwen3-q8_0 models/qwen3.lua "$tmp/qwen3-q8.gguf" 3e-2 qwen3
$MKGGUF $FIX/llama "$tmp/llama-q8.gguf" --type q8_0 >/dev/null &&
	bin/glmc compile models/llama.lua --weights "$tmp/llama-q8.gguf" -o "$tmp/lq.plan" 2>/dev/null &&
	bin/glmrun "$tmp/lq.plan" --device cpu -n 1 --dump-logits "$tmp/lq.f32" \
		--tokens "$($CMP --prompt $FIX/llama),$($CMP --greedy $FIX/llama | tr ' ' ',' | cut -d, -f1-11)" >/dev/null &&
	r=$($CMP "$tmp/lq.f32" $FIX/llama 3e-2) && ok "llama Q8_0 teacher-forced logits ($r)" || bad "llama Q8_0 teacher-forced logits" "${r:-failed}"

# glmc inspect: the same tensor dumped from the HF checkpoint and from its GGUF conversion is identical.
bin/glmc inspect $FIX/llama --tensor model.embed_tokens.weight --dump $tmp/a.f32 >/dev/null &&
	bin/glmc inspect $tmp/llama.gguf --tensor token_embd.weight --dump $tmp/b.f32 >/dev/null &&
	cmp -s $tmp/a.f32 $tmp/b.f32 && [ "$(stat -c %s $tmp/a.f32)" = $((512 * 64 * 4)) ] &&
	ok "inspect --dump agrees between safetensors and GGUF" || bad "inspect --dump agrees between safetensors and GGUF" "differs"
bin/glmc inspect $tmp/llama-q8.gguf | grep -q "blk.0.ffn_down.weight *Q8_0 *\[64, 128\] *8704 bytes" &&
	ok "inspect lists tensors with type, shape and bytes" || bad "inspect lists tensors with type, shape and bytes" "line missing"

# Q8_0 exactness: a Q8_0 GGUF and an F32 GGUF holding the same values dequantized (mkgguf --roundtrip)
# give bit-identical logits, so any difference from the fixture is the quantisation's, not glmc's.
for m in llama qwen3; do
	$MKGGUF $FIX/$m "$tmp/$m-rt.gguf" --type q8_0 --roundtrip >/dev/null &&
		bin/glmc compile models/$m.lua --weights "$tmp/$m-rt.gguf" -o "$tmp/rt.plan" 2>/dev/null &&
		bin/glmc compile models/$m.lua --weights "$tmp/$m-q8.gguf" -o "$tmp/q8.plan" 2>/dev/null &&
		bin/glmrun "$tmp/rt.plan" --device cpu --tokens "$($CMP --prompt $FIX/$m)" -n 12 --dump-logits "$tmp/rt.f32" >/dev/null &&
		bin/glmrun "$tmp/q8.plan" --device cpu --tokens "$($CMP --prompt $FIX/$m)" -n 12 --dump-logits "$tmp/q8.f32" >/dev/null &&
		cmp -s "$tmp/rt.f32" "$tmp/q8.f32" && ok "$m Q8_0 equals F32 on the dequantized values, bit for bit" ||
		bad "$m Q8_0 equals F32 on the dequantized values" "differs or failed"
done

# Bad GGUF files: one line naming the file and what is wrong.
G=$tmp/llama.gguf
head -c 5000 $G >$tmp/trunc.gguf
expect_fail "truncated GGUF" "trunc.gguf" bin/glmc compile models/llama.lua --weights $tmp/trunc.gguf -o $tmp/x.plan
cp $G $tmp/magic.gguf && printf 'XXXX' | dd of=$tmp/magic.gguf bs=1 conv=notrunc 2>/dev/null
expect_fail "GGUF with a wrong magic" "magic.gguf: not a GGUF file" bin/glmc compile models/llama.lua --weights $tmp/magic.gguf -o $tmp/x.plan
cp $G $tmp/strlen.gguf && printf '\xff\xff\xff\xff\xff\xff\x00\x00' | dd of=$tmp/strlen.gguf bs=1 seek=24 conv=notrunc 2>/dev/null
expect_fail "GGUF with an oversized string length" "strlen.gguf" bin/glmc compile models/llama.lua --weights $tmp/strlen.gguf -o $tmp/x.plan
build/tools/ggufedit $G $tmp/shape.gguf --shape blk.0.attn_q.weight=32,128
expect_fail "GGUF tensor with a mismatched shape" "tensor 'blk.0.attn_q.weight' in $tmp/shape.gguf has shape [128, 32], the model expects [64, 64]" bin/glmc compile models/llama.lua --weights $tmp/shape.gguf -o $tmp/x.plan
build/tools/ggufedit $G $tmp/type.gguf --type token_embd.weight=99
expect_fail "GGUF tensor with an unknown type id" "tensor 'token_embd.weight': unknown ggml type id 99" bin/glmc compile models/llama.lua --weights $tmp/type.gguf -o $tmp/x.plan

# Model descriptions with errors: file:line and the names involved.
M=tests/models
L=$FIX/llama
expect_fail "syntax error names file:line" "syntax_error.lua:2:" bin/glmc compile $M/syntax_error.lua --weights $L -o $tmp/x.plan
expect_fail "shape error names line and shapes" "shape_error.lua:6: linear: input f32[T,64] has 64 features but weight f32[64,32] takes 32" bin/glmc compile $M/shape_error.lua --weights $L -o $tmp/x.plan
expect_fail "unknown parameter names the tensor" "unknown_param.lua:4: parameter 'blk.0.attn_gate.weight': tensor 'model.layers.0.self_attn.gate.weight' not found" bin/glmc compile $M/unknown_param.lua --weights $L -o $tmp/x.plan
expect_fail "unmapped parameter names it" "unmapped_param.lua:4: parameter 'blk.0.attn_qq.weight' has no hf name" bin/glmc compile $M/unmapped_param.lua --weights $L -o $tmp/x.plan
expect_fail "parameter shape mismatch" "tensor 'model.embed_tokens.weight' in $L/model.safetensors has shape [512, 64], the model expects [512, 32]" bin/glmc compile $M/wrong_shape_param.lua --weights $L -o $tmp/x.plan
expect_fail "missing hyperparameter" "missing_hparam.lua:2: hyperparameter 'n_experts': none of [num_experts_per_tok]" bin/glmc compile $M/missing_hparam.lua --weights $L -o $tmp/x.plan
expect_fail "model without output" "declares no output" bin/glmc compile $M/no_output.lua --weights $L -o $tmp/x.plan
expect_fail "op given a non-tensor" "bad_op_arg.lua:2: silu: argument 1 must be a tensor, got nil" bin/glmc compile $M/bad_op_arg.lua --weights $L -o $tmp/x.plan
expect_fail "split sizes checked" "split_error.lua:3: split: parts add up to 48 but axis 2 has 64" bin/glmc compile $M/split_error.lua --weights $L -o $tmp/x.plan
expect_fail "missing model file" "nope.lua" bin/glmc compile $M/nope.lua --weights $L -o $tmp/x.plan
printf '\033Lua\124\000' >"$tmp/bytecode.lua"
expect_fail "bytecode model refused" "binary chunk" bin/glmc compile "$tmp/bytecode.lua" --weights $L -o $tmp/x.plan

# The sandbox: no io, os, debug, load; require only from the library; no endless loops.
expect_fail "sandbox: no io" "sandbox_io.lua:1: attempt to index a nil value (global 'io')" bin/glmc compile $M/sandbox_io.lua --weights $L -o $tmp/x.plan
expect_fail "sandbox: no os" "sandbox_os.lua:1: attempt to index a nil value (global 'os')" bin/glmc compile $M/sandbox_os.lua --weights $L -o $tmp/x.plan
[ ! -e /tmp/glmc-sandbox-escaped ] && ok "sandbox: os.execute did not run" || bad "sandbox: os.execute did not run" "file created"
expect_fail "sandbox: no debug" "sandbox_debug.lua:1: attempt to index a nil value (global 'debug')" bin/glmc compile $M/sandbox_debug.lua --weights $L -o $tmp/x.plan
expect_fail "sandbox: no load" "sandbox_load.lua:1: attempt to call a nil value (global 'load')" bin/glmc compile $M/sandbox_load.lua --weights $L -o $tmp/x.plan
expect_fail "sandbox: require limited to the library" "sandbox_require.lua:1: require: no module 'os' in the model library" bin/glmc compile $M/sandbox_require.lua --weights $L -o $tmp/x.plan
expect_fail "sandbox: require path traversal" "sandbox_require_path.lua:1: require: module name" bin/glmc compile $M/sandbox_require_path.lua --weights $L -o $tmp/x.plan
expect_fail "sandbox: endless loop stopped" "endless.lua:2: the model ran more than" bin/glmc compile $M/endless.lua --weights $L -o $tmp/x.plan

# Weights folders with problems.
mkdir -p "$tmp/empty"
expect_fail "weights folder without config.json" "config.json" bin/glmc compile models/llama.lua --weights "$tmp/empty" -o $tmp/x.plan
if [ -x $MKHF ]; then
	$MKHF $L "$tmp/llama-missing" --drop model.layers.1.mlp.up_proj.weight >/dev/null 2>&1
	expect_fail "missing tensor named" "parameter 'blk.1.ffn_up.weight': tensor 'model.layers.1.mlp.up_proj.weight' not found" bin/glmc compile models/llama.lua --weights "$tmp/llama-missing" -o $tmp/x.plan
fi
$MKHF $L "$tmp/llama-extra" --copy model.layers.0.extra.weight=model.layers.0.input_layernorm.weight >/dev/null 2>&1
bin/glmc compile models/llama.lua --weights "$tmp/llama-extra" -o $tmp/x.plan 2>"$tmp/err" >/dev/null
grep -q "warning: .*tensor 'model.layers.0.extra.weight' is not used" "$tmp/err" && ok "unused tensors listed" || bad "unused tensors listed" "$(head -3 "$tmp/err")"
expect_fail "unused tensors refused with --strict" "is not used by the model (--strict)" bin/glmc compile models/llama.lua --weights "$tmp/llama-extra" -o $tmp/x.plan --strict

# Plans: another format version, corruption, truncation, and weights that changed under a plan.
P=$tmp/llama.plan
cp $P $tmp/v.plan && printf '\x06' | dd of=$tmp/v.plan bs=1 seek=8 conv=notrunc 2>/dev/null
expect_fail "plan from another format version" "plan format version 6, but this glmrun reads version" bin/glmrun $tmp/v.plan --tokens 1,2
cp $P $tmp/c.plan && printf '\xff' | dd of=$tmp/c.plan bs=1 seek=200 conv=notrunc 2>/dev/null
expect_fail "corrupted plan" "checksum mismatch" bin/glmrun $tmp/c.plan --tokens 1,2
head -c 1000 $P >$tmp/t.plan
expect_fail "truncated plan" "truncated or appended to" bin/glmrun $tmp/t.plan --tokens 1,2
expect_fail "not a plan" "not a glmc plan" bin/glmrun models/llama.lua --tokens 1,2
expect_fail "weights changed since compile" "the plan expects" bin/glmrun $P --weights $tmp/qwen3-bf16 --tokens 1,2

# Prompts and devices.
expect_fail "token id outside the vocabulary" "token id 600 is outside the vocabulary [0, 512)" bin/glmrun $P --tokens 1,600
expect_fail "prompt longer than the context" "more than the model's context of 512" bin/glmrun $P --tokens 1,2,3 -n 600
expect_fail "prompt longer than --max-seq" "more than --max-seq 8" bin/glmrun $P --tokens 1,2,3,4,5,6 -n 4 --max-seq 8
expect_fail "bad token list" "not a comma-separated list" bin/glmrun $P --tokens 1,x,3
expect_fail "cuda device without a GPU refused clearly" "run with --device cpu" bin/glmrun $P --device cuda --tokens 1,2
out=$(bin/glmrun $P --tokens 5 -n 3) && [ "$(echo $out | wc -w)" = 3 ] && ok "glmrun -n 3 prints 3 ids" || bad "glmrun -n 3 prints 3 ids" "$out"
bin/glmrun $P --tokens 5,6,7 -n 4 --dump-logits $tmp/rows.f32 >/dev/null &&
	[ "$(stat -c %s $tmp/rows.f32)" = $(((3 + 4 - 1) * 512 * 4)) ] && ok "dump-logits has n_prompt + n - 1 rows" ||
	bad "dump-logits has n_prompt + n - 1 rows" "size $(stat -c %s $tmp/rows.f32 2>/dev/null)"

# Sampling on the CPU (the GPU sampler's twin): seeds reproduce, --temp 0 and --top-k 1 are greedy.
PR=$($CMP --prompt $FIX/llama)
GR=$($CMP --greedy $FIX/llama)
s1=$(bin/glmrun $P --device cpu --tokens "$PR" -n 16 --temp 1.5 --seed 7)
s2=$(bin/glmrun $P --device cpu --tokens "$PR" -n 16 --temp 1.5 --seed 7)
s3=$(bin/glmrun $P --device cpu --tokens "$PR" -n 16 --temp 1.5 --seed 8)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && ok "same seed, same sampled tokens" || bad "same seed, same sampled tokens" "'$s1' vs '$s2'"
[ "$s1" != "$s3" ] && ok "another seed, other tokens" || bad "another seed, other tokens" "both '$s1'"
[ "$(bin/glmrun $P --device cpu --tokens "$PR" -n 12 --temp 0 --seed 5)" = "$GR" ] && ok "--temp 0 is greedy" || bad "--temp 0 is greedy" "differs"
[ "$(bin/glmrun $P --device cpu --tokens "$PR" -n 12 --temp 2 --top-k 1 --seed 5)" = "$GR" ] && ok "--top-k 1 is greedy" || bad "--top-k 1 is greedy" "differs"
[ "$(bin/glmrun $P --device cpu --tokens "$PR" -n 12 --temp 1 --top-p 0.000001 --seed 5)" = "$GR" ] && ok "tiny --top-p is greedy" || bad "tiny --top-p is greedy" "differs"
expect_fail "bad --top-p" "--top-p must be a number in [0, 1]" bin/glmrun $P --tokens 1 --top-p 2

# --force (teacher forcing in the decode's own steps): tokens forced back give the run they came from,
# greedy or sampled, bit for bit; -n defaults to their count; refusals are one line naming the culprit.
bin/glmrun $P --device cpu --tokens "$PR" -n 12 --dump-logits $tmp/greedy.f32 >/dev/null
fo=$(bin/glmrun $P --device cpu --tokens "$PR" --force "$(echo $GR | tr ' ' ',')" --dump-logits $tmp/forced.f32)
[ "$fo" = "$GR" ] && cmp -s $tmp/greedy.f32 $tmp/forced.f32 &&
	ok "--force with the greedy tokens: the same 12 ids and bit-identical logits" ||
	bad "--force with the greedy tokens" "ids '$fo'; logits $(cmp $tmp/greedy.f32 $tmp/forced.f32 2>&1 | head -c 200)"
bin/glmrun $P --device cpu --tokens "$PR" -n 16 --temp 1.5 --seed 7 --dump-logits $tmp/sampled.f32 >/dev/null
fo=$(bin/glmrun $P --device cpu --tokens "$PR" --force "$(echo $s1 | tr ' ' ',')" --dump-logits $tmp/forced.f32)
[ "$fo" = "$s1" ] && cmp -s $tmp/sampled.f32 $tmp/forced.f32 && ! cmp -s $tmp/greedy.f32 $tmp/forced.f32 &&
	ok "--force with a sampled run's tokens: its ids and logits bit for bit (not the greedy run's)" ||
	bad "--force with a sampled run's tokens" "ids '$fo' (sampled '$s1')"
fo=$(bin/glmrun $P --device cpu --tokens 1,2,3 --force 9,8,7,6,5,4 -n 3 --dump-logits $tmp/forced.f32)
[ "$fo" = "9 8 7" ] && [ "$(stat -c %s $tmp/forced.f32)" = $(((3 + 3 - 1) * 512 * 4)) ] &&
	ok "--force with a smaller -n: the first n ids, n_prompt + n - 1 rows" || bad "--force with -n 3" "'$fo'"
fo=$(bin/glmrun $P --device cpu --tokens 1,2,3 --force 4,5,6,7,8,9 --max-seq 8) && [ "$fo" = "4 5 6 7 8 9" ] &&
	ok "--force filling --max-seq exactly (3 + 6 - 1 positions)" || bad "--force filling --max-seq exactly" "'$fo'"
expect_fail "--force: token id outside the vocabulary" "--force: token id 600 is outside the vocabulary [0, 512)" bin/glmrun $P --device cpu --tokens 1,2 --force 5,600
expect_fail "--force: not a list of ids" "--force: '5,x' is not a comma-separated list of token ids" bin/glmrun $P --device cpu --tokens 1,2 --force 5,x
expect_fail "--force: -n beyond its tokens" "-n 4 asks for more tokens than the 3 given to --force" bin/glmrun $P --device cpu --tokens 1,2 --force 5,6,7 -n 4
expect_fail "--force past --max-seq" "prompt of 3 tokens + 7 generated (--force) needs 9 positions, more than --max-seq 8" bin/glmrun $P --device cpu --tokens 1,2,3 --force 1,2,3,4,5,6,7 --max-seq 8
expect_fail "--force past the context" "more than the model's context of 512" bin/glmrun $P --device cpu --tokens 1,2,3 --force "$(seq -s, 1 511)"
expect_fail "--force with --batch" "--force generates one sequence after a plain prompt; drop --batch" bin/glmrun $P --device cpu --tokens 1,2 --force 5 --batch 2
expect_fail "--force with --verify" "drop --verify" bin/glmrun $P --device cpu --tokens 1,2 --force 5 --verify

# Golden IR dumps of llama at tp 2 after each pass (front, partition, fuse, memplan): any change to what a
# pass does shows up here (regenerate with tests/golden/update.sh after an intended change).
for p in front partition fuse memplan; do
	if bin/glmc dump models/llama.lua --weights $FIX/llama --tp 2 --after $p 2>/dev/null | diff -q - tests/golden/llama-tp2.after-$p.txt >/dev/null; then
		ok "golden dump after $p"
	else
		bad "golden dump after $p" "$(bin/glmc dump models/llama.lua --weights $FIX/llama --tp 2 --after $p 2>/dev/null | diff - tests/golden/llama-tp2.after-$p.txt | head -5)"
	fi
done
bin/glmc dump models/llama.lua --weights $FIX/llama --after fuse --dot $tmp/g.dot >/dev/null 2>&1 &&
	[ "$(grep -c ' -> ' $tmp/g.dot)" -gt 60 ] && grep -q 'fused' $tmp/g.dot && tail -1 $tmp/g.dot | grep -q '^}$' &&
	ok "glmc dump --dot writes the graph with its fusions" || bad "glmc dump --dot" "$(head -c 200 $tmp/g.dot)"
bin/glmc explain $tmp/llama.plan | grep -q "^memory: activation arena .* ratio 1.000" && ok "glmc explain reports the memory plan against its bound" || bad "glmc explain" "$(bin/glmc explain $tmp/llama.plan | tail -2)"
# Kernel selection (compiler/passes/select.c): glmc explain with the model shows each decode GEMV group's kernel per
# step range and why; the target comes from --arch. GLM-5's SwiGLU down projection over K 12288 takes the
# stream kernel on sm_90 (142 KB of shared memory, within an H100's 227 KB block) and loses it on sm_86 (99 KB).
sel=$(bin/glmc explain models/llama.lua --weights $FIX/llama 2>&1)
echo "$sel" | grep -q "^kernel selection for sm_90 (132 SMs" && echo "$sel" | grep -q "T 1..1: k_gemv_fused .*gemv_shape_late1" &&
	echo "$sel" | grep -q "T 2..8: k_gemv_fused .*k_gemv_tc lost: activations are not bf16" &&
	ok "glmc explain MODEL: the kernel chosen for each group's steps and why the tensor-core one lost" ||
	bad "glmc explain MODEL" "$(echo "$sel" | grep -A3 '^kernel selection' | head -c 400)"
g5="models/glm5.lua --config models/configs/glm5.json --random-weights q4_k_m --dtype bf16 --layers 2"
# shellcheck disable=SC2086
s90=$(bin/glmc explain $g5 2>&1 | grep -c "k_qgemv_sk prologue swiglu smem 144896")
# shellcheck disable=SC2086
s86=$(bin/glmc explain $g5 --arch sm_86 2>&1 | grep -c "k_qgemv_sk lost: its shared memory exceeds the target's block")
[ "$s90" -eq 2 ] && [ "$s86" -eq 2 ] && ok "kernel selection by --arch: k_qgemv_sk on sm_90, refused for its shared memory on sm_86" ||
	bad "kernel selection by --arch" "sm_90 chose k_qgemv_sk $s90 times (want 2), sm_86 refused it $s86 times (want 2)"

# Text in, text out: the llama fixture in GGUF with GPT-2's first 512 tokens as its vocabulary (its byte
# alphabet and first merges), so the tiny random model can take and give text. Greedy text equals the
# decoded greedy ids of the same prompt (a prompt whose answer is valid UTF-8, since the stream writes
# U+FFFD where the raw decode keeps invalid bytes); a seed repeats; --stop stops.
build/tools/addvocab "$tmp/llama.gguf" ../shared/fixtures/vocab/ggml-vocab-gpt-2.gguf 512 "$tmp/lv.gguf" >/dev/null &&
	bin/glmc compile models/llama.lua --weights "$tmp/lv.gguf" -o "$tmp/lv.plan" 2>/dev/null
t1=$(bin/glmrun "$tmp/lv.plan" --device cpu -p "Good morning" -n 16 2>/dev/null)
ids=$(echo -n "Good morning" | bin/glmc tokenize "$tmp/lv.gguf" | tr ' ' ',')
t2=$(bin/glmrun "$tmp/lv.plan" --device cpu --tokens "$ids" -n 16 | tr ' ' '\n' | bin/glmc tokenize "$tmp/lv.gguf" --decode)
[ -n "$t1" ] && [ "$t1" = "$t2" ] && ok "-p answers with the text of the greedy ids" || bad "-p answers with the text of the greedy ids" "'$t1' vs '$t2'"
s1=$(bin/glmrun "$tmp/lv.plan" -p "Once upon" -n 12 --temp 1.2 --seed 9 2>/dev/null)
s2=$(echo -n "Once upon" | bin/glmrun "$tmp/lv.plan" -p - -n 12 --temp 1.2 --seed 9 2>/dev/null)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && ok "-p with a seed repeats (prompt from stdin too)" || bad "-p with a seed repeats" "'$s1' vs '$s2'"
bin/glmrun "$tmp/lv.plan" -p "Hello" -n 8 2>$tmp/err >/dev/null && grep -q "^glmrun: prefill [0-9]* tokens at .* tok/s, decode [0-9]* tokens at .* tok/s" $tmp/err &&
	ok "-p prints prefill and decode speeds on stderr" || bad "-p prints speeds" "$(cat $tmp/err)"
st=$(bin/glmrun "$tmp/lv.plan" -p "Good morning" -n 16 --stop "ect" 2>/dev/null)
[ -n "$st" ] && [ "$st" = "${t1%%ect*}" ] && ok "--stop ends the answer before the stop string ('$st')" ||
	bad "--stop" "'$st' (answer '$t1')"
expect_fail "-p on a plan without a tokenizer" "no tokenizer" bin/glmrun $tmp/rnd.plan -p "hi"
gi=$(bin/glmrun "$tmp/lv.plan" --device cpu --tokens "$ids" -n 16 | tr ' ' ',')
t3=$(bin/glmrun "$tmp/lv.plan" --device cpu -p "Good morning" --force "$gi" 2>/dev/null)
[ -n "$t3" ] && [ "$t3" = "$t1" ] && ok "-p with --force of the greedy ids answers the greedy text" || bad "-p with --force" "'$t3' vs '$t1'"

# --fallback: the newer kernels by default (the DSA fixture's bf16 plan: the routed experts' grouped GEMM
# k_moe_up_tc, the DSA prefill k_dsa_tc; Llama-3-8B's head rows: the split decode attention), the older ones
# when named; an unknown name is one line of error.
kn() { grep -ao 'k_moe_up_tc<[^>]*>\|k_dsa_tc<[^>]*>\|k_mla<[^>]*>\|k_moe_up<[^>]*>\|k_attn_split[a-z_]*<[^>]*>\|k_attn_step[a-z_]*<[^>]*>' "$1" | sed 's/<.*//' | sort -u | tr '\n' ' '; }
bin/glmc compile models/glm5.lua --weights $FIX/glm_moe_dsa --dtype bf16 -o $tmp/fb0.plan 2>/dev/null &&
	bin/glmc compile models/glm5.lua --weights $FIX/glm_moe_dsa --dtype bf16 --fallback moe_tc,dsa_tc -o $tmp/fb1.plan 2>/dev/null &&
	[ "$(kn $tmp/fb0.plan)" = "k_dsa_tc k_moe_up k_moe_up_tc " ] && [ "$(kn $tmp/fb1.plan)" = "k_mla k_moe_up " ] &&
	ok "--fallback moe_tc,dsa_tc takes the CUDA-core MoE and DSA prefill kernels back" ||
	bad "--fallback moe_tc,dsa_tc" "default: $(kn $tmp/fb0.plan), fallback: $(kn $tmp/fb1.plan)"
C8=models/configs/llama3_8b.json
bin/glmc compile models/llama.lua --config $C8 --random-weights bf16 --dtype bf16 --layers 1 -o $tmp/fb2.plan 2>/dev/null &&
	bin/glmc compile models/llama.lua --config $C8 --random-weights bf16 --dtype bf16 --layers 1 --fallback all -o $tmp/fb3.plan 2>/dev/null &&
	[ "$(kn $tmp/fb2.plan)" = "k_attn_split k_attn_split_rope " ] && [ "$(kn $tmp/fb3.plan)" = "k_attn_step k_attn_step_rope " ] &&
	ok "--fallback all takes k_attn_step back from the split decode attention" ||
	bad "--fallback all" "default: $(kn $tmp/fb2.plan), fallback: $(kn $tmp/fb3.plan)"
expect_fail "--fallback with an unknown kernel" "--fallback: unknown kernel 'bogus'" bin/glmc compile models/llama.lua --weights $FIX/llama --fallback attn_split,bogus -o $tmp/fb4.plan
# the MLA fixture's bf16 plan: the expanded prefill and the tensor-core decode split, the older kernels when named
tk() { grep -ao 'k_mla_xattn<[0-9]\|k_mla_split_tc<[0-9]\|k_mla_split<[a-z]' "$1" | sed 's/<.*//' | sort -u | tr '\n' ' '; }
bin/glmc compile models/glm4_moe_lite.lua --weights $FIX/glm4_moe_lite --dtype bf16 -o $tmp/tr0.plan 2>/dev/null &&
	bin/glmc compile models/glm4_moe_lite.lua --weights $FIX/glm4_moe_lite --dtype bf16 --fallback mla_expand -o $tmp/tr1.plan 2>/dev/null &&
	bin/glmc compile models/glm4_moe_lite.lua --weights $FIX/glm4_moe_lite --dtype bf16 --fallback mla_split_tc,mla_expand -o $tmp/tr2.plan 2>/dev/null &&
	[ "$(tk $tmp/tr0.plan)" = "k_mla_split_tc k_mla_xattn " ] && [ "$(tk $tmp/tr1.plan)" = "k_mla_split_tc " ] &&
	[ "$(tk $tmp/tr2.plan)" = "k_mla_split " ] &&
	ok "--fallback mla_expand,mla_split_tc takes the absorbed prefill and k_mla_split back" ||
	bad "--fallback mla_expand,mla_split_tc" "default: $(tk $tmp/tr0.plan), mla_expand: $(tk $tmp/tr1.plan), both: $(tk $tmp/tr2.plan)"

# Help and dumps.
bin/glmc --help | grep -qF "glmc compile [MODEL.lua] --weights PATH -o OUT.plan" && ok "glmc --help" || bad "glmc --help" "usage missing"
bin/glmrun --help | grep -q -- "--dump-logits FILE" && ok "glmrun --help" || bad "glmrun --help" "usage missing"
bin/glmc dump models/llama.lua --weights $L --after front | grep -q '^%[0-9]* = attention %.* heads=4 kv_heads=2 head_dim=16' && ok "glmc dump --after front" || bad "glmc dump --after front" "no attention node"
bin/glmc dump $P | grep -q '^weight %[0-9]* "blk.0.attn_q.weight" <- "model.layers.0.self_attn.q_proj.weight"' && ok "glmc dump PLAN lists the manifest" || bad "glmc dump PLAN lists the manifest" "no manifest line"
exit 0
