#!/usr/bin/env bash
# bench/persist.sh — the GPU round of glmrun --decode persistent (issue 47): the 1-token decode step as glmc's
# persistent kernel against the same plan's kernels, run on the device machine from the repository root with
# bin/ and build/ carried. For each shape (random weights), a plan compiled with --decode persistent for
# --blocks-per-sm 1 and 2 (glmrun falls back to the kernels when a GPU's SM does not hold the workers: its
# decode_path column says so):
#   - glmrun --bench -n 32 with --decode kernels and --decode persistent in the same round: ms/step, the
#     bytes a step reads and their % of build/bench/bandwidth's read bandwidth (when the probe is present);
#   - a 40-token prompt and 8 decode steps through both paths: greedy ids (same/DIFF), logits bit-identical
#     or their rel-L2 (build/tools/cmplogits --pair);
# then compute-sanitizer memcheck on the llama fixture's persistent plan (4 steps). One table at the end.
# Shapes: Llama-3-8B bf16, GLM-4.7-Flash bf16, the GLM-5 slice (8 layers) Q4_K_M.
# Environment: OUT (/tmp/glm-persist), SHAPES ("llama3_8b flash glm5"), BPS ("1 2"), BUDGET (540 s for the
# whole round: a step that would start past it is skipped and says so), TO (240 s a command), DEVICE (cuda;
# cpu checks the script on the llama fixture's config at 2 layers: tests/bench.sh).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/glm-persist}
SHAPES=${SHAPES:-"llama3_8b flash glm5"}
BPS=${BPS:-"1 2"}
BUDGET=${BUDGET:-540}
TO=${TO:-240}
DEVICE=${DEVICE:-cuda}
FIXL=$(ls -d ../shared/fixtures/hf/llama build/fixtures/llama 2>/dev/null | head -1)
mkdir -p "$OUT"
t_start=$(date +%s)
value() { sed -n "s/^$1: \([^ ]*\).*/\1/p" "$2" 2>/dev/null | head -1; }
# left: 0 (true) while the budget lasts, else says which step it skips.
left() {
	[ $(($(date +%s) - t_start)) -lt "$BUDGET" ] && return 0
	echo "skipped (BUDGET $BUDGET s spent): $1" >&2
	return 1
}
run() { timeout "$TO" "$@"; }
# shape NAME: model, config, weights, layers
shape() {
	case $1 in
	llama3_8b) echo "llama models/configs/llama3_8b.json bf16 0" ;;
	flash) echo "glm4_moe_lite models/configs/glm4_7_flash.json bf16 0" ;;
	glm5) echo "glm5 models/configs/glm5.json q4_k_m 8" ;;
	esac
}

BW=""
if [ "$DEVICE" = cuda ] && [ -x build/bench/bandwidth ] && left "bandwidth"; then
	run build/bench/bandwidth --gib 8 --iters 20 >"$OUT/bandwidth.txt" 2>&1 && BW=$(value read_gb_s "$OUT/bandwidth.txt")
fi
echo "read bandwidth: ${BW:-not measured (build/bench/bandwidth absent or failed)} GB/s"

