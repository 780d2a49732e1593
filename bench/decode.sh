#!/usr/bin/env bash
# bench/decode.sh — issue 8's one command, run on the device machine (one H200) from the repository root
# with bin/ and build/ carried from `make gpu-bundle` (or `make bench`): it builds nothing that needs the
# internet. In one run it measures
#   1. the GPU's read bandwidth (build/bench/bandwidth: 8 GiB read-only kernel; the roofline),
#   2. glmrun --bench --profile on random weights of real model shapes (plans compiled here by bin/glmc):
#      Llama-3-8B bf16, GLM-4.7-Flash bf16 and Q8_0, the GLM-5 slice (3 dense + 5 MoE layers) in Q4_K_M,
#      at batch 1, 4 and 16,
#   3. the peer, Hugging Face transformers with a static cache (bench/peer_hf.py), on the same shapes in
#      bf16,
# and prints one table: shape, dtype, batch, ms/step, tok/s, GB/s, % of the measured bandwidth, graph
# launches per step, peer ms/token, speedup. Every phase is timed; a global budget (BUDGET seconds,
# default 470, under the device's 10-minute command limit) skips what would not fit, and says so.
#
# Environment: OUT (results; default /tmp/glm-bench), TP (plans for TP GPUs; default 1), SHAPES (default all four rows, e.g.
# SHAPES="llama3_8b:bf16"), BATCHES (default "1 4 16"), STEPS (decode steps measured, 64), PROMPT (128),
# PEER (1/0), PROFILE (1/0), PDL (0/1: batch 1 again with --pdl), TRACE (1/0: batch 1 again under the
# CUPTI kernel timeline build/bench/libglmtrace.so, read by bench/trace.py: time inside the graph, no events), BUDGET (seconds), WORK (plans and scratch; default /tmp/glm-bench-work),
# DEVICE (cuda; cpu with the shape "tiny", the llama test fixture's config, checks this script without a
# GPU: tests/bench.sh does that).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/glm-bench}
WORK=${WORK:-/tmp/glm-bench-work}
SHAPES=${SHAPES:-"llama3_8b:bf16 glm4_7_flash:bf16 glm4_7_flash:q8_0 glm5_slice:q4_k_m"}
BATCHES=${BATCHES:-"1 4 16"}
TP=${TP:-1} # plans for TP GPUs (issue 10: TP=2 BATCHES=1 PEER=0 on a 2-GPU machine); batch 1 only above 1;
# the profile's "allreduce" / "allgather" rows by operator are then the collectives' share of the step
STEPS=${STEPS:-64}
PROMPT=${PROMPT:-128}
PEER=${PEER:-1}
PROFILE=${PROFILE:-1}
PDL=${PDL:-0} # 1: batch 1 also with glmrun --pdl (programmatic dependent launch, an experiment)
TRACE=${TRACE:-1} # 1: batch 1 again under bench/trace.c (each kernel's time inside the graph replay, and the gaps)
BUDGET=${BUDGET:-470}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT" "$WORK"
T0=$(date +%s)
now() { echo $(($(date +%s) - T0)); }
say() { echo "[$(printf '%4d' "$(now)")s] $*"; }
left() { echo $((BUDGET - $(now))); }
# run_timed LABEL LIMIT CMD...: CMD under `timeout LIMIT`, a line every 30 s while it runs; its status.
run_timed() {
	local label=$1 limit=$2 n=0
	shift 2
	timeout -k 5 "$limit" "$@" &
	local pid=$!
	while kill -0 $pid 2>/dev/null; do
		sleep 1
		n=$((n + 1))
		[ $((n % 30)) = 0 ] && kill -0 $pid 2>/dev/null && say "$label: still running (${n}s)"
	done
	wait $pid
}
# value KEY FILE: the first word after "KEY: ".
value() { sed -n "s/^$1: \([^ ]*\).*/\1/p" "$2" 2>/dev/null | head -1; }

