#!/usr/bin/env bash
# tests/llama3_rope.sh — the rotary scalings of Llama 3.1+ ("llama3") and linear, against transformers'
# own logits for tests/data/llama3_rope (tests/tools/mk_llama3_rope.py: a tiny random Llama whose llama3
# scaling changes 7 of its 8 frequencies; a 48-token prompt and 24 generated tokens reach position 71).
#   HF:   config.json's rope_parameters {rope_type: llama3, ...} on the CPU: greedy tokens identical,
#         logits within 1e-5; the same checkpoint with plain rotary misses them by far.
#   GGUF: the fixture converted as llama.cpp converts it (tests/tools/mkgguf: no scaling key, the
#         scaling as rope_freqs.weight, bit for bit what llama.cpp's converter formula gives, stored by
#         the generator as rope_freqs.f32): bound without an "unused tensor" warning, read by every
#         rope, the same checks (the file has no scaling key, so the tensor is what moves the logits off
#         plain rotary's).
#   linear: the same weights with rope_type linear (factor 4), from HF and from a GGUF with
#         rope.scaling.type linear, against transformers' logits for that config (linear/).
#   Unknown scaling types are refused in one line naming the type and the file.
# Prints "ok - NAME" / "FAIL - NAME: why" lines for tests/run.sh to count.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
FIX=tests/data/llama3_rope CMP=build/tools/cmplogits MKGGUF=build/tools/mkgguf

ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1: $2"; }

# run NAME WEIGHTS FIXTURE: compile and run the fixture's prompt for as many tokens as it generated;
# leaves the logits in $tmp/NAME.f32, the greedy ids in $tmp/NAME.out and glmc's stderr in $tmp/NAME.err.
run() {
	local n
	n=$($CMP --greedy "$3" | wc -w)
	bin/glmc compile models/llama.lua --weights "$2" -o "$tmp/$1.plan" 2>"$tmp/$1.err" &&
		bin/glmrun "$tmp/$1.plan" --device cpu --tokens "$($CMP --prompt "$3")" -n "$n" \
			--dump-logits "$tmp/$1.f32" >"$tmp/$1.out" 2>>"$tmp/$1.err"
}

# check NAME WEIGHTS FIXTURE: greedy tokens identical and logits within 1e-5 of the fixture's.
check() {
	if ! run "$1" "$2" "$3"; then
		bad "$1 compile and run" "$(tail -1 "$tmp/$1.err")"
		return
	fi
	local want r
	want=$($CMP --greedy "$3")
	[ "$(cat "$tmp/$1.out")" = "$want" ] && ok "$1 greedy tokens" || bad "$1 greedy tokens" "got '$(cat "$tmp/$1.out")', want '$want'"
	r=$($CMP "$tmp/$1.f32" "$3" 1e-5) && ok "$1 logits ($r)" || bad "$1 logits" "$r"
}

# far NAME WEIGHTS: the run's prefill logits are more than 10% (relative L2) off the llama3 fixture's.
far() {
	if ! run "$1" "$2" $FIX; then
		bad "$1 compile and run" "$(tail -1 "$tmp/$1.err")"
		return
	fi
	local r
	r=$($CMP "$tmp/$1.f32" $FIX 1e-5)
	echo "$r" | awk '{ exit !($3 + 0 > 0.1) }' && ok "$1 misses the llama3 logits ($r)" || bad "$1 misses the llama3 logits" "$r"
}

