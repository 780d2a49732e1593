#!/usr/bin/env bash
# bench/mkprobe.sh — compiles, on the development machine, the plans that bench/qtc_round.sh and
# bench/batch_round.sh carry to the device: for each shape <shape>-old.plan by OLD (a glmc built from an
# earlier commit, e.g. in a git worktree) and <shape>-new.plan by bin/glmc, with bench/decode.sh's flags
# (random weights, bf16 activations), and <shape>v.plan (2 layers, bin/glmc) for the --verify checks.
#   OUT (build/probe)  OLD (glmc of the baseline; empty: no -old plans)  SHAPES ("flashq8 flash glm5 llamaq8 llama")
set -eu
cd "$(dirname "$0")/.."
OUT=${OUT:-build/probe} OLD=${OLD:-} SHAPES=${SHAPES:-flashq8 flash glm5 llamaq8 llama}
mkdir -p "$OUT"
for s in $SHAPES; do
	case $s in
	flashq8) m=glm4_moe_lite c=glm4_7_flash w=q8_0 l="" ;;
	flash) m=glm4_moe_lite c=glm4_7_flash w=bf16 l="" ;;
	glm5) m=glm5 c=glm5 w=q4_k_m l="--layers 8" ;;
	llamaq8) m=llama c=llama3_8b w=q8_0 l="" ;;
	llama) m=llama c=llama3_8b w=bf16 l="" ;;
	*) echo "mkprobe: unknown shape $s" >&2; exit 2 ;;
	esac
	f="models/$m.lua --config models/configs/$c.json --random-weights $w --dtype bf16"
	# shellcheck disable=SC2086
	bin/glmc compile $f $l -o "$OUT/$s-new.plan" >/dev/null
	# shellcheck disable=SC2086
	[ -z "$OLD" ] || "$OLD" compile $f $l -o "$OUT/$s-old.plan" >/dev/null
	# shellcheck disable=SC2086
	bin/glmc compile $f --layers 2 -o "$OUT/${s}v.plan" >/dev/null
	echo "mkprobe: $s ($(du -ch "$OUT/$s"*.plan | tail -1 | cut -f1))"
done
