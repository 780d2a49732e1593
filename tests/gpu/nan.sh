#!/usr/bin/env bash
# tests/gpu/nan.sh — non-finite logits on the GPU (issue 44): a llama whose last hidden state is scaled by
# 0/0 (tests/models/nan_logits.lua) must fail, not answer token 0: greedy (the split argmax counts NaN/Inf
# per block), sampled (one block), batched, f32 and bf16; --verify names the first node where the NaN
# appears (the scale). The finite llama still runs (the verdict stays 0). Prints "ok - " / "FAIL - ".
set -u
cd "$(dirname "$0")/../.."
FIX=${FIX:-build/fixtures}
OUT=${OUT:-/tmp/glm-gpu}
mkdir -p "$OUT"
ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1: $2"; }
# refused NAME CMD...: non-zero, one stderr line naming the non-finite logits
refused() {
	local name=$1
	shift
	timeout 120 "$@" >"$OUT/nan.out" 2>"$OUT/nan.err"
	local rc=$?
	[ $rc = 1 ] && [ "$(wc -l <"$OUT/nan.err")" = 1 ] && grep -q "the logits hold NaN" "$OUT/nan.err" &&
		ok "$name" || bad "$name" "rc $rc: $(head -c 300 "$OUT/nan.err")"
}
for dt in f32 bf16; do
	p=$OUT/nan-$dt.plan
	if ! bin/glmc compile tests/models/nan_logits.lua --lib models/lib --weights $FIX/llama --dtype $dt -o $p 2>"$OUT/nan.err"; then
		bad "nan $dt compile" "$(head -c 300 "$OUT/nan.err")"
		continue
	fi
	refused "NaN logits on the GPU ($dt, greedy) refused" bin/glmrun $p --device cuda --tokens 1,2,3 -n 4
	refused "NaN logits on the GPU ($dt, sampled) refused" bin/glmrun $p --device cuda --tokens 1,2,3 -n 4 --temp 1 --seed 3
	refused "NaN logits on the GPU ($dt, top-k 5) refused" bin/glmrun $p --device cuda --tokens 1,2,3 -n 4 --temp 1 --top-k 5
	refused "NaN logits on the GPU ($dt, batch of 2) refused" bin/glmrun $p --device cuda --tokens 1,2 --tokens 3 -n 3
	timeout 120 bin/glmrun $p --device cuda --tokens 1,2,3 --verify >"$OUT/nan.out" 2>&1
	grep -q "first NaN/Inf on the GPU: scale" "$OUT/nan.out" && grep -q "first NaN/Inf on the CPU: scale" "$OUT/nan.out" &&
		ok "--verify names the scale where the NaN appears ($dt)" || bad "--verify names the first NaN ($dt)" "$(grep -m2 NaN "$OUT/nan.out")"
	q=$OUT/fin-$dt.plan
	bin/glmc compile models/llama.lua --weights $FIX/llama --dtype $dt -o $q 2>/dev/null &&
		out=$(timeout 120 bin/glmrun $q --device cuda --tokens 1,2,3 -n 8 --temp 1 --seed 2 2>"$OUT/nan.err") &&
		[ "$(echo $out | wc -w)" = 8 ] && ok "finite logits still run ($dt, sampled)" || bad "finite logits run ($dt)" "$(head -c 300 "$OUT/nan.err")"
done
