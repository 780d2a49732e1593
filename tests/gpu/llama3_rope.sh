#!/usr/bin/env bash
# tests/gpu/llama3_rope.sh — the Llama 3.1+ rotary scaling on the GPU: tests/data/llama3_rope (a tiny
# random Llama with rope_type llama3, tests/tools/mk_llama3_rope.py) from its HF checkpoint and from its
# GGUF conversion (tests/tools/mkgguf: the scaling as rope_freqs.weight, which glmrun folds into the
# rope tables of every kernel), and linear/ (the same weights, linear scaling), through --device cuda
# f32: greedy tokens identical, logits within 1e-4 of transformers'; --verify against the CPU; bf16
# within 2e-2 (where its tokens part from the fixture's, teacher-forced). tests/llama3_rope.sh holds the
# CPU side on CI.
# Prints "ok - NAME" / "FAIL - NAME: why" lines (tests/gpu/run.sh records them). OUT: scratch folder.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/glm-gpu}/llama3_rope
mkdir -p "$OUT/linear"
FIX=tests/data/llama3_rope CMP=build/tools/cmplogits

ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1: $2"; }

# one NAME WEIGHTS FIXTURE DTYPE TOL
one() {
	local name=$1 w=$2 fix=$3 dt=$4 tol=$5 plan=$OUT/$1-$4.plan got want r n
	if ! bin/glmc compile models/llama.lua --weights "$w" --dtype "$dt" -o "$plan" 2>"$OUT/err" ||
		grep -q "CPU only" "$OUT/err"; then
		bad "$name $dt compile" "$(head -c 300 "$OUT/err")"
		return
	fi
	want=$($CMP --greedy "$fix")
	n=$(echo "$want" | wc -w)
	got=$(bin/glmrun "$plan" --device cuda --tokens "$($CMP --prompt "$fix")" -n "$n" \
		--dump-logits "$OUT/$name-$dt.f32" 2>"$OUT/err")
	if [ "$got" = "$want" ]; then
		ok "$name $dt greedy tokens"
		r=$($CMP "$OUT/$name-$dt.f32" "$fix" "$tol") && ok "$name $dt logits ($r)" || bad "$name $dt logits" "$r"
	elif [ "$dt" = bf16 ] && [ -n "$got" ]; then
		# bf16 may flip a near-tie of this tiny random model (on the CPU, --round-bf16 parts at token 9):
		# teacher-forced instead, the prompt and the fixture's tokens in one prefill (0.0155 / 0.0149 there)
		echo "# $name bf16 greedy tokens differ (informational): got '$got'"
		bin/glmrun "$plan" --device cuda --tokens "$($CMP --prompt "$fix"),$(echo $want | tr ' ' ',' | cut -d, -f1-$((n - 1)))" \
			-n 1 --dump-logits "$OUT/$name-$dt-forced.f32" >/dev/null 2>"$OUT/err"
		r=$($CMP "$OUT/$name-$dt-forced.f32" "$fix" "$tol") && ok "$name $dt teacher-forced logits ($r)" ||
			bad "$name $dt teacher-forced logits" "$r $(head -c 200 "$OUT/err")"
	else
		bad "$name $dt greedy tokens" "got '$got', want '$want' $(head -c 200 "$OUT/err")"
	fi
	bin/glmrun "$plan" --device cuda --tokens "$($CMP --prompt "$fix")" --verify >"$OUT/$name-$dt.verify" 2>&1 &&
		ok "$name $dt --verify against the CPU" || bad "$name $dt --verify against the CPU" "$(tail -1 "$OUT/$name-$dt.verify")"
}

build/tools/mkgguf $FIX "$OUT/l3.gguf" >/dev/null || bad "mkgguf llama3" "failed"
cp $FIX/linear/config.json $FIX/model.safetensors "$OUT/linear/"
build/tools/mkgguf "$OUT/linear" "$OUT/linear.gguf" >/dev/null || bad "mkgguf linear" "failed"
for dt in f32 bf16; do
	tol=1e-4
	[ $dt = bf16 ] && tol=2e-2
	one llama3-hf $FIX $FIX $dt $tol
	one llama3-gguf "$OUT/l3.gguf" $FIX $dt $tol
	one linear-hf "$OUT/linear" $FIX/linear $dt $tol
	one linear-gguf "$OUT/linear.gguf" $FIX/linear $dt $tol
done
