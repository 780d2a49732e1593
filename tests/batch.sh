#!/usr/bin/env bash
# tests/batch.sh — glmrun --batch on the CPU reference: every fixture model decodes three sequences of
# different prompt lengths together (one cache slot each; one of them clipped by --max-seq, so the batch
# shrinks mid-run), and each sequence must equal the same prompt run alone: ids identical, logits within
# 1e-6 (TOL). Also a tp 2 plan, a shared prompt with per-sequence seeds, and argument errors.
# DEVICE=cuda runs the same on the GPU (tests/gpu/run.sh does).
set -u
cd "$(dirname "$0")/.."
FIX=${FIX:-../shared/fixtures/hf}
CMP=build/tools/cmplogits
DEV=${DEVICE:-cpu}
TOL=${TOL:-1e-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1: $2"; }

P=(1,2,3 5,6,7,8,9,10,11 12)
MAXSEQ=12
# one_vs_batch NAME PLAN: each prompt alone (with -n clipped like the batch clips it) against the batch
one_vs_batch() {
	local name=$1 plan=$2 n=8
	if ! bin/glmrun "$plan" --device $DEV --tokens ${P[0]} --tokens ${P[1]} --tokens ${P[2]} -n $n --max-seq $MAXSEQ \
		--dump-logits "$tmp/b" >"$tmp/batch" 2>"$tmp/err"; then
		bad "$name: batch of 3" "$(head -c 300 "$tmp/err")"
		return
	fi
	local i=0 fails=0
	for p in "${P[@]}"; do
		local np lim
		np=$(echo "$p" | tr ',' '\n' | wc -l)
		lim=$((MAXSEQ - np + 1))
		[ $lim -gt $n ] && lim=$n
		bin/glmrun "$plan" --device $DEV --tokens "$p" -n $lim --max-seq $MAXSEQ --dump-logits "$tmp/s$i" >"$tmp/one" 2>"$tmp/err" ||
			{ bad "$name: sequence $i alone" "$(head -c 300 "$tmp/err")"; fails=1; }
		if [ "$(sed -n "$((i + 1))p" "$tmp/batch")" != "$(cat "$tmp/one")" ]; then
			bad "$name: sequence $i" "batch '$(sed -n "$((i + 1))p" "$tmp/batch")' vs alone '$(cat "$tmp/one")'"
			fails=1
		elif ! $CMP --pair "$tmp/b.$i" "$tmp/s$i" $TOL >"$tmp/cmp" 2>&1; then
			bad "$name: sequence $i logits" "$(cat "$tmp/cmp")"
			fails=1
		fi
		i=$((i + 1))
	done
	[ $fails = 0 ] && ok "$name: batch of 3 (lengths 3/7/1, one clipped by --max-seq) equals each sequence alone"
}

for m in llama qwen3 qwen3_moe glm4_moe deepseek_v3 glm4_moe_lite glm_moe_dsa; do
	model=models/$m.lua
	[ $m = glm_moe_dsa ] && model=models/glm5.lua
	if ! bin/glmc compile $model --weights $FIX/$m -o "$tmp/$m.plan" >/dev/null 2>"$tmp/err"; then
		bad "$m: compile" "$(head -c 300 "$tmp/err")"
		continue
	fi
	one_vs_batch "$DEV $m" "$tmp/$m.plan"
done

# tensor parallel ranks with batches (CPU only: tp > 1 runs there)
if [ $DEV = cpu ] && bin/glmc compile models/qwen3_moe.lua --weights $FIX/qwen3_moe --tp 2 -o "$tmp/tp2.plan" >/dev/null 2>&1; then
	one_vs_batch "cpu qwen3_moe tp 2" "$tmp/tp2.plan"
fi

# a shared prompt: sequence i samples with seed + i
plan=$tmp/llama.plan
bin/glmrun $plan --device $DEV --tokens 1,2,3 --batch 3 -n 6 --temp 0.8 --seed 4 >"$tmp/shared" 2>"$tmp/err"
bin/glmrun $plan --device $DEV --tokens 1,2,3 -n 6 --temp 0.8 --seed 6 >"$tmp/seed6" 2>>"$tmp/err"
if [ "$(wc -l <"$tmp/shared")" = 3 ] && [ "$(sed -n 3p "$tmp/shared")" = "$(cat "$tmp/seed6")" ] &&
	[ "$(sed -n 1p "$tmp/shared")" != "$(sed -n 2p "$tmp/shared")" ]; then
	ok "$DEV shared prompt: sequence i samples as seed + i alone"
else
	bad "$DEV shared prompt" "$(cat "$tmp/shared" "$tmp/seed6" "$tmp/err" | head -c 400)"
fi

# errors
expect_err() {
	local name=$1 want=$2
	shift 2
	if "$@" >/dev/null 2>"$tmp/err"; then
		bad "$name" "succeeded"
	elif [ "$(wc -l <"$tmp/err")" = 1 ] && grep -qF -- "$want" "$tmp/err"; then
		ok "$name"
	else
		bad "$name" "$(head -c 300 "$tmp/err")"
	fi
}
expect_err "--batch with a different number of prompts" "--batch 3 with 2 prompts" bin/glmrun $plan --device $DEV --tokens 1 --tokens 2 --batch 3
expect_err "--batch 0" "--batch must be an integer" bin/glmrun $plan --device $DEV --tokens 1 --batch 0
expect_err "--batch prompt that fills the context" "fills --max-seq" bin/glmrun $plan --device $DEV --tokens 1,2,3,4 --tokens 1 --max-seq 3
