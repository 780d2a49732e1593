#!/usr/bin/env bash
# tests/simt_persist.sh — glmrun --decode persistent (issue 47) on the simt driver double (tests/fake/simtcuda.c,
# as tests/simt_gpu.sh uses it): the plan's persistent kernel (Cuda.psource, glmc compile --decode persistent)
# built for the CPU by build/tools/simtsrc --persist, loaded as the double's second module (GLM_SIMT_PSO), its
# workers alive together (simt_launch_concurrent), so a worker waits on another's counters as on a GPU.
# Per case (glmc --sms N --blocks-per-sm 1): the greedy ids of --decode persistent equal those of --decode kernels
# and of --device cpu; its logits equal the kernels' bit for bit (every task runs the same template code on the
# same block as the kernel's launch does, and no output is summed across blocks in an order the schedule could
# change), and are within 1e-4 of the CPU's; --stats says the persistent path ran with N workers, the bodies
# narrower than a worker in lanes (llama, qwen3_moe: several blocks at once, the double reporting the kernels'
# static shared memory from the cubin as the driver does), and one graph launch a decode step; the modules come from the
# plan's cubins. Also: lane pools sized too small (the double reporting less static shared memory) trap in the
# pool's bound as on the GPU; a schedule for more SMs than the GPU has falls back to the kernels with one line,
# and --decode persistent on a plan without a schedule is refused.
# Prints "ok - NAME" / "FAIL - NAME: why" lines for tests/run.sh to count, and "# " lines with the times.
set -u
cd "$(dirname "$0")/.."
FIX=../shared/fixtures/hf
CMP=build/tools/cmplogits
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1: $2"; }

for f in build/simtcuda/libcuda.so.1 build/tools/simtsrc bin/glmc bin/glmrun $CMP; do
	[ -f $f ] || { bad "simt persistent double built" "$f missing (make all)"; exit 1; }
done

# gpu NAME ARGS: glmrun on the double with NAME's kernels and persistent kernel.
gpu() {
	local n=$1
	shift
	env LD_LIBRARY_PATH=build/simtcuda GLMRUN_NCCL=/nonexistent GLM_SIMT_SO=$tmp/$n.so GLM_SIMT_PSO=$tmp/$n.p.so \
		bin/glmrun $tmp/$n.plan --device cuda "$@"
}

declare -A args=([llama-f32]="models/llama.lua --weights $FIX/llama" [qwen3_moe-f32]="models/qwen3_moe.lua --weights $FIX/qwen3_moe"
	[glm5-q4_k_m]="models/glm5.lua --config tests/data/glm5_q256.json --random-weights q4_k_m")
declare -A sms=([llama-f32]=3 [qwen3_moe-f32]=3 [glm5-q4_k_m]=2)
# the most lanes a worker runs: GLM-5's bodies are all as wide as its worker (256 threads; the DSA top-k's
# 32-thread body, which ran in 8 lanes, takes 256 since the selection is the whole block's)
declare -A lanes=([llama-f32]="[2-8]" [qwen3_moe-f32]="[2-8]" [glm5-q4_k_m]="1")
cases="glm5-q4_k_m qwen3_moe-f32 llama-f32"

# build NAME: the plan with a persistent schedule, its kernels and its persistent kernel as shared objects.
build() {
	local n=$1 t0=$(date +%s.%N)
	bin/glmc compile ${args[$n]} --decode persistent --sms ${sms[$n]} --blocks-per-sm 1 -o $tmp/$n.plan 2>$tmp/$n.err &&
		build/tools/simtsrc $tmp/$n.plan >$tmp/$n.cc 2>>$tmp/$n.err &&
		build/tools/simtsrc --persist $tmp/$n.plan >$tmp/$n.p.cc 2>>$tmp/$n.err || return 1
	for s in $n $n.p; do
		${CXX:-c++} -std=c++17 -O1 -w -fPIC -shared -Itests/simt -Iops $tmp/$s.cc tests/simt/simt.cc -o $tmp/$s.so \
			2>>$tmp/$n.err || return 1
	done
	awk -v a=$t0 -v b=$(date +%s.%N) 'BEGIN { printf "%.1f", b - a }' >$tmp/$n.time
}
for n in $cases; do
	while [ "$(jobs -r | wc -l)" -ge 2 ]; do wait -n; done
	build $n &
done
wait

