#!/usr/bin/env bash
# tests/bf16_cpu.sh — glmrun --round-bf16 (runtime/exec/exec.c exec_round_bf16): the CPU reference rounds the
# weights and every float activation as a bf16 plan stores them on the GPU, so the GPU's bf16 error on
# the fixtures is predicted, and held, without a GPU (the GPU round compares the two: tests/gpu/run.sh).
# Per fixture: a --dtype bf16 plan run teacher-forced (the prompt and the fixture's first 11 greedy tokens
# in one prefill: every row the fixture has, whatever a bf16 run would pick; as tests/gpu/run.sh does),
# with and without --round-bf16. Checked: no NaN; the flag changes the logits; the same tokens fed in
# 1-token decode steps (--force) give the prefill's logits unrounded and, rounded, move only the decode
# rows (their GEMVs read the norm unrounded, as the GPU's one-token launches do); the rel-L2 against the
# fixture (cmplogits: prefill rows / teacher-forced decode rows) within 2e-2 where the contract holds,
# else within a bound just above today's figure (a known issue-5 excess: bf16 activation noise and MoE
# routing flips; printed as such, not as a pass of the contract); tp 2 on CPU ranks; refusals.
# Prints "ok - NAME" / "FAIL - NAME: why" lines for tests/run.sh to count.
set -u
cd "$(dirname "$0")/.."
FIX=../shared/fixtures/hf
CMP=build/tools/cmplogits
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1: $2"; }
# le X B: X is a finite number (cmplogits prints inf for NaN) no larger than B.
le() { [[ $1 =~ ^[0-9.]+(e[-+]?[0-9]+)?$ ]] && awk -v x="$1" -v b="$2" 'BEGIN { exit !(x <= b) }'; }
# forced M: the fixture's prompt and its first 11 greedy tokens, comma-separated.
forced() { echo "$($CMP --prompt $FIX/$1),$($CMP --greedy $FIX/$1 | tr ' ' ',' | cut -d, -f1-11)"; }

# Issue-5 bounds (prefill, decode): the --round-bf16 figures measured when this test was written
# (glm4_moe 0.0198/0.0216, deepseek_v3 0.0173/0.0234, glm4_moe_lite 0.0175/0.0218, glm_moe_dsa
# 0.151/0.347, equal or near the GPU's own bf16 figures) plus 10%. Lower them as issue 5 is worked on.
declare -A bound=([glm4_moe]="0.0218 0.0239" [deepseek_v3]="0.019 0.0258" [glm4_moe_lite]="0.0193 0.024"
	[glm_moe_dsa]="0.167 0.382")

# The plans first, two compiles at a time: NVRTC is most of this test's time, and CI has two cores.
# tp2 and f32 are llama's, for the tp 2 and refusal checks at the end.
fixtures="llama qwen3 qwen3_moe glm4_moe deepseek_v3 glm4_moe_lite glm_moe_dsa"
k=0
for m in $fixtures tp2 f32; do
	case $m in
	glm_moe_dsa) args="models/glm5.lua --weights $FIX/$m --dtype bf16" ;;
	tp2) args="models/llama.lua --weights $FIX/llama --dtype bf16 --tp 2" ;;
	f32) args="models/llama.lua --weights $FIX/llama" ;;
	*) args="models/$m.lua --weights $FIX/$m --dtype bf16" ;;
	esac
	(bin/glmc compile $args -o $tmp/$m.plan 2>$tmp/$m.err; echo $? >$tmp/$m.rc) &
	[ $((++k % 2)) = 0 ] && wait
done
wait

