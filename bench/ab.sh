#!/usr/bin/env bash
# bench/ab.sh — before/after of a compiler or kernel change in one device call (issue 8): the same shapes
# compiled by several glmc binaries (the first is the baseline), each plan benchmarked ROUNDS times in
# turn (A B A B ...) so clock and thermal drift fall on all, medians printed side by side with the ratio
# to the first. Random weights, batch 1, as bench/decode.sh; decode.sh stays the reference table, this is
# the quick comparison.
#
#   BINS="oldbin/glmc_base bin/glmc" bench/ab.sh [SHAPE:DTYPE ...]   (default: the three decode.sh shapes)
#
# Env: BINS (glmc binaries; glmrun is bin/glmrun for all: plans carry their kernels), ROUNDS (3),
# STEPS (64), FLAGS (extra glmrun flags for all, e.g. --pdl), CFLAGS (extra glmc flags, e.g. --tp 2),
# RUNS (a glmrun binary per glmc binary, for changes of the plan format; default bin/glmrun for all), OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/glm-ab}
mkdir -p "$OUT"
read -r -a BINS <<<"${BINS:-oldbin/glmc_base bin/glmc}"
read -r -a RUNS <<<"${RUNS:-}"
ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-64} FLAGS=${FLAGS:-} CFLAGS=${CFLAGS:-}
[ $# -gt 0 ] || set -- llama3_8b:bf16 glm4_7_flash:bf16 glm5_slice:q4_k_m
export NCCL_NVLS_ENABLE=0
. bench/shapes.sh
# the median of a list of figures ("fail" entries left out)
med() { printf '%s\n' $1 | grep -v fail | sort -n | awk '{a[NR]=$1} END{if(NR) print a[int((NR+1)/2)]; else print "fail"}'; }
for sd in "$@"; do
	s=${sd%%:*} d=${sd##*:}
	shape_vars "$s" "$d" || { echo "ab.sh: unknown shape $s"; continue; }
	nb=${#BINS[@]}
	for v in $(seq 0 $((nb - 1))); do
		bin=${BINS[$v]}
		# shellcheck disable=SC2086
		$bin compile models/$model.lua --config $cfg --random-weights $d --dtype $act $extra $CFLAGS -o "$OUT/$s-$v.plan" \
			>"$OUT/$s-$v.compile" 2>&1 || { echo "ab.sh: $bin failed to compile $s: $(tail -1 "$OUT/$s-$v.compile")"; continue 2; }
	done
	declare -A ms=()
	for r in $(seq "$ROUNDS"); do
		for v in $(seq 0 $((nb - 1))); do
			# shellcheck disable=SC2086
			m=$(timeout 120 "${RUNS[$v]:-bin/glmrun}" "$OUT/$s-$v.plan" --bench -n "$STEPS" $FLAGS 2>&1 | sed -n 's/^ms_per_step_median: //p')
			ms[$v]="${ms[$v]:-} ${m:-fail}"
		done
	done
	base=$(med "${ms[0]}")
	for v in $(seq 0 $((nb - 1))); do
		m=$(med "${ms[$v]}")
		echo "ab $sd ${BINS[$v]}: $m ms/step (runs:${ms[$v]}) ratio $(awk -v a="$base" -v b="$m" 'BEGIN{if(a>0&&b>0) printf "%.3f", b/a; else print "-"}')"
	done
done