# A shape: model file, config, extra glmc flags, peer flags.
model_of() { case $1 in llama3_8b | tiny) echo llama ;; glm4_7_flash) echo glm4_moe_lite ;; glm5_slice) echo glm5 ;; esac; }
config_of() {
	case $1 in
	llama3_8b | glm4_7_flash) echo models/configs/$1.json ;;
	glm5_slice) echo models/configs/glm5.json ;;
	tiny) ls ../shared/fixtures/hf/llama/config.json build/fixtures/llama/config.json 2>/dev/null | head -1 ;;
	esac
}
layers_of() { case $1 in glm5_slice) echo "--layers 8" ;; *) echo "" ;; esac; }

say "bench/decode.sh: OUT=$OUT SHAPES='$SHAPES' BATCHES='$BATCHES' STEPS=$STEPS PROMPT=$PROMPT BUDGET=${BUDGET}s"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null ||
	echo "no nvidia-smi"; } | sed 's/^/gpu: /' | tee "$OUT/gpu.txt"
for f in bin/glmc bin/glmrun; do
	[ -x $f ] || { echo "decode.sh: $f is missing: build with 'make bench' and carry bin and build"; exit 1; }
done

# 1. Bandwidth.
BW=""
BWBIN=build/bench/bandwidth
if [ "$DEVICE" != cuda ]; then
	say "bandwidth: skipped (DEVICE=$DEVICE)"
	BWBIN=""
elif [ ! -x $BWBIN ] && command -v nvcc >/dev/null; then
	say "building the bandwidth probe with nvcc (build/bench/bandwidth was not carried)"
	mkdir -p "$WORK/bin" && nvcc -std=c++17 -O3 -arch=sm_90 bench/bandwidth.cu -o "$WORK/bin/bandwidth" && BWBIN=$WORK/bin/bandwidth
fi
if [ -n "$BWBIN" ] && [ -x "$BWBIN" ]; then
	say "bandwidth: 8 GiB read-only kernel, copy, write"
	timeout 120 $BWBIN --gib 8 --iters 20 >"$OUT/bandwidth.txt" 2>&1
	rc=$?
	if [ $rc = 127 ] || grep -q "GLIBC\|not found" "$OUT/bandwidth.txt"; then
		# A binary built on the development machine that this image cannot load: build it here.
		say "the carried probe does not start here ($(head -1 "$OUT/bandwidth.txt")); building it with nvcc"
		mkdir -p "$WORK/bin" && nvcc -std=c++17 -O3 -arch=sm_90 bench/bandwidth.cu -o "$WORK/bin/bandwidth" &&
			timeout 120 "$WORK/bin/bandwidth" --gib 8 --iters 20 >"$OUT/bandwidth.txt" 2>&1
		rc=$?
	fi
	if [ $rc = 0 ]; then
		BW=$(value read_gb_s "$OUT/bandwidth.txt")
		grep -E "^(device|read_gb_s|read_best_config|copy_kernel_gb_s|memcpy_d2d_gb_s|write_gb_s):" "$OUT/bandwidth.txt"
	else
		say "bandwidth probe failed: $(tail -2 "$OUT/bandwidth.txt")"
	fi
elif [ -n "$BWBIN" ]; then
	say "no bandwidth probe (build/bench/bandwidth missing and no nvcc): % of bandwidth left blank"
fi
BWARG=""
[ -n "$BW" ] && BWARG="--bw $BW"

