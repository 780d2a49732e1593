#!/usr/bin/env bash
# bench/long.sh — issue 46's benchmark in one command, run on the device machine (one H100 or H200) from the
# repository root with bin/ and build/ carried (`make bench`). For each shape (random weights, plans
# compiled here by bin/glmc as bench/decode.sh compiles them) and each prompt length L:
#   1. glmrun PLAN --bench --bench-prompt L -c L+STEPS+8: the time to the first token (the prefill, sampling
#      included), prefill tokens/s, the model FLOPs of the prefill (2 x active parameters + attention, as
#      glmrun counts them) as TFLOP/s and as a share of the GPU's dense bf16 tensor peak (PEAK_TFLOPS), and
#      decode ms/step at that context with the bytes a step reads (weights + cache rows) as a share of the
#      read bandwidth measured in the same run (build/bench/bandwidth);
#   2. the peer, transformers (its default attention: sdpa, FlashAttention/cuDNN kernels) through
#      bench/peer_hf.py --prompt L on the same shape in bf16: its prompt-to-first-token time;
# then one table. A length that does not fit the GPU's memory says so (glmrun names what fits).
#
# Environment: OUT (default /tmp/glm-long), WORK (plans; /tmp/glm-long-work), SHAPES (default
# "llama3_1_8b:bf16 glm4_7_flash:bf16 glm5_slice:q4_k_m"; Llama-3.1-8B: the Llama-3-8B shape with its 128K window), LENGTHS (default "1024 8192 32768"), STEPS (decode
# steps timed, 16), PEAK_TFLOPS (989: H100/H200 SXM dense bf16 without sparsity), PEER (1/0), BUDGET
# (seconds for everything, default 540), GLMC_FLAGS (more glmc flags for every plan, e.g. "--fallback all"), DEVICE (cuda; cpu with the shape "tiny", the llama test fixture's
# config, checks this script without a GPU: tests/bench.sh does that).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/glm-long}
WORK=${WORK:-/tmp/glm-long-work}
SHAPES=${SHAPES:-"llama3_1_8b:bf16 glm4_7_flash:bf16 glm5_slice:q4_k_m"}
LENGTHS=${LENGTHS:-"1024 8192 32768"}
STEPS=${STEPS:-16}
PEAK=${PEAK_TFLOPS:-989}
PEER=${PEER:-1}
BUDGET=${BUDGET:-540}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT" "$WORK"
T0=$(date +%s)
say() { echo "[$(printf '%4d' $(($(date +%s) - T0)))s] $*"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }
value() { sed -n "s/^$1: \([^ ]*\).*/\1/p" "$2" 2>/dev/null | head -1; }
model_of() { case $1 in llama3_8b | llama3_1_8b | tiny) echo llama ;; glm4_7_flash) echo glm4_moe_lite ;; glm5_slice) echo glm5 ;; esac; }
config_of() {
	case $1 in
	llama3_8b | llama3_1_8b | glm4_7_flash) echo models/configs/$1.json ;;
	glm5_slice) echo models/configs/glm5.json ;;
	tiny) ls ../shared/fixtures/hf/llama/config.json build/fixtures/llama/config.json 2>/dev/null | head -1 ;;
	esac
}
layers_of() { case $1 in glm5_slice) echo "--layers 8" ;; *) echo "" ;; esac; }

say "bench/long.sh: OUT=$OUT SHAPES='$SHAPES' LENGTHS='$LENGTHS' PEAK_TFLOPS=$PEAK BUDGET=${BUDGET}s"
BW=""
if [ "$DEVICE" = cuda ]; then
	nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
	if [ -x build/bench/bandwidth ] && timeout 120 build/bench/bandwidth --gib 8 --iters 20 >"$OUT/bandwidth.txt" 2>&1; then
		BW=$(value read_gb_s "$OUT/bandwidth.txt")
		say "read bandwidth: $BW GB/s (build/bench/bandwidth)"
	else
		say "no bandwidth probe (build/bench/bandwidth): % of bandwidth left blank"
	fi
