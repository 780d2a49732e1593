#!/usr/bin/env bash
# tests/gpu/tp.sh — tensor parallelism on the GPUs of this machine (issues 7 and 10). Builds nothing:
# bin/, build/ (build/bench/allreduce, build/tools/cmplogits) and build/fixtures come from `make gpu-bundle`.
#
# 1. Every fixture model at tp 1 (through the worker/NCCL path) and at every tp in 2, 4, 8 that divides
#    its attention heads (and routed experts) and fits the visible GPUs, f32: greedy tokens equal tp 1's
#    and the fixture's, logits within rel-L2 1e-4 of tp 1's and of the fixture's, one graph launch per
#    step, --verify against the CPU ranks. tp > 1 runs twice: NCCL only (GLMRUN_P2P_MAX=0) and with the
#    one-shot P2P allreduce (the default). Sampling at tp > 1 (ranks must agree on every token).
# 2. The hang test: rank tp-1 stalled by the test hook (GLMRUN_TEST_STALL_RANK) must end glmrun with a
#    non-zero status and a watchdog message naming that rank within the timeout (5 s), at tp 1 and at
#    the largest tp.
# 3. The persistent decode kernel (--decode persistent) at tp 2 and the largest tp, with its collectives as P2P
#    tasks and through NCCL between segments: ids and logits equal to --decode kernels' bit for bit.
# 4. The allreduce micro-benchmark inside CUDA graphs, NCCL default and NCCL_PROTO=LL, with the P2P kernel.
# Prints a pass/fail table and "N passed, N failed"; exits non-zero on any failure.
#
# Usage: tests/gpu/tp.sh     all visible GPUs (NGPU=N: fewer), all fixtures (MODELS="llama qwen3": some)
# About 2 minutes on one GPU; with 4 or 8 GPUs each fixture runs at tp 1, 2 and 4 (the fixtures have 4
# heads), about 6 minutes in all (NCCL start-up dominates).
set -u
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 # NVLink multicast must never be used on these machines
FIX=${FIX:-build/fixtures}
W=${TPDIR:-/tmp/glm-tp}
mkdir -p "$W"
CMP=build/tools/cmplogits
rows=()
pass=0
fail=0
record() { # NAME STATUS DETAIL (also printed at once, so a run cut short by a time limit still shows it)
	rows+=("$(printf '%-52s %-5s %s' "$1" "$2" "$(echo "$3" | tr '\n' ' ' | head -c 400)")")
	echo "result: ${rows[${#rows[@]}-1]}"
	case "$2" in ok) pass=$((pass + 1)) ;; info) ;; *) fail=$((fail + 1)) ;; esac
}

