#!/usr/bin/env bash
# tests/iq_gguf.sh — a GGUF whose matrices are IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0,
# TQ2_0, NVFP4, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4 blocks (a small
# llama-architecture model written by gguf-py: tests/tools/mk_iq_model.py) is read, bound, compiled and
# run by glmc on the CPU, and its logits are bit for bit those of the same model stored as F32 holding
# gguf-py's dequantization of the same blocks. The compile keeps every one of those weights in its blocks
# for the GPU, so NVRTC builds the kernels of every type (ops/quant.cuh's general path). Needs python3
# with gguf and numpy.
# Prints "ok - NAME" / "FAIL - NAME: why" lines for tests/run.sh to count.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1: $2"; }

TOKENS=1,17,42,99,3,200

if ! python3 tests/tools/mk_iq_model.py "$tmp/q.gguf" "$tmp/f.gguf" 2>"$tmp/err"; then
	bad "mk_iq_model.py writes the IQ/TQ/NVFP4 model" "$(tail -1 "$tmp/err") (needs: pip install gguf numpy)"
	exit 0
fi
ok "mk_iq_model.py writes the IQ/TQ/NVFP4 model and its F32 twin"

# glmc inspect names every type of the file.
bin/glmc inspect "$tmp/q.gguf" >"$tmp/inspect" 2>&1
miss=""
for t in IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S TQ1_0 TQ2_0 NVFP4 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K IQ4_NL IQ4_XS MXFP4; do
	grep -qE "^ *[0-9]+: [^ ]+ +$t +\[" "$tmp/inspect" || miss="$miss $t"
done
[ -z "$miss" ] && ok "glmc inspect lists the 19 types" || bad "glmc inspect lists the 19 types" "missing:$miss"

# run NAME GGUF: compile and run the prompt on the CPU, logits into $tmp/NAME.f32, greedy ids into $tmp/NAME.ids.
run() {
	bin/glmc compile --weights "$2" -o "$tmp/$1.plan" 2>"$tmp/err" &&
		bin/glmrun "$tmp/$1.plan" --device cpu --tokens $TOKENS -n 6 --dump-logits "$tmp/$1.f32" >"$tmp/$1.ids" 2>>"$tmp/err"
}

if run q "$tmp/q.gguf" && run f "$tmp/f.gguf"; then
	# the logits carry signal (not all equal): their spread across the vocabulary is order 1
	spread=$(python3 -c "import numpy as n,sys; print(float(n.fromfile(sys.argv[1], n.float32).std()))" "$tmp/q.f32")
	if cmp -s "$tmp/q.f32" "$tmp/f.f32" && [ -s "$tmp/q.f32" ] && awk -v s="$spread" 'BEGIN { exit !(s > 0.1) }'; then
		ok "IQ/TQ/NVFP4 GGUF logits bit-identical to the F32 twin's (greedy $(cat "$tmp/q.ids"), logit std $spread)"
	else
		bad "IQ/TQ/NVFP4 GGUF logits bit-identical to the F32 twin's" "$(build/tools/cmplogits --pair "$tmp/q.f32" "$tmp/f.f32" 0), std $spread"
	fi
	# the plan keeps every quantized matrix in its blocks for the GPU: the GGUF's bytes, unpadded
	file=$(awk '$NF == "bytes" && $3 != "F32" { s += $(NF - 1) } END { print s + 0 }' "$tmp/inspect")
	bin/glmc stats "$tmp/q.plan" >"$tmp/stats" 2>&1
	kept=$(awk '/^gpu_block_weight_file_bytes:/ { print $2 }' "$tmp/stats")
	pad=$(awk '/^gpu_block_weight_pad_bytes:/ { print $2 }' "$tmp/stats")
	if [ "$file" -gt 0 ] && [ "$kept" = "$file" ] && [ "$pad" = 0 ]; then
		ok "glmc stats: every quantized matrix kept in its blocks on the GPU ($kept bytes, no padding)"
	else
		bad "glmc stats: every quantized matrix kept in its blocks on the GPU" "GGUF $file, kept ${kept:-?}, padding ${pad:-?}"
	fi
else
	bad "IQ/TQ/NVFP4 GGUF compiles and runs on the CPU" "$(tail -1 "$tmp/err")"
fi

# GLM-5 256 wide with random weights in the iq_dyn mix (routed experts IQ1_M/IQ2_XXS, the shared expert
# Q4_K, attention Q6_K/Q8_0): the experts stay in their blocks for the GPU (k_qmoe_up, k_qmoe_down_fused
# instantiated for those types and compiled by NVRTC), and the CPU runs the plan to finite logits.
if bin/glmc compile models/glm5.lua --config tests/data/glm5_q256.json --random-weights iq_dyn -o "$tmp/dyn.plan" 2>"$tmp/err" &&
	bin/glmrun "$tmp/dyn.plan" --device cpu --tokens 1,5,9,200 -n 3 --dump-logits "$tmp/dyn.f32" >"$tmp/dyn.ids" 2>>"$tmp/err"; then
	bin/glmc explain "$tmp/dyn.plan" >"$tmp/dyn.explain" 2>&1
	kept=$(grep -o '[0-9]* quantized weights kept as blocks' "$tmp/dyn.explain" | awk '{ print $1 }')
	finite=$(python3 -c "import numpy as n,sys; a=n.fromfile(sys.argv[1], n.float32); print(int(a.size > 0 and n.isfinite(a).all() and a.std() > 0))" "$tmp/dyn.f32")
	if [ "${kept:-0}" -ge 30 ] && [ "$finite" = 1 ] && ! grep -q 'converted: .*_exps' "$tmp/dyn.explain"; then
		ok "GLM-5 iq_dyn random plan: $kept weights in blocks (experts among them), CPU logits finite ($(cat "$tmp/dyn.ids"))"
	else
		bad "GLM-5 iq_dyn random plan" "kept ${kept:-?}, finite logits $finite, $(grep -c 'converted: .*_exps' "$tmp/dyn.explain") expert weights converted"
	fi
else
	bad "GLM-5 iq_dyn random plan compiles and runs on the CPU" "$(tail -1 "$tmp/err")"
fi