# 2. glmrun, every shape and dtype; batch 1 carries the profile.
HAVE_BATCH=0
bin/glmrun --help | grep -q -- "--batch" && HAVE_BATCH=1
declare -A RES PDLMS
for sd in $SHAPES; do
	s=${sd%%:*} d=${sd##*:}
	tag=$s-$d
	plan=$WORK/$tag.plan
	if [ "$(left)" -lt 30 ]; then
		say "$tag: skipped (time budget)"
		RES[$tag]="skipped (time budget)"
		continue
	fi
	say "$tag: compile plan (glmc, random weights $d)"
	t=$(date +%s)
	if ! bin/glmc compile models/$(model_of $s).lua --config "$(config_of $s)" --random-weights $d \
		--dtype bf16 $(layers_of $s) --tp "$TP" -o "$plan" >"$OUT/$tag.compile.txt" 2>&1; then
		say "$tag: compile failed: $(tail -1 "$OUT/$tag.compile.txt")"
		RES[$tag]="compile failed"
		continue
	fi
	bin/glmc stats "$plan" >"$OUT/$tag.stats.txt"
	say "$tag: compiled in $(($(date +%s) - t))s; $(grep -E '^(kernels_per_step|weight_bytes_total)' "$OUT/$tag.stats.txt" | tr '\n' ' ')"
	for b in $BATCHES; do
		out=$OUT/$tag-b$b.txt
		if [ "$b" != 1 ] && [ $HAVE_BATCH = 0 ]; then
			RES[$tag-b$b]="n/a: glmrun has no --batch yet"
			continue
		fi
		budget=$(left)
		if [ "$budget" -lt 20 ]; then
			RES[$tag-b$b]="skipped (time budget)"
			continue
		fi
		flags="--bench"
		[ "$b" = 1 ] && [ "$PROFILE" = 1 ] && [ "$DEVICE" = cuda ] && flags="--profile --profile-top 25"
		[ "$b" != 1 ] && flags="$flags --batch $b"
		say "$tag batch $b: glmrun $flags (weights generated at open; limit ${budget}s)"
		t=$(date +%s)
		if run_timed "$tag batch $b" "$budget" sh -c "exec bin/glmrun '$plan' --device $DEVICE $flags --bench-prompt $PROMPT \
			-n $STEPS $BWARG >'$out' 2>'$out.err'"; then
			if [ "$(value batch "$out")" != "$b" ]; then
				say "$tag batch $b: glmrun ran batch $(value batch "$out"), not $b (BenchOpts.batch is not wired to --batch)"
				RES[$tag-b$b]="glmrun ignored --batch $b"
				continue
			fi
			say "$tag batch $b: $(value ms_per_step_median "$out") ms/step, $(value achieved_gb_s "$out") GB/s, setup $(value setup_s "$out")s (upload $(value upload_s "$out")s), run $(($(date +%s) - t))s"
			if [ "$flags" != "${flags#--profile}" ]; then
				sed -n '/^profile: /,/^profile by operator/p' "$out" | head -14
				sed -n '/^profile by operator/,/^profile_overhead_us/p' "$out"
			fi
			RES[$tag-b$b]=ok
			# the same plan under the kernel timeline (bench/trace.c): in-graph kernel times and the gaps
			if [ "$b" = 1 ] && [ "$TRACE" = 1 ] && [ "$DEVICE" = cuda ] && [ -f build/bench/libglmtrace.so ] &&
				[ "$(left)" -gt 30 ] && run_timed "$tag trace" "$(left)" sh -c "CUDA_INJECTION64_PATH='$PWD/build/bench/libglmtrace.so' \
					GLM_TRACE='$OUT/$tag.trace.tsv' LD_LIBRARY_PATH='$PWD/build/bench'${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec bin/glmrun '$plan' --device $DEVICE \
					--bench --bench-prompt $PROMPT -n $STEPS >'$out.trace' 2>&1" &&
				python3 bench/trace.py "$OUT/$tag.trace.tsv" --top 12 >"$OUT/$tag.trace.txt" 2>&1; then
				say "$tag batch 1, in-graph kernel timeline (bench/trace.py):"
				sed -n '1,/^first /p' "$OUT/$tag.trace.txt" | sed '$d'
				gzip -f "$OUT/$tag.trace.tsv"
			fi
			# the same plan with programmatic dependent launch (glmrun --pdl, an experiment): what it is worth
			if [ "$b" = 1 ] && [ "$PDL" = 1 ] && [ "$DEVICE" = cuda ] && [ "$(left)" -gt 30 ] &&
				run_timed "$tag --pdl" "$(left)" sh -c "exec bin/glmrun '$plan' --device $DEVICE --bench --pdl \
					--bench-prompt $PROMPT -n $STEPS $BWARG >'$out.pdl' 2>'$out.pdl.err'"; then
				PDLMS[$tag]=$(value ms_per_step_median "$out.pdl")
				say "$tag batch 1 --pdl: ${PDLMS[$tag]} ms/step (programmatic launch $(value programmatic_launch "$out.pdl"))"
			fi
		else
			rc=$?
			say "$tag batch $b: glmrun failed (status $rc): $(tail -2 "$out.err" | tr '\n' ' ')"
			RES[$tag-b$b]="glmrun failed ($rc): $(tail -1 "$out.err" | cut -c1-80)"
		fi
	done
	rm -f "$plan"
done

# 3. The peer, once per shape (bf16: transformers has no Q4_K or Q8_0 path for these models).
declare -A PEERMS
if [ "$PEER" = 1 ]; then
	done_shapes=""
	for sd in $SHAPES; do
		s=${sd%%:*}
		case " $done_shapes " in *" $s "*) continue ;; esac
		done_shapes="$done_shapes $s"
		budget=$(left)
		if [ "$budget" -lt 45 ]; then
			say "peer $s: skipped (time budget)"
			PEERMS[$s]="skipped"
			continue
		fi
		say "peer $s: transformers, static cache, bf16 random weights (limit ${budget}s)"
		t=$(date +%s)
		run_timed "peer $s" "$budget" sh -c "exec python3 bench/peer_hf.py --config $(config_of $s) --device $DEVICE \
			$(layers_of $s) --prompt $PROMPT --new $STEPS >'$OUT/peer-$s.txt' 2>'$OUT/peer-$s.err'"
		rc=$?
		ms=$(value peer_ms_per_token_median "$OUT/peer-$s.txt")
		if [ $rc = 0 ] && [ -n "$ms" ]; then
			PEERMS[$s]=$ms
			say "peer $s: $ms ms/token (compile $(value peer_compile_s "$OUT/peer-$s.txt")s, run $(($(date +%s) - t))s)"
		else
			PEERMS[$s]="failed"
			say "peer $s: failed (status $rc): $(grep peer_error "$OUT/peer-$s.txt" || tail -2 "$OUT/peer-$s.err" | tr '\n' ' ')"
		fi
	done