for n in $cases; do
	if [ ! -f $tmp/$n.time ]; then
		bad "$n: plan, kernels and persistent kernel built" "$(grep -v '^glmc: wrote' $tmp/$n.err | head -c 400)"
		continue
	fi
	m=${n%-*} k=12
	case $n in
	glm5-*) prompt=3,1,4,1,5 k=3 ;;
	*) prompt=$($CMP --prompt $FIX/$m) ;;
	esac
	t0=$(date +%s.%N)
	pers=$(gpu $n --tokens "$prompt" -n $k --decode persistent --stats --dump-logits $tmp/$n.p 2>$tmp/$n.stats) ||
		{ bad "$n: glmrun --decode persistent on the double" "$(grep -v stats: $tmp/$n.stats | head -c 300)"; continue; }
	kern=$(gpu $n --tokens "$prompt" -n $k --decode kernels --stats --dump-logits $tmp/$n.k 2>$tmp/$n.kstats)
	cpu=$(bin/glmrun $tmp/$n.plan --device cpu --tokens "$prompt" -n $k --dump-logits $tmp/$n.c 2>$tmp/err)
	[ -n "$pers" ] && [ "$pers" = "$kern" ] && [ "$pers" = "$cpu" ] && ok "$n: greedy ids equal the kernels' and the CPU's" ||
		bad "$n: greedy ids" "persistent '$pers', kernels '$kern', cpu '$cpu'"
	cmp -s $tmp/$n.p $tmp/$n.k && ok "$n: logits equal the kernels' bit for bit" ||
		bad "$n: logits vs --decode kernels" "$($CMP --pair $tmp/$n.p $tmp/$n.k 0 2>&1)"
	r=$($CMP --pair $tmp/$n.p $tmp/$n.c 1e-4 2>&1) && ok "$n: logits vs --device cpu: $r" || bad "$n: logits vs --device cpu" "$r"
	grep -q "decode_path: persistent (${sms[$n]} workers: .*, up to ${lanes[$n]} lanes," $tmp/$n.stats &&
		grep -q "decode_path: kernels (--decode kernels)" $tmp/$n.kstats &&
		ok "$n: --stats says which decode path ran, the narrower bodies in lanes" ||
		bad "$n: decode_path in --stats" "$(grep -h decode_path $tmp/$n.stats $tmp/$n.kstats)"
	# the double is an sm_90 GPU, the plan's arch: both modules come from the plan's cubins, no NVRTC at start
	grep -q "^stats: gpu .*(sm_90)$" $tmp/$n.stats && ok "$n: the persistent kernel loaded from the plan's cubin" ||
		bad "$n: the plan's cubins used" "$(grep '^stats: gpu' $tmp/$n.stats)"
	grep -q "graph launches $((k - 1)) (1.00 per step)" $tmp/$n.stats && ok "$n: one graph launch per decode step" ||
		bad "$n: one graph launch per decode step" "$(grep launches $tmp/$n.stats)"
	echo "# $n: build $(cat $tmp/$n.time) s, three runs $(awk -v a=$t0 -v b=$(date +%s.%N) 'BEGIN { printf "%.1f", b - a }') s"
done

# --l2-prefetch: the bytes of each task's weights a worker asks L2 for (the double runs no prefetch; this checks
# what glmrun hands the kernel and says): by default one 128-byte line a thread of the worker, 0 none, else KiB.
n=llama-f32 prompt=$($CMP --prompt $FIX/llama)
if [ -f $tmp/$n.time ]; then
	blk=$(sed -n 's/.*decode_path: persistent ([0-9]* workers: [^,]*, \([0-9]*\) threads,.*/\1/p' $tmp/$n.stats)
	want=$(bin/glmrun $tmp/$n.plan --device cpu --tokens "$prompt" -n 4 2>/dev/null)
	for kib in default 0 96; do
		f="--l2-prefetch $kib" b=$((${kib/default/0} * 1024))
		[ $kib = default ] && f="" b=$((128 * ${blk:-0}))
		# shellcheck disable=SC2086
		got=$(gpu $n --tokens "$prompt" -n 4 --decode persistent --stats $f 2>$tmp/err)
		[ -n "$blk" ] && [ -n "$got" ] && [ "$got" = "$want" ] && grep -q "decode_path: persistent (.*, L2 prefetch $b bytes a task)" $tmp/err &&
			ok "$n: --l2-prefetch $kib: $b bytes a task, ids the CPU's" ||
			bad "$n: --l2-prefetch $kib" "ids '$got' vs '$want'; $(grep decode_path $tmp/err)"
	done
fi

# The shared-array pool's bound (persist.cuh glm_pool_at) on the double as on the GPU: with the kernels' static
# shared memory reported 1 KiB short, glmrun sizes the lanes' pools too small and the first body whose arrays
# pass its lane's bytes traps; glmrun fails in its first persistent step (only the prefill's token is out).
n=glm5-q4_k_m
if [ -f $tmp/$n.time ]; then
	got=$(SIMTCUDA_SHARED_LESS=1024 gpu $n --tokens 3,1,4 -n 2 --decode persistent 2>$tmp/err)
	rc=$?
	[ $rc != 0 ] && [ "$(echo $got | wc -w)" -le 1 ] && grep -q "simt: __trap() in a kernel" $tmp/err &&
		ok "$n: lane pools sized too small trap (a body's arrays past its lane's pool, glm_pool_at; exit $rc)" ||
		bad "$n: an undersized lane pool traps" "exit $rc, ids '$got', $(grep -v '^glmrun: note' $tmp/err | head -c 300)"