for m in $fixtures; do
	if [ "$(cat $tmp/$m.rc)" != 0 ]; then
		bad "$m bf16 plan" "$(head -c 300 $tmp/$m.err)"
		continue
	fi
	toks=$(forced $m)
	bin/glmrun $tmp/$m.plan --device cpu --tokens "$toks" -n 1 --dump-logits $tmp/$m-f32.f32 >/dev/null 2>$tmp/err &&
		bin/glmrun $tmp/$m.plan --device cpu --round-bf16 --tokens "$toks" -n 1 --dump-logits $tmp/$m.f32 >/dev/null \
			2>>$tmp/err || { bad "$m --round-bf16 runs" "$(head -c 300 $tmp/err)"; continue; }
	# A dump against itself is 0 unless some value is NaN or infinite (cmplogits reports inf then).
	r=$($CMP --pair $tmp/$m.f32 $tmp/$m.f32 0)
	[ $? = 0 ] && ok "$m --round-bf16: no NaN" || bad "$m --round-bf16: no NaN" "$r"
	d=$($CMP --pair $tmp/$m.f32 $tmp/$m-f32.f32 1 | sed -n 's/^rel-L2 \([^ ]*\) .*/\1/p')
	le 1e-3 "$d" && le "$d" 1 && ok "$m --round-bf16 changes the logits (rel-L2 $d against the unrounded run)" ||
		bad "$m --round-bf16 changes the logits" "rel-L2 '$d' against the unrounded run"
	# The decode's own step split (--force: the same tokens fed one 1-token step each): those steps' norm
	# GEMVs read their norm unrounded (LAUNCH_NORM_LATE, as the GPU's one-token launches do since d5c5a00;
	# exec_round_bf16), the prefill's GEMVs a rounded one. Unrounded, the split changes nothing; rounded,
	# the prompt rows stay bit for bit and the decode rows move. Not DSA: its indexer's choice depends on
	# the step's tokens even unrounded (tests/gpu/run.sh says the same).
	if [ $m != glm_moe_dsa ]; then
		p=$($CMP --prompt $FIX/$m)
		np=$(echo "$p" | tr ',' ' ' | wc -w)
		g12=$($CMP --greedy $FIX/$m | tr ' ' ',' | cut -d, -f1-12)
		if bin/glmrun $tmp/$m.plan --device cpu --tokens "$p" --force "$g12" --dump-logits $tmp/$m-dec-f32.f32 \
			>/dev/null 2>$tmp/err && bin/glmrun $tmp/$m.plan --device cpu --round-bf16 --tokens "$p" --force "$g12" \
			--dump-logits $tmp/$m-dec.f32 >/dev/null 2>>$tmp/err; then
			cmp -s $tmp/$m-dec-f32.f32 $tmp/$m-f32.f32 &&
				ok "$m bf16 plan unrounded: 1-token decode steps (--force) give the one prefill's logits bit for bit" ||
				bad "$m bf16 plan unrounded: 1-token decode steps (--force) give the one prefill's logits" "they differ"
			pb=$(($(stat -c %s $tmp/$m.f32) / (np + 11) * np))
			d=$($CMP --pair $tmp/$m-dec.f32 $tmp/$m.f32 1 | sed -n 's/^rel-L2 \([^ ]*\) .*/\1/p')
			cmp -s -n $pb $tmp/$m-dec.f32 $tmp/$m.f32 && ! cmp -s $tmp/$m-dec.f32 $tmp/$m.f32 && le 1e-4 "$d" && le "$d" 1 &&
				ok "$m --round-bf16: 1-token decode steps read their norms unrounded (prompt rows equal the prefill's, decode rows rel-L2 $d)" ||
				bad "$m --round-bf16: 1-token decode steps read their norms unrounded" "prompt rows equal: $(cmp -s -n $pb \
					$tmp/$m-dec.f32 $tmp/$m.f32 && echo yes || echo no); rel-L2 '$d' over all rows (0 or NaN: not modelled)"
		else
			bad "$m --force runs" "$(head -c 300 $tmp/err)"
		fi
	fi
	r=$($CMP $tmp/$m.f32 $FIX/$m 1)
	pre=$(echo "$r" | sed -n 's/^prefill rel-L2 \([^,]*\), .*/\1/p')
	dec=$(echo "$r" | sed -n 's/.* decode rel-L2 \([^ ]*\) .*/\1/p')
	name="$m bf16 on the CPU (--round-bf16), teacher-forced, vs fixture: prefill $pre, decode $dec"
	if [ -z "${bound[$m]:-}" ]; then
		le "$pre" 2e-2 && le "$dec" 2e-2 && ok "$name <= 2e-2" || bad "$name" "above the 2e-2 contract"
	else
		read -r bp bd <<<"${bound[$m]}"
		le "$pre" $bp && le "$dec" $bd && ok "$name <= $bp, $bd: known issue-5 excess over 2e-2, not a pass of it" ||
			bad "$name" "above its issue-5 bounds $bp, $bd (a new error, or a cure: then lower the bounds)"
	fi