fi

rows=()
for sd in $SHAPES; do
	s=${sd%%:*} d=${sd##*:}
	tag=$s-$d plan=$WORK/$s-$d.plan
	if [ "$(left)" -lt 30 ]; then
		rows+=("$(printf '| %s | %s | skipped (time budget) |' "$tag" -)")
		continue
	fi
	# shellcheck disable=SC2086
	if ! bin/glmc compile models/$(model_of $s).lua --config "$(config_of $s)" --random-weights $d --dtype bf16 \
		$(layers_of $s) ${GLMC_FLAGS:-} -o "$plan" >"$OUT/$tag.compile.txt" 2>&1; then
		say "$tag: compile failed: $(tail -1 "$OUT/$tag.compile.txt")"
		rows+=("$(printf '| %s | %s | compile failed |' "$tag" -)")
		continue
	fi
	for L in $LENGTHS; do
		out=$OUT/$tag-$L.txt
		lim=$(left)
		if [ "$lim" -lt 20 ]; then
			rows+=("$(printf '| %s | %s | skipped (time budget) |' "$tag" "$L")")
			continue
		fi
		say "$tag L=$L: glmrun --bench"
		if ! timeout -k 5 "$lim" bin/glmrun "$plan" --device "$DEVICE" --bench -n "$STEPS" --bench-prompt "$L" \
			-c $((L + STEPS + 8)) >"$out" 2>&1; then
			why=$(grep -m1 -E "glmrun:|error" "$out" | cut -c1-150)
			say "$tag L=$L: failed: $why"
			rows+=("$(printf '| %s | %s | %s |' "$tag" "$L" "${why:-failed or timed out}")")
			continue
		fi
		pf=$(value prefill_ms "$out") tps=$(value prefill_tok_s "$out") tf=$(value prefill_tflop_s "$out")
		fpt=$(value prefill_flops_per_token "$out") ms=$(value ms_per_step_median "$out") by=$(value bytes_per_step "$out")
		cb=$(value bytes_per_step_cache "$out")
		share=$(awk -v t="$tf" -v p="$PEAK" 'BEGIN { printf "%.1f%%", 100 * t / p }')
		bwp=-
		[ -n "$BW" ] && bwp=$(awk -v b="$by" -v m="$ms" -v w="$BW" 'BEGIN { printf "%.1f%%", 100 * b / (m * 1e6) / w }')
		peer=-
		if [ "$PEER" = 1 ] && [ "$DEVICE" = cuda ] && [ "$d" = bf16 ] && [ "$(left)" -gt 40 ]; then
			say "$tag L=$L: the peer (transformers)"
			timeout -k 5 $(($(left) - 10)) python3 bench/peer_hf.py --config "$(config_of $s)" $(layers_of $s) \
				--prompt "$L" --new 4 --runs 1 >"$OUT/$tag-$L.peer.txt" 2>&1
			peer=$(value peer_prefill_ms "$OUT/$tag-$L.peer.txt")
			[ -n "$peer" ] || peer="failed: $(grep -m1 peer_error "$OUT/$tag-$L.peer.txt" | cut -c1-80)"
		fi
		rows+=("$(printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |' "$tag" "$L" "$pf" "$tps" "$fpt" "$tf" \
			"$share" "$ms" "$(awk -v c="$cb" -v b="$by" 'BEGIN { printf "%.2f / %.2f", c / 1e9, b / 1e9 }')" "$bwp" "$peer")")
	done
done
echo
echo "prefill and decode at long contexts ($(date -u +%F), peak $PEAK TFLOP/s dense bf16, bandwidth ${BW:-?} GB/s)"
echo "| shape | L | TTFT ms | prefill tok/s | model FLOPs/token | TFLOP/s | of peak | decode ms/step at L | cache / step GB | of bw | peer TTFT ms |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