fi

# glmrun --profile on the persistent path: the task timeline of traced eager steps. Its per-launch rows (launch,
# kernel, node, tasks) equal glmc's schedule dump, every time in them is >= 0, the worker rows' tasks add up to
# the schedule's, and each worker's busy and waiting shares fit in its step.
n=llama-f32
if [ -f $tmp/$n.time ]; then
	bin/glmc dump ${args[$n]} --decode persistent --sms ${sms[$n]} --blocks-per-sm 1 --after sched 2>/dev/null |
		sed -n 's/^  launch \([0-9]*\) \([^ ]*\) (node %\([0-9]*\)): [0-9]* blocks, \([0-9]*\) tasks.*/\1 \2 \3 \4/p' >$tmp/want.rows
	total=$(bin/glmc dump ${args[$n]} --decode persistent --sms ${sms[$n]} --blocks-per-sm 1 --after sched 2>/dev/null |
		sed -n 's/^schedule T=1: [0-9]* launches as \([0-9]*\) tasks.*/\1/p')
	gpu $n --profile -n 1 --bench-prompt 4 >$tmp/prof 2>$tmp/err || bad "--profile on the persistent path" "$(head -c 300 $tmp/err)"
	awk '/^persistent timeline: /{t=1; next} /^persistent timeline per worker/{t=0} t && $1 != "launch" {print $1, $2, $3, $4}' \
		$tmp/prof >$tmp/got.rows
	neg=$(awk '/^persistent timeline: /{t=1; next} /^persistent timeline per worker/{t=0}
		t && $1 != "launch" {for (i = 5; i <= 8; i++) if ($i + 0 < 0) n++} END {print n + 0}' $tmp/prof)
	wsum=$(awk '/^persistent timeline per worker/{t=1; getline; next} /^profile:/{t=0} t {s += $3; if ($4 + $5 > 100.5) s = -1e9} END {print s + 0}' $tmp/prof)
	[ -s $tmp/want.rows ] && cmp -s $tmp/want.rows $tmp/got.rows && [ "$neg" = 0 ] && [ "$wsum" = "$total" ] &&
		ok "$n: --profile prints the persistent timeline: every launch with its tasks, waits >= 0, workers' tasks add up to $total" ||
		bad "$n: --profile's persistent timeline" "rows $(diff $tmp/want.rows $tmp/got.rows | head -c 200); negative $neg; worker tasks $wsum of $total"
fi
# A schedule for more SMs than the double's 132: one line, then the kernels (ids still the CPU's).
n=llama-f32 prompt=$($CMP --prompt $FIX/llama)
if bin/glmc compile ${args[$n]} --decode persistent --sms 200 --blocks-per-sm 1 -o $tmp/big.plan 2>$tmp/err; then
	got=$(env LD_LIBRARY_PATH=build/simtcuda GLMRUN_NCCL=/nonexistent GLM_SIMT_SO=$tmp/$n.so bin/glmrun $tmp/big.plan \
		--device cuda --tokens "$prompt" -n 4 --stats 2>$tmp/err)
	want=$(bin/glmrun $tmp/big.plan --device cpu --tokens "$prompt" -n 4 2>/dev/null)
	[ -n "$got" ] && [ "$got" = "$want" ] && [ "$(grep -c 'persistent decode kernel is not used: its schedule wants 200 SMs, this GPU has 132' $tmp/err)" = 1 ] &&
		grep -q "decode_path: kernels (persistent not used" $tmp/err && ok "a 200-SM schedule falls back to the kernels, said once" ||
		bad "a 200-SM schedule falls back" "ids '$got' vs '$want'; $(grep -v '^stats: [^d]' $tmp/err | head -c 300)"
else
	bad "a 200-SM schedule compiles" "$(head -c 300 $tmp/err)"
fi
# --decode persistent on a plan compiled without a schedule: refused in one line.
bin/glmc compile ${args[$n]} -o $tmp/plain.plan 2>$tmp/err &&
	env LD_LIBRARY_PATH=build/simtcuda GLMRUN_NCCL=/nonexistent GLM_SIMT_SO=$tmp/$n.so bin/glmrun $tmp/plain.plan --device cuda \
		--tokens 1,2 -n 2 --decode persistent >/dev/null 2>$tmp/err && bad "--decode persistent without a schedule refused" "status 0" ||
	{ grep -q "no persistent decode schedule" $tmp/err && ok "--decode persistent without a schedule refused" ||
		bad "--decode persistent without a schedule refused" "$(head -c 300 $tmp/err)"; }