check llama3-hf $FIX $FIX
# Plain rotary on the same checkpoint (what glmc computed before it knew llama3).
mkdir -p "$tmp/plain"
cp $FIX/*.json $FIX/model.safetensors "$tmp/plain/"
sed -i 's/"rope_type": "llama3"/"rope_type": "default"/' "$tmp/plain/config.json"
far plain-hf "$tmp/plain"

$MKGGUF $FIX "$tmp/l3.gguf" >/dev/null
bin/glmc inspect "$tmp/l3.gguf" --tensor rope_freqs.weight --dump "$tmp/rf.f32" >/dev/null &&
	cmp -s "$tmp/rf.f32" $FIX/rope_freqs.f32 && ok "mkgguf writes llama.cpp's rope_freqs.weight bit for bit" ||
	bad "mkgguf writes llama.cpp's rope_freqs.weight bit for bit" "differs or missing"
! bin/glmc inspect "$tmp/l3.gguf" | grep -q "rope.scaling" && ok "the llama3 GGUF has no rope.scaling keys" ||
	bad "the llama3 GGUF has no rope.scaling keys" "$(bin/glmc inspect "$tmp/l3.gguf" | grep rope.scaling)"
check llama3-gguf "$tmp/l3.gguf" $FIX
grep -q "rope_freqs" "$tmp/llama3-gguf.err" && bad "rope_freqs.weight is bound" "$(grep rope_freqs "$tmp/llama3-gguf.err")" ||
	ok "rope_freqs.weight is bound (no unused-tensor warning)"
bin/glmc dump models/llama.lua --weights "$tmp/l3.gguf" --after front >"$tmp/front.txt" 2>/dev/null
all=$(grep -c '^%[0-9]* = rope ' "$tmp/front.txt") three=$(grep -c '^%[0-9]* = rope %[0-9]*, %[0-9]*, %0 ' "$tmp/front.txt")
grep -q '^%0 = param "rope_freqs.weight"' "$tmp/front.txt" && [ "$all" = 4 ] && [ "$three" = 4 ] &&
	ok "all 4 ropes read rope_freqs.weight (%0)" || bad "all 4 ropes read rope_freqs.weight (%0)" "$three of $all"
c=$(build/tools/checkplan "$tmp/llama3-gguf.plan" 2>&1) && ok "llama3 GGUF kernels compiled for sm_90 and launch limits checked" ||
	bad "llama3 GGUF kernels compiled for sm_90 and launch limits checked" "$c"
# Tensor parallel: the divisors stay whole on each rank (two CPU ranks).
bin/glmc compile models/llama.lua --weights "$tmp/l3.gguf" --tp 2 -o "$tmp/tp2.plan" 2>/dev/null &&
	bin/glmrun "$tmp/tp2.plan" --device cpu --tokens "$($CMP --prompt $FIX)" -n 24 --dump-logits "$tmp/tp2.f32" >/dev/null &&
	r=$($CMP "$tmp/tp2.f32" $FIX 1e-5) && ok "llama3 GGUF at tp 2 ($r)" || bad "llama3 GGUF at tp 2" "${r:-failed}"

mkdir -p "$tmp/linear"
cp $FIX/linear/config.json $FIX/model.safetensors "$tmp/linear/"
check linear-hf "$tmp/linear" $FIX/linear
$MKGGUF "$tmp/linear" "$tmp/linear.gguf" >/dev/null
bin/glmc inspect "$tmp/linear.gguf" | grep -q "rope.scaling.type .*'linear'" && ok "linear GGUF has rope.scaling.type linear" ||
	bad "linear GGUF has rope.scaling.type linear" "key missing"
check linear-gguf "$tmp/linear.gguf" $FIX/linear

# expect_fail NAME SUBSTRING CMD...: CMD fails with one line on stderr containing SUBSTRING.
expect_fail() {
	local name=$1 want=$2
	shift 2
	if "$@" >/dev/null 2>"$tmp/err"; then
		bad "$name" "succeeded"
	elif [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -qF -- "$want" "$tmp/err"; then
		bad "$name" "error '$(head -c 300 "$tmp/err")' is not one line containing '$want'"
	else
		ok "$name"
	fi
}
sed -i 's/"rope_type": "default"/"rope_type": "dynamic"/' "$tmp/plain/config.json"
expect_fail "unknown HF rope_type refused" "$tmp/plain/config.json: rope_type 'dynamic' is not supported" \
	bin/glmc compile models/llama.lua --weights "$tmp/plain" -o "$tmp/x.plan"
sed -i 's/"low_freq_factor": 1.0,//' "$tmp/plain/config.json"
sed -i 's/"rope_type": "dynamic"/"rope_type": "llama3"/' "$tmp/plain/config.json"
expect_fail "llama3 without low_freq_factor refused" "$tmp/plain/config.json: rope_type 'llama3' needs 'low_freq_factor'" \
	bin/glmc compile models/llama.lua --weights "$tmp/plain" -o "$tmp/x.plan"
build/tools/ggufedit "$tmp/l3.gguf" "$tmp/lr.gguf" --str llama.rope.scaling.type=longrope
expect_fail "unknown GGUF rope scaling refused" "$tmp/lr.gguf: rope scaling 'longrope' is not supported" \
	bin/glmc compile models/llama.lua --weights "$tmp/lr.gguf" -o "$tmp/x.plan"
build/tools/ggufedit "$tmp/l3.gguf" "$tmp/ls.gguf" --shape rope_freqs.weight=4
expect_fail "rope_freqs.weight of the wrong length refused" "rope_freqs.weight" \
	bin/glmc compile models/llama.lua --weights "$tmp/ls.gguf" -o "$tmp/x.plan"
