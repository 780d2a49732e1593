#!/usr/bin/env bash
# bench/perf_round.sh — one device call for a kernel change (issue 8): the three kernel test binaries,
# the GEMV micro-benchmarks (bf16 shapes, Llama-3-8B's fused groups, GLM-5's groups over blocks), the
# MoE micro-benchmark (GLM-5's routed experts, build/bench/moe), then bench/decode.sh at batch 1 on
# three shapes (PDL=1: each also with --pdl) and Llama-3-8B at batch 4 with the transformers peer. Prints a
# short digest; the raw outputs stay in $OUT/r. Env: SHAPES, PEER_SHAPE (default llama3_8b:bf16; ""
# skips the peer), KERNELS (the test binaries to run; "" none).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/glm-perf}
mkdir -p "$OUT/r"
export NCCL_NVLS_ENABLE=0
KERNELS=${KERNELS-test_fused test_kernels test_qgemv}
if [ -n "$KERNELS" ]; then
	for t in $KERNELS; do
		s=$(date +%s)
		build/gpu/$t >"$OUT/$t.log" 2>&1
		echo "$t: status $? in $(($(date +%s) - s))s: $(tail -1 "$OUT/$t.log")"
		grep '^FAIL' "$OUT/$t.log" | head -5
	done
fi
build/bench/gemv --only bf16 2>&1 | tail -8
build/bench/gemv --llama 2>&1 | tail -5
build/bench/gemv --fused 2>&1 | tail -8
build/bench/moe 2>&1 | grep -v '^k_qmoe_down_fused, k [124],'
digest() { grep -E '^\[|^decode benchmark|^shape|^(llama3_8b|glm4_7_flash|glm5_slice) |^  [a-z_]+ +[0-9]+ +[0-9.]+ +[0-9.]+ ' "$1"; }
OUT=$OUT/r SHAPES=${SHAPES:-"llama3_8b:bf16 glm4_7_flash:bf16 glm5_slice:q4_k_m"} BATCHES=1 PEER=0 BUDGET=300 \
	bench/decode.sh >"$OUT/decode1.log" 2>&1
digest "$OUT/decode1.log" | grep -v "still running"
PS=${PEER_SHAPE-llama3_8b:bf16}
if [ -n "$PS" ]; then
	OUT=$OUT/r SHAPES="$PS" BATCHES="1 4" PEER=1 PROFILE=0 PDL=0 BUDGET=240 bench/decode.sh >"$OUT/decode2.log" 2>&1
	digest "$OUT/decode2.log" | grep -v "still running"
fi
