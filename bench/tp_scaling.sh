#!/usr/bin/env bash
# bench/tp_scaling.sh — issue 10's decode table in one command: bench/decode.sh at each tp in TPS (default
# 1 and each of 2, 4, 8 within the visible GPUs), batch 1, no peer, for SHAPES; then one table per shape and
# tp: ms/step, tok/s, the scaling against tp 1, and from the profile (rank 0, event-timed, so each row
# carries a few µs of events) the collectives' rows (allreduce + allgather) and the residual sums' rows
# (add: at tp > 1 the sums that do their allreduce inside, k_add_rmsnorm_ar, exchange and wait for the
# other ranks included) with their share of the profile's kernel sum. Run it on the device machine with
# bin/ and build/ carried, as decode.sh. Random weights everywhere.
# Env: TPS, SHAPES (default "glm4_7_flash:bf16 glm5_slice:q4_k_m"), BUDGET (seconds for all, default 540),
# OUT (default /tmp/glm-tp-bench), STEPS, PROMPT, DEVICE (cuda; cpu runs the tp ranks in one process and has
# no profile: tests/bench.sh checks this script that way on the tiny shape).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/glm-tp-bench}
SHAPES=${SHAPES:-"glm4_7_flash:bf16 glm5_slice:q4_k_m"}
DEVICE=${DEVICE:-cuda}
export NCCL_NVLS_ENABLE=0 # NVLink multicast must never be used on these machines
if [ -z "${TPS:-}" ]; then
	n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
	TPS=1
	for t in 2 4 8; do [ "$t" -le "${n:-0}" ] && TPS="$TPS $t"; done
fi
mkdir -p "$OUT"
each=$((${BUDGET:-540} / $(echo $TPS | wc -w)))
for tp in $TPS; do
	echo "tp $tp: bench/decode.sh (budget ${each}s), log $OUT/decode-tp$tp.log"
	TP=$tp BATCHES=1 PEER=0 PROFILE=1 BUDGET=$each OUT=$OUT/tp$tp WORK=$OUT/work$tp SHAPES="$SHAPES" DEVICE=$DEVICE \
		STEPS=${STEPS:-64} PROMPT=${PROMPT:-128} bench/decode.sh >"$OUT/decode-tp$tp.log" 2>&1 ||
		echo "tp $tp: decode.sh failed: $(tail -2 "$OUT/decode-tp$tp.log" | tr '\n' ' ')"
done
# value KEY FILE: the first word after "KEY: ".
value() { sed -n "s/^$1: \([^ ]*\).*/\1/p" "$2" 2>/dev/null | head -1; }
# op_us OP FILE: the time of OP's row in the profile-by-operator table (empty without a profile).
op_us() {
	awk -v op="$1" '/^profile by operator/ { on = 1; next } /^profile by layer/ { on = 0 }
		on && $1 == op { t = $3 } END { if (t != "") print t; else if (on != "") print 0 }' "$2" 2>/dev/null
}
{
	echo
	echo "decode at tp $TPS, batch 1, $DEVICE; RANDOM WEIGHTS"
	printf '%-13s %-7s %3s %9s %9s %8s %11s %11s %10s %7s\n' shape dtype tp ms/step tok/s scaling coll_us sums_us kernel_us share
	for sd in $SHAPES; do
		s=${sd%%:*} d=${sd##*:}
		base=$(value ms_per_step_median "$OUT/tp1/$s-$d-b1.txt")
		for tp in $TPS; do
			f=$OUT/tp$tp/$s-$d-b1.txt
			ms=$(value ms_per_step_median "$f")
			if [ -z "$ms" ]; then
				printf '%-13s %-7s %3s %9s\n' "$s" "$d" "$tp" "not run (see $OUT/decode-tp$tp.log)"
				continue
			fi
			sc=$(awk -v a="$base" -v b="$ms" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }')
			ar=$(op_us allreduce "$f") ag=$(op_us allgather "$f") ad=$(op_us add "$f") ks=$(value profile_kernel_sum_us "$f")
			coll=$(awk -v a="$ar" -v g="$ag" 'BEGIN { if (a != "") printf "%.1f", a + g; else print "-" }')
			sh=$(awk -v c="$coll" -v s="$ad" -v k="$ks" -v tp="$tp" \
				'BEGIN { if (k + 0 > 0 && tp > 1) printf "%.1f%%", 100 * (c + s) / k; else print "-" }')
			printf '%-13s %-7s %3s %9s %9s %8s %11s %11s %10s %7s\n' "$s" "$d" "$tp" "$ms" "$(value tok_s "$f")" "$sc" \
				"$coll" "${ad:--}" "${ks:--}" "$sh"
		done
	done
	echo "scaling: tp 1's ms/step over this tp's; coll_us: the profile's allreduce + allgather rows (an allreduce done"
	echo "inside the next kernel times an empty slot there); sums_us: its add rows (at tp > 1 mostly the sums that do"
	echo "their allreduce, exchange and wait included); share: (coll + sums) / the profile's kernel sum, at tp > 1."
	echo "Raw outputs: $OUT/tp*/ (decode.sh's tables, glmrun blocks and profiles)."
} | tee "$OUT/table.txt"
