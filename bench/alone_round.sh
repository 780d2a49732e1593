#!/usr/bin/env bash
# bench/alone_round.sh — one device call: glmrun serve's --prefill-alone on against off (bench/NOTES.md 72)
# on GLM-4.7-Flash bf16, 8 clients with prompts of 2048-6144 tokens (closed loop, the same seeded
# requests both times), through bench/serve.sh without the peer; then, on an H200 and while time is left,
# issue 49's rows with the peer (SHAPES49, CLIENTS49). Carry bin (and nothing else: plans are compiled here).
#   BUDGET_ALONE (seconds for each mode, 150)  SHAPES49 (llama3_8b:bf16)  CLIENTS49 (1,8,32,64)  BUDGET49 (250)
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader) || { echo "alone_round: no GPU"; exit 1; }
echo "$gpu"
for mode in on off; do
	OUT=/tmp/alone-$mode WORK=/tmp/alone-work SHAPES=glm4_7_flash:bf16 CLIENTS=8 RPC=2 PROMPT_LEN=uniform:2048:6144 \
		OUTPUT_LEN=uniform:64:128 PEER=0 BUDGET=${BUDGET_ALONE:-150} SERVE_ARGS="--prefill-alone $mode" \
		bench/serve.sh >/tmp/alone-$mode.txt 2>&1
	echo "--prefill-alone $mode:"
	grep -E "^ +8 \||stopped after|failed|skipped" /tmp/alone-$mode.txt | head -8
	grep -h "^glmc_prefill_alone_steps_total\|^glmc_.*steps_total" /tmp/alone-$mode/*.metrics.txt | head -4
done
case "$gpu" in
*H200*)
	echo "[$(($(date +%s) - T0))s] issue 49's rows on the H200"
	SHAPES=${SHAPES49:-llama3_8b:bf16} CLIENTS=${CLIENTS49:-1,8,32,64} RPC=2 PEER=1 BUDGET=${BUDGET49:-250} \
		OUT=/tmp/s49 WORK=/tmp/s49-work bench/serve.sh 2>&1 | tail -25
	;;
esac
