#!/usr/bin/env bash
# bench/quant_round.sh — a quantized-kernel change's round on the device machine, in one call each:
#   ROUND=check: the quantized kernels against float64 (build/gpu/test_qgemv) and plans whose weights stay
#                in blocks against the CPU reference (tests/gpu/quant_e2e.sh, PARTS, default "1 3 5");
#   ROUND=bench: build/bench/gemv's rows of the changed type (ONLY, default "Q8_0 Q8mma"), then
#                bench/ab.sh of the old build against this one on SHAPES (default Flash and Llama-3-8B in
#                Q8_0), the old plans run by the old glmrun (the device layout is glmrun's: RUNS).
# OLD is the old build's bin directory (default build/old: glmc and glmrun of the commit before the
# change, built on the development machine). Needs bin/ and build/ from `make gpu-bundle`.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/glm-qround}
mkdir -p "$OUT"
OLD=${OLD:-build/old}
case ${ROUND:-check} in
check)
	echo "== build/gpu/test_qgemv"
	build/gpu/test_qgemv >"$OUT/qgemv.log" 2>&1
	echo "rc $?"
	grep -E '^(FAIL|not ok)' "$OUT/qgemv.log" | head -20
	grep -E 'Q8_0' "$OUT/qgemv.log" | grep -c '^ok' | sed 's/^/Q8_0 rows ok: /'
	tail -1 "$OUT/qgemv.log"
	echo "== tests/gpu/quant_e2e.sh PARTS=${PARTS:-1 3 5}"
	PARTS=${PARTS:-1 3 5} OUT=$OUT/e2e tests/gpu/quant_e2e.sh 2>&1 | grep -E '^(row:.*(FAIL|fail))|passed' | tail -25
	;;
bench)
	for t in ${ONLY:-Q8_0 Q8mma}; do
		echo "== build/bench/gemv --only $t"
		build/bench/gemv --only "$t" 2>&1 | tail -40
	done
	echo "== bench/ab.sh"
	# shellcheck disable=SC2086
	BINS="$OLD/glmc bin/glmc" RUNS="$OLD/glmrun bin/glmrun" ROUNDS=${ROUNDS:-3} OUT=$OUT/ab \
		bench/ab.sh ${SHAPES:-glm4_7_flash:q8_0 llama3_8b:q8_0}
	;;
*)
	echo "quant_round.sh: ROUND is check or bench" >&2
	exit 2
	;;
esac