ngpu=${NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader || true
nvidia-smi topo -m 2>/dev/null | head -12 || true
echo "# $ngpu GPU(s) in use"
if [ "$ngpu" -lt 1 ]; then
	echo "no GPU visible"
	exit 1
fi

# json_int FILE KEY: an integer value of config.json, or empty.
json_int() { sed -n "s/.*\"$2\": *\([0-9][0-9]*\).*/\1/p" "$1" | head -1; }

# The tps (besides 1) a fixture runs at: each of 2, 4, 8 within the GPUs that divides its heads and experts.
tps_for() {
	local cfg=$FIX/$1/config.json heads experts tp out=""
	heads=$(json_int "$cfg" num_attention_heads)
	experts=$(json_int "$cfg" n_routed_experts)
	[ -z "$experts" ] && experts=$(json_int "$cfg" num_experts)
	for tp in 2 4 8; do
		[ "$tp" -le "$ngpu" ] || continue
		[ -n "$heads" ] && [ $((heads % tp)) = 0 ] || continue
		[ -z "$experts" ] || [ $((experts % tp)) = 0 ] || continue
		out="$out $tp"
	done
	echo "$out"
}

for m in ${MODELS:-llama qwen3 qwen3_moe glm4_moe deepseek_v3 glm4_moe_lite glm_moe_dsa}; do
	[ -f "$FIX/$m/config.json" ] || { record "$m" FAIL "fixture missing in $FIX"; continue; }
	model=$m
	[ $m = glm_moe_dsa ] && model=glm5
	prompt=$($CMP --prompt $FIX/$m)
	want=$($CMP --greedy $FIX/$m)
	for tp in 1 $(tps_for $m); do
		plan=$W/$m-tp$tp.plan
		if ! bin/glmc compile models/$model.lua --weights $FIX/$m --tp $tp -o $plan 2>"$W/err" || grep -q "CPU only" "$W/err"; then
			record "$m tp $tp compile" FAIL "$(head -c 300 "$W/err")"
			continue
		fi
		for mode in nccl p2p; do
			[ $tp = 1 ] && [ $mode = p2p ] && continue
			p2pmax=0
			[ $mode = p2p ] && p2pmax=262144
			tag="$m tp $tp"
			[ $tp -gt 1 ] && tag="$tag $mode"
			f=$W/$m-tp$tp-$mode
			got=$(GLMRUN_P2P_MAX=$p2pmax timeout 300 bin/glmrun $plan --device cuda --tokens "$prompt" -n 12 \
				--dump-logits $f.f32 --stats --timeout 60 2>"$f.stats")
			rc=$?
			grep 'stats: \(ranks\|decode\)' "$f.stats" | sed "s/^/  [$tag] /"
			if [ $rc != 0 ]; then
				record "$tag run" FAIL "status $rc: $(grep -v stats: "$f.stats" | head -c 300)"
				continue
			fi
			if [ $tp = 1 ]; then
				grep -q "stats: ranks 1 (GPUs 0..0), NCCL" "$f.stats" && record "$tag through the NCCL worker path" ok "$(grep -o 'NCCL [0-9.]*' "$f.stats")" ||
					record "$tag through the NCCL worker path" FAIL "$(grep 'stats: ranks' "$f.stats")"
			fi
			[ "$got" = "$want" ] && record "$tag greedy tokens = fixture" ok "$got" ||
				record "$tag greedy tokens = fixture" FAIL "got '$got' want '$want'"
			r=$($CMP $f.f32 $FIX/$m 1e-4)
			record "$tag logits vs fixture" "$([ $? = 0 ] && echo ok || echo FAIL)" "$r"
			if [ $tp -gt 1 ]; then
				r=$($CMP --pair $f.f32 $W/$m-tp1-nccl.f32 1e-4)
				record "$tag logits vs tp 1" "$([ $? = 0 ] && echo ok || echo FAIL)" "$r"
				calls=$(sed -n 's/.*made \([0-9]*\) NCCL calls and \([0-9]*\) P2P.*/\1 nccl, \2 p2p/p' "$f.stats")
				p2pn=$(sed -n 's/.*and \([0-9]*\) P2P collectives.*/\1/p' "$f.stats")
				if [ $mode = p2p ]; then
					[ "${p2pn:-0}" -gt 0 ] && record "$tag allreduces went through the P2P kernel" ok "$calls" ||
						record "$tag allreduces went through the P2P kernel" FAIL "$calls $(grep 'stats: ranks' "$f.stats")"
				else
					[ "${p2pn:-1}" = 0 ] && record "$tag NCCL only" ok "$calls" || record "$tag NCCL only" FAIL "$calls"
				fi
			fi
			launches=$(sed -n 's/.*graph launches \([0-9]*\) (\([0-9.]*\) per step).*/\2/p' "$f.stats")
			record "$tag graph launches per step" "$([ "$launches" = 1.00 ] && echo ok || echo FAIL)" "$launches"
			if [ $tp -gt 1 ]; then
				GLMRUN_P2P_MAX=$p2pmax timeout 300 bin/glmrun $plan --device cuda --tokens "$prompt" --verify >"$f.verify" 2>&1
				record "$tag --verify (rank 0 vs CPU ranks)" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$f.verify")"
				s=$(GLMRUN_P2P_MAX=$p2pmax timeout 300 bin/glmrun $plan --device cuda --tokens "$prompt" -n 24 --temp 1.5 --seed 7 2>&1)
				[ $? = 0 ] && [ "$(echo "$s" | wc -w)" = 24 ] && record "$tag sampling: ranks agree on every token" ok "$s" ||
					record "$tag sampling: ranks agree on every token" FAIL "$s"
			fi
		done
	done
done

# The hang test: a stalled rank must be reported, by rank, within the watchdog's 5 s (plus start-up).
big=1
for tp in 2 4 8; do [ $tp -le "$ngpu" ] && [ -f $W/llama-tp$tp.plan ] && big=$tp; done
for tp in $(echo 1 $big | tr ' ' '\n' | sort -u); do
	plan=$W/llama-tp$tp.plan
	stall=$((tp - 1))
	start=$(date +%s)
	GLMRUN_TEST_STALL_RANK=$stall timeout 120 bin/glmrun $plan --device cuda --tokens "$($CMP --prompt $FIX/llama)" -n 4 \
		--timeout 5 >"$W/stall.out" 2>"$W/stall.err"
	rc=$?
	secs=$(($(date +%s) - start))
	msg=$(grep watchdog "$W/stall.err")
	if [ $rc != 0 ] && [ $rc != 124 ] && echo "$msg" | grep -q "decode step 1 did not finish within 5 s" &&
		echo "$msg" | grep -q "rank $stall (stalled on purpose"; then
		record "tp $tp: stalled rank $stall reported, exit $rc in ${secs}s" ok "$msg"
	else
		record "tp $tp: stalled rank $stall reported" FAIL "status $rc after ${secs}s: $(head -c 400 "$W/stall.err")"
	fi
done
if [ "$big" -gt 1 ]; then
	plan=$W/llama-tp$big.plan
	GLMRUN_TEST_STALL_RANK=0 GLMRUN_TEST_STALL_STEP=0 timeout 120 bin/glmrun $plan --device cuda \
		--tokens "$($CMP --prompt $FIX/llama)" -n 4 --timeout 5 >"$W/stall.out" 2>"$W/stall.err"
	rc=$?
	msg=$(grep watchdog "$W/stall.err")
	[ $rc != 0 ] && [ $rc != 124 ] && echo "$msg" | grep -q "prefill did not finish" && echo "$msg" | grep -q "rank 0 (stalled on purpose" &&
		record "tp $big: rank 0 stalled before the prefill reported" ok "$msg" ||
		record "tp $big: rank 0 stalled before the prefill reported" FAIL "status $rc: $(head -c 400 "$W/stall.err")"
fi

# The persistent decode kernel at tp 2 and the largest tp (issue 47): with the P2P exchange one launch a step,
# its collectives tasks inside it; with GLMRUN_P2P_MAX=0 one launch a segment, NCCL between. Either way the
# same ids as --decode kernels and the same logits bit for bit (the same kernels' code on the same blocks,
# the same exchanges), one graph launch a step.
for tp in $(echo 2 $big | tr ' ' '\n' | sort -u); do
	[ "$tp" -le "$ngpu" ] && [ "$tp" -gt 1 ] || continue
	plan=$W/llama-tp$tp-persist.plan prompt=$($CMP --prompt $FIX/llama)
	if ! bin/glmc compile models/llama.lua --weights $FIX/llama --tp $tp --decode persistent -o "$plan" >/dev/null 2>"$W/err"; then
		record "tp $tp --decode persistent compile" FAIL "$(head -c 300 "$W/err")"
		continue
	fi
	for mode in p2p nccl; do
		env $([ $mode = nccl ] && echo GLMRUN_P2P_MAX=0) timeout 120 bin/glmrun "$plan" --device cuda --tokens "$prompt" -n 12 \
			--decode persistent --stats --dump-logits "$W/pp.$mode" >"$W/pp.$mode.ids" 2>"$W/pp.$mode.err"
		rp=$?
		env $([ $mode = nccl ] && echo GLMRUN_P2P_MAX=0) timeout 120 bin/glmrun "$plan" --device cuda --tokens "$prompt" -n 12 \
			--decode kernels --dump-logits "$W/pk.$mode" >"$W/pk.$mode.ids" 2>"$W/pk.$mode.err"
		rk=$?
		want="collectives as P2P tasks inside it"
		[ $mode = nccl ] && want="launches a step around"
		[ $rp = 0 ] && [ $rk = 0 ] && cmp -s "$W/pp.$mode.ids" "$W/pk.$mode.ids" && cmp -s "$W/pp.$mode" "$W/pk.$mode" &&
			grep -q "decode_path: persistent (.*$want" "$W/pp.$mode.err" && grep -q "(1.00 per step)" "$W/pp.$mode.err" &&
			record "tp $tp --decode persistent ($mode): = kernels bit for bit" ok "$(grep -o '; [0-9]* [a-z ]*P2P tasks inside it\|; [0-9]* launches a step around [0-9]* collectives' "$W/pp.$mode.err")" ||
			record "tp $tp --decode persistent ($mode)" FAIL "status $rp/$rk $($CMP --pair "$W/pp.$mode" "$W/pk.$mode" 0 2>&1) $(grep -h 'decode_path\|error' "$W/pp.$mode.err" | head -c 300)"
	done
done

# The allreduce micro-benchmark (latency per call inside a CUDA graph; the slowest rank's).
if [ -x build/bench/allreduce ]; then
	for proto in default LL; do
		if [ $proto = LL ]; then
			NCCL_PROTO=LL build/bench/allreduce --ranks "$ngpu" >"$W/bench-$proto.txt" 2>&1
		else
			build/bench/allreduce --ranks "$ngpu" >"$W/bench-$proto.txt" 2>&1
		fi
		rc=$?
		cat "$W/bench-$proto.txt"
		record "allreduce benchmark (NCCL_PROTO=$proto) results right" "$([ $rc = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$W/bench-$proto.txt")"
	done
else
	record "allreduce benchmark" FAIL "build/bench/allreduce missing (make gpu-bundle)"
fi

echo
printf '%-52s %-5s %s\n' CHECK RESULT DETAIL
printf '%s\n' "${rows[@]}"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
