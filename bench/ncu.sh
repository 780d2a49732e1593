#!/usr/bin/env bash
# bench/ncu.sh — Nsight Compute counters for chosen decode kernels of a plan (issue 8): where a kernel
# that misses the roofline spends its time (DRAM throughput, occupancy, warp stalls, waves), so the
# next change is chosen from counters, not guesses. Device machine only; needs ncu (Firecracker
# machines read the counters, gVisor ones do not: the script says so and exits 2).
#
#   bench/ncu.sh SHAPE:DTYPE KERNEL [KERNEL...]     e.g. bench/ncu.sh glm4_7_flash:bf16 glm_k38 glm_k40
#
# The plan is compiled with --random-weights from the shape's config (as bench/decode.sh does); KERNEL
# is an emitted kernel name (glm_kN; `glmc dump MODEL --after emit` lists which op each one is). Each
# kernel is profiled at one decode-step launch (SKIP launches of it are passed over first: prefill and
# warm-up), clocks left alone. Env: OUT (reports), SKIP (default 200), SECTIONS.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/glm-ncu}
mkdir -p "$OUT"
SKIP=${SKIP:-200}
SECTIONS=${SECTIONS:-"SpeedOfLight Occupancy LaunchStats WarpStateStats MemoryWorkloadAnalysis SchedulerStats"}
[ $# -ge 2 ] || { sed -n 2,11p "$0"; exit 2; }
sd=$1
shift
s=${sd%%:*} d=${sd##*:}
. bench/shapes.sh
shape_vars "$s" "$d" || { echo "ncu.sh: unknown shape $s (llama3_8b, glm4_7_flash, glm5_slice)"; exit 2; }
command -v ncu >/dev/null || { echo "ncu.sh: no ncu on this machine"; exit 2; }
plan=$OUT/$s-$d.plan
# shellcheck disable=SC2086
bin/glmc compile models/$model.lua --config $cfg --random-weights $d --dtype $act $extra -o "$plan" >"$OUT/compile.txt" 2>&1 ||
	{ echo "ncu.sh: compile failed: $(tail -2 "$OUT/compile.txt")"; exit 1; }
sec=""
for x in $SECTIONS; do sec="$sec --section $x"; done
for k in "$@"; do
	# shellcheck disable=SC2086
	timeout 300 ncu --clock-control none -k "regex:^$k\$" --launch-skip "$SKIP" --launch-count 1 $sec \
		bin/glmrun "$plan" --bench -n 8 --bench-prompt 128 >"$OUT/$s-$k.txt" 2>&1
	rc=$?
	if grep -q "LibraryNotLoaded\|ERR_NVGPUCTRPERM\|Failed to initialize" "$OUT/$s-$k.txt"; then
		echo "ncu.sh: ncu cannot read the counters here: $(grep -m1 'ERR\|Failed' "$OUT/$s-$k.txt")"
		exit 2
	fi
	echo "=== $s $k (ncu status $rc)"
	# the lines worth reading: name, duration, throughputs, occupancy, waves, top stalls
	grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|L2 Hit|L1/TEX Hit|Achieved Occupancy|Theoretical Occupancy|Registers Per|Waves Per SM|Block Size|Grid Size|Block Limit|Stall|Warp Cycles Per Issued|Active Warps Per|Eligible Warps|No Eligible|Issued Warp|Mem Busy|Max Bandwidth|Shared Memory Configuration Size|Dynamic Shared|Static Shared" \
		"$OUT/$s-$k.txt" | head -60
	grep -E "^    (OPT|WRN|INF) " "$OUT/$s-$k.txt" | cut -c1-300 | head -8
done