fi

# 4. The table.
{
	echo
	echo "decode benchmark, $DEVICE ($(cut -d, -f1 "$OUT/gpu.txt" | sed 's/^gpu: //')), read bandwidth ${BW:-?} GB/s measured in this run; RANDOM WEIGHTS everywhere"
	printf '%-13s %-7s %5s %9s %9s %8s %6s %8s %9s %8s  %s\n' shape dtype batch ms/step tok/s GB/s %bw launch peer_ms speedup notes
	for sd in $SHAPES; do
		s=${sd%%:*} d=${sd##*:}
		for b in $BATCHES; do
			f=$OUT/$s-$d-b$b.txt
			r=${RES[$s-$d-b$b]:-${RES[$s-$d]:-not run}}
			p=${PEERMS[$s]:--}
			note=""
			[ "$d" != bf16 ] && note="peer in bf16 (no $d in transformers)"
			[ "$b" != 1 ] && note="peer batch 1"
			[ "$b" = 1 ] && [ -n "${PDLMS[$s-$d]:-}" ] && note="${note:+$note; }--pdl ${PDLMS[$s-$d]} ms"
			if [ "$r" = ok ]; then
				ms=$(value ms_per_step_median "$f")
				gbs=$(value achieved_gb_s "$f")
				pct=$([ -n "$BW" ] && awk -v g="$gbs" -v b="$BW" 'BEGIN { printf "%.1f", 100 * g / b }' || echo -)
				sp=$(awk -v p="$p" -v m="$ms" 'BEGIN { if (p + 0 > 0 && m + 0 > 0) printf "%.2fx", p / m; else print "-" }')
				printf '%-13s %-7s %5s %9s %9s %8s %6s %8s %9s %8s  %s\n' $s $d $b "$ms" "$(value tok_s "$f")" "$gbs" "$pct" \
					"$(value graph_launches_per_step "$f")" "$p" "$sp" "$note"
			else
				printf '%-13s %-7s %5s %9s %9s %8s %6s %8s %9s %8s  %s\n' $s $d $b - - - - - "$p" - "$r"
			fi
		done
	done
	echo "ms/step: median host time per decode step (graph launch to sampled token); GB/s: bytes_per_step (weights read +"
	echo "selected experts + KV/latent cache at the measured context) / ms/step; %bw: of the read bandwidth above;"
	echo "peer: transformers generate(cache_implementation=\"static\") decode ms/token; speedup = peer / glmrun."
	echo "Raw outputs: $OUT/*.txt (glmrun blocks and profiles, bandwidth, peers). Total $(now)s."
} | tee "$OUT/table.txt"