done

# tp 2 on CPU ranks: row-parallel partial sums are rounded before the allreduce, as on two GPUs.
m=llama
cp $tmp/tp2.err $tmp/err
if [ "$(cat $tmp/tp2.rc)" = 0 ] &&
	bin/glmrun $tmp/tp2.plan --device cpu --round-bf16 --tokens "$(forced $m)" -n 1 --dump-logits $tmp/tp2.f32 \
		>/dev/null 2>$tmp/err; then
	r=$($CMP $tmp/tp2.f32 $FIX/$m 2e-2)
	[ $? = 0 ] && ok "$m tp 2 bf16 on CPU ranks (--round-bf16): $r" || bad "$m tp 2 bf16 on CPU ranks (--round-bf16)" "$r"
	# Every rank's 1-token GEMVs read their norm unrounded too: decode rows move, prompt rows stay.
	p=$($CMP --prompt $FIX/$m)
	np=$(echo "$p" | tr ',' ' ' | wc -w)
	pb=$(($(stat -c %s $tmp/tp2.f32) / (np + 11) * np))
	bin/glmrun $tmp/tp2.plan --device cpu --round-bf16 --tokens "$p" --force "$($CMP --greedy $FIX/$m | tr ' ' ',' |
		cut -d, -f1-12)" --dump-logits $tmp/tp2-dec.f32 >/dev/null 2>$tmp/err &&
		cmp -s -n $pb $tmp/tp2-dec.f32 $tmp/tp2.f32 && ! cmp -s $tmp/tp2-dec.f32 $tmp/tp2.f32 &&
		ok "$m tp 2 --round-bf16 on CPU ranks: 1-token decode steps read their norms unrounded" ||
		bad "$m tp 2 --round-bf16 on CPU ranks: 1-token decode steps read their norms unrounded" \
			"$(head -c 300 $tmp/err) (decode rows equal to the prefill's, or prompt rows not)"
else
	bad "$m tp 2 bf16 on CPU ranks (--round-bf16)" "$(head -c 300 $tmp/err)"
fi

# Refusals, one line each: an f32 plan (nothing to mirror) and the GPU (it rounds by itself).
p=$($CMP --prompt $FIX/llama)
bin/glmrun $tmp/f32.plan --device cpu --round-bf16 --tokens "$p" -n 1 >/dev/null 2>$tmp/err
rc=$?
[ "$(cat $tmp/f32.rc)" = 0 ] && [ $rc != 0 ] && [ "$(wc -l <$tmp/err)" = 1 ] && grep -q "activations are f32" $tmp/err &&
	ok "--round-bf16 on an f32 plan: refused in one line" ||
	bad "--round-bf16 on an f32 plan" "status $rc: $(cat $tmp/f32.err $tmp/err | head -c 300)"
bin/glmrun $tmp/llama.plan --device cuda --round-bf16 --tokens "$p" -n 1 >/dev/null 2>$tmp/err
rc=$?
[ $rc != 0 ] && [ "$(wc -l <$tmp/err)" = 1 ] && grep -q "device cpu" $tmp/err &&
	ok "--round-bf16 with --device cuda: refused in one line" || bad "--round-bf16 with --device cuda" "status $rc: $(head -c 300 $tmp/err)"