rows=()
# pct BYTES MS: % of BW
pct() { [ -n "$BW" ] && awk -v b="$1" -v m="$2" -v w="$BW" 'BEGIN { if (m > 0 && w > 0) printf "%.1f%%", 100 * b / (m * 1e6) / w; else printf "-" }' || echo "-"; }
# every shape at the first BPS value before any at the next, so that a short budget keeps the main comparison
b1=$(echo $BPS | cut -d' ' -f1)
for b in $BPS; do
	for s in $SHAPES; do
		read -r m cfg w layers <<<"$(shape "$s")"
		lf=""
		[ "$layers" != 0 ] && lf="--layers $layers"
		if [ "$DEVICE" != cuda ]; then # the script's own check: the llama fixture's config, two layers
			m=llama cfg=$FIXL/config.json w=bf16 lf="--layers 2"
		fi
		p="$OUT/$s-b$b"
		left "$s --blocks-per-sm $b" || continue
		# shellcheck disable=SC2086
		run bin/glmc compile models/$m.lua --config "$cfg" --random-weights $w --dtype bf16 $lf --decode persistent \
			--blocks-per-sm "$b" -o "$p.plan" >"$p.compile.txt" 2>&1 || {
			rows+=("| $s | $b | compile failed: $(tail -1 "$p.compile.txt") | | | | |")
			continue
		}
		run bin/glmc explain "$p.plan" 2>&1 | grep -i "persistent" >"$p.explain.txt"
		regs=$(grep -o "[0-9]* registers a thread, [0-9]* bytes of stack frame" "$p.explain.txt" | head -1 |
			sed 's/ registers a thread, / regs, /; s/ bytes of stack frame/ B stack/')
		line="| $s | $b (${regs:-?}) |"
		for d in kernels persistent; do
			if [ $d = kernels ] && [ "$b" != "$b1" ]; then
				line="$line (as at $b1) |"
				continue # the kernel path does not depend on the schedule
			fi
			left "$s b$b --bench --decode $d" || { line="$line skipped |"; continue; }
			run bin/glmrun "$p.plan" --device "$DEVICE" --bench -n 32 --decode $d >"$p.$d.bench" 2>&1
			ms=$(value ms_per_step_median "$p.$d.bench") by=$(value bytes_per_step "$p.$d.bench")
			path=$(sed -n 's/^decode_path: //p' "$p.$d.bench" | head -1)
			line="$line ${ms:-failed: $(tail -1 "$p.$d.bench")} ms, $(pct "${by:-0}" "${ms:-0}") (${path:-$DEVICE}) |"
		done
		left "$s b$b correctness" || { rows+=("$line skipped |"); continue; }
		for d in kernels persistent; do
			run bin/glmrun "$p.plan" --device "$DEVICE" --tokens "$(seq -s, 1 40)" -n 8 --decode $d --dump-logits "$p.$d.f32" \
				>"$p.$d.ids" 2>"$p.$d.err" || echo "$s b$b $d: run failed: $(tail -1 "$p.$d.err")"
		done
		same=DIFF
		cmp -s "$p.kernels.ids" "$p.persistent.ids" && [ -s "$p.kernels.ids" ] && same=same
		if cmp -s "$p.kernels.f32" "$p.persistent.f32" && [ -s "$p.kernels.f32" ]; then
			rel="bit-identical"
		else
			rel=$(build/tools/cmplogits --pair "$p.persistent.f32" "$p.kernels.f32" 1 2>&1 | grep -o 'rel-L2 [0-9.e+-]*' | head -1)
		fi
		rows+=("$line ids $same, logits ${rel:-not compared} |")
	done
done

# compute-sanitizer memcheck on the llama fixture's persistent plan (f32, 4 steps). API errors are not counted:
# NCCL's start probes kernels for other GPUs (cudaErrorNoKernelImageForDevice in ncclCommInitRank, 4 of them on
# an H100), which the tool reports as errors.
san="not run"
if [ "$DEVICE" = cuda ] && left "compute-sanitizer"; then
	if ! command -v compute-sanitizer >/dev/null; then
		san="compute-sanitizer not found"
	elif [ -z "$FIXL" ]; then
		san="no llama fixture"
	elif run bin/glmc compile models/llama.lua --weights "$FIXL" --decode persistent -o "$OUT/fix.plan" >"$OUT/fix.compile.txt" 2>&1; then
		run compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 bin/glmrun "$OUT/fix.plan" --device cuda --tokens 1,2,3,4,5 -n 4 \
			--decode persistent --stats >"$OUT/sanitizer.txt" 2>&1
		rc=$?
		san="exit $rc: $(grep -E 'ERROR SUMMARY|decode_path' "$OUT/sanitizer.txt" | tr '\n' ' ' | head -c 300)"
	else
		san="compile failed: $(tail -1 "$OUT/fix.compile.txt")"
	fi
fi

echo "| shape | blocks/SM (the kernel's registers, stack) | kernels: ms/step, % of bw | persistent: ms/step, % of bw (decode_path) | 40 + 8 tokens |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo "compute-sanitizer memcheck (llama fixture, --decode persistent): $san"
echo "round: $(($(date +%s) - t_start)) s of BUDGET $BUDGET s; files in $OUT"
