#!/usr/bin/env bash
# bench/qtc_round.sh — one device call for k_qgemv_tc (Q4_K/Q6_K decode GEMVs of 2..16 tokens on the
# tensor cores): the GPU against the CPU reference on Q4_K_M plans at those step sizes, then old against new
# plans at every batch size (bench/batch_round.sh ROUND=bench). Plans are compiled on the development
# machine and carried in PLANS: g5small.plan (models/glm5.lua, tests/data/glm5_q256.json, --random-weights
# q4_k_m --dtype bf16), llamaq2.plan (Llama-3-8B Q4_K_M, 2 layers), and <shape>-old/new.plan for the bench.
#   PLANS (build/probe)  CPLANS (the checked plans: "g5small llamaq2")  PROMPTS ("2 5 8 12")  CBATCHES ("4 12")  SHAPES ("glm5 llamaq")  BATCHES ("1 2 4 8 16")  ROUNDS (2)  ROUND (all|check|bench)
set -u
cd "$(dirname "$0")/.."
PLANS=${PLANS:-build/probe} CPLANS=${CPLANS:-g5small llamaq2} PROMPTS=${PROMPTS:-2 5 8 12} CBATCHES=${CBATCHES:-4 12} SHAPES=${SHAPES:-glm5 llamaq} BATCHES=${BATCHES:-1 2 4 8 16} ROUNDS=${ROUNDS:-2} ROUND=${ROUND:-all}
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader || { echo "qtc_round: no GPU"; exit 1; }
if [ "$ROUND" != bench ]; then
	# per-layer GPU against the CPU rounded as bf16 (--round-bf16), prompts of 2, 5, 8 (the fused groups'
	# launches) and 12 tokens (the linears' own 9..16-token launches)
	for p in $CPLANS; do
		for n in $PROMPTS; do
			toks=$(seq -s, 1 $n | sed 's/,$//')
			timeout 300 bin/glmrun $PLANS/$p.plan --device cuda --verify --round-bf16 --tokens $toks -n 2 >/tmp/qv.txt 2>&1
			echo "verify $p prompt $n: $(tail -1 /tmp/qv.txt)"
			grep -iE "above" /tmp/qv.txt | grep -v '^verify: FAILED' | head -3
		done
	done
	# batches on the GPU against the same batch on the CPU, sequence by sequence
	for p in $CPLANS; do
		for B in $CBATCHES; do
			args=
			for i in $(seq $B); do args="$args --tokens $((i + 3)),$((2 * i + 5)),$((i * i % 50 + 1))"; done
			# shellcheck disable=SC2086
			timeout 300 bin/glmrun $PLANS/$p.plan --device cuda $args -n 2 --dump-logits /tmp/qg >/tmp/qg.ids 2>/tmp/qg.err &&
				timeout 300 bin/glmrun $PLANS/$p.plan --device cpu $args -n 2 --dump-logits /tmp/qc >/tmp/qc.ids 2>/tmp/qc.err ||
				{ echo "FAIL - batch $B $p: $(head -c 300 /tmp/qg.err /tmp/qc.err)"; continue; }
			bad=0 worst=
			for i in $(seq 0 $((B - 1))); do
				r=$(build/tools/cmplogits --pair /tmp/qg.$i /tmp/qc.$i 2e-2 2>&1) || bad=$((bad + 1))
				worst="$worst $(echo "$r" | sed -n 's/.*rel-L2 \([0-9.e+-]*\).*/\1/p')"
			done
			same=$(cmp -s /tmp/qg.ids /tmp/qc.ids && echo "ids identical" || echo "ids differ")
			echo "$([ $bad = 0 ] && echo ok || echo FAIL) - batch of $B, $p, GPU against CPU: $same, $bad of $B over 2e-2 (rel-L2:$worst)"
		done
	done
fi
[ "$ROUND" = check ] && exit 0
ROUND=bench PLANS=$PLANS SHAPES="$SHAPES" BATCHES="$BATCHES" ROUNDS=$ROUNDS STEPS=${STEPS:-32} bench/batch_round.sh
