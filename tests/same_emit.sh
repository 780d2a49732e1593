#!/usr/bin/env bash
# tests/same_emit.sh — the kernel source, launch list, quantized-weight choices and fusion reasons that two
# glmc binaries write, compared plan by plan (tests/tools/plan_text.py turns a plan of format 11 or later
# into text, the collectives' kind and the "done inside the next kernel" mark read from either spelling).
# For refactors that must not change what is emitted: every fixture model (f32 and bf16, and tp 2 for
# three), and the bench shapes of tests/gpu/mkprobe.sh at --layers 2 (GLM-5 also at 4, and tp 2 for two).
#   BASE (glmc to compare against, required)  NEW (bin/glmc)  OUT (build/same_emit)
# Plans are compiled without NVRTC where a mount namespace can hide it (unshare -m, as root: a second a
# plan instead of 5-10 s); the cubin follows from the source and the arch compared here. Prints ok/FAIL lines.
#   SHAPE_H_BASE (optional): the baseline's ops/gemv_shape.h. Every plan's source starts with that header's
#   text; when only its host-side shape helpers changed, the new plans' copy is read as the baseline's (each
#   new source must hold the new header exactly once) and everything else must still match.
set -u
cd "$(dirname "$0")/.."
BASE=${BASE:?BASE=path/to/the/baseline/glmc} NEW=${NEW:-bin/glmc} OUT=${OUT:-build/same_emit}
FIX=../shared/fixtures/hf
mkdir -p "$OUT/base" "$OUT/new"
plans() {
	for m in llama qwen3 qwen3_moe glm4_moe deepseek_v3 glm4_moe_lite glm_moe_dsa; do
		f=models/$m.lua
		[ $m = glm_moe_dsa ] && f=models/glm5.lua
		echo "fix-$m-f32|$f --weights $FIX/$m"
		echo "fix-$m-bf16|$f --weights $FIX/$m --dtype bf16"
	done
	echo "fix-llama-tp2|models/llama.lua --weights $FIX/llama --tp 2"
	echo "fix-glm4_moe-tp2|models/glm4_moe.lua --weights $FIX/glm4_moe --dtype bf16 --tp 2"
	echo "fix-deepseek_v3-tp2|models/deepseek_v3.lua --weights $FIX/deepseek_v3 --dtype bf16 --tp 2"
	for s in flashq8 flash glm5 llamaq8 llama; do
		case $s in
		flashq8) m=glm4_moe_lite c=glm4_7_flash w=q8_0 ;;
		flash) m=glm4_moe_lite c=glm4_7_flash w=bf16 ;;
		glm5) m=glm5 c=glm5 w=q4_k_m ;;
		llamaq8) m=llama c=llama3_8b w=q8_0 ;;
		llama) m=llama c=llama3_8b w=bf16 ;;
		esac
		echo "shape-$s|models/$m.lua --config models/configs/$c.json --random-weights $w --dtype bf16 --layers 2"
	done
	# GLM-5's first three layers are dense: four reach its MoE (k_qmoe_down_mma)
	echo "shape-glm5-l4|models/glm5.lua --config models/configs/glm5.json --random-weights q4_k_m --dtype bf16 --layers 4"
	echo "shape-flash-tp2|models/glm4_moe_lite.lua --config models/configs/glm4_7_flash.json --random-weights bf16 --dtype bf16 --layers 2 --tp 2"
	echo "shape-glm5-tp2|models/glm5.lua --config models/configs/glm5.json --random-weights q4_k_m --dtype bf16 --layers 2 --tp 2"
}
# glmc without NVRTC: /usr/local/cuda hidden under an empty tmpfs for the one command
nonvrtc() {
	if [ "${HIDE:-}" = 1 ]; then
		unshare -m sh -c 'mount -t tmpfs none /usr/local/cuda && exec "$@"' sh "$@"
	else
		"$@"
	fi
}
HIDE=0
unshare -m sh -c 'mount -t tmpfs none /usr/local/cuda' 2>/dev/null && HIDE=1
plans | while IFS='|' read -r name args; do
	for side in base new; do
		bin=$BASE
		[ $side = new ] && bin=$NEW
		p=$OUT/$side/$name.plan
		# shellcheck disable=SC2086
		if ! nonvrtc "$bin" compile $args -o "$p" 2>"$OUT/$side/$name.err"; then
			echo "FAIL - $name: $side glmc: $(head -c 300 "$OUT/$side/$name.err")"
			continue 2
		fi
	done
	python3 tests/tools/plan_text.py "$OUT/base/$name.plan" >"$OUT/base/$name.txt" &&
		python3 tests/tools/plan_text.py "$OUT/new/$name.plan" >"$OUT/new/$name.txt" || {
		echo "FAIL - $name: plan_text.py"
		continue
	}
	if [ -n "${SHAPE_H_BASE:-}" ] && ! python3 -c 'import sys
t, new, old = (open(f).read() for f in sys.argv[1:4])
sys.exit(t.count(new) != 1 or open(sys.argv[1], "w").write(t.replace(new, old)) < 0)' \
		"$OUT/new/$name.txt" ops/gemv_shape.h "$SHAPE_H_BASE"; then
		echo "FAIL - $name: the new source does not hold ops/gemv_shape.h once"
		continue
	fi
	if cmp -s "$OUT/base/$name.txt" "$OUT/new/$name.txt"; then
		echo "ok - $name: same source, launches, weight types and fusion reasons ($(grep -c '^launch ' "$OUT/new/$name.txt") launches)"
	else
		echo "FAIL - $name: differs: diff $OUT/base/$name.txt $OUT/new/$name.txt | head"
	fi
done
