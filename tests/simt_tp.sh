#!/usr/bin/env bash
# tests/simt_tp.sh — glmrun's tensor-parallel GPU path (runtime/exec/ranks.c, cuda.c: a worker thread per rank,
# each rank's shard of the weights, the collective launches through NCCL or the one-shot P2P allreduce kernel,
# the decode graphs holding them) computing real logits on a machine without a GPU: the driver double
# build/simtcuda/libcuda.so.1 with SIMTCUDA_NDEV GPUs runs each rank's kernels on the CPU on that rank's thread
# (tests/fake/simtcuda.c: a private copy of the kernels' shared object per GPU, hence g++ -fno-gnu-unique), and
# the NCCL double build/simtcuda/libnccl.so.2 (tests/fake/simtnccl.c) really sums and gathers, in stream order,
# captured into the graphs and run at each replay. The P2P kernel's ranks spin on each other's flags from
# their own threads (simt_peer_wait). Every rank must sample the same tokens and, with --dump-logits, produce
# the same logits bit for bit (glmrun checks both each step).
# Per case, plans compiled with glmc --tp N, a prompt and 12 greedy tokens: the ids equal those of the same plan
# on --device cpu (its ranks in lockstep, exec.c) and the fixture's, the logits are within 1e-4 of both, one
# graph launch per decode step, and --stats shows which path carried the collectives. llama f32 at tp 2 (the
# allreduces by P2P, the logits allgather by NCCL; a 70-token prompt, whose prefill runs the one-shot kernel
# unfused; then GLMRUN_P2P_MAX=0: all by NCCL) and tp 4, qwen3_moe f32
# at tp 2; llama bf16 at tp 2 all by NCCL, against the CPU's --round-bf16 run; llama at tp 2 with the
# persistent decode kernel (below). Also: a shared object with STB_GNU_UNIQUE symbols is refused for a second
# GPU in one line.
# Prints "ok - NAME" / "FAIL - NAME: why" lines for tests/run.sh to count, and "# " lines with the times.
set -u
cd "$(dirname "$0")/.."
FIX=../shared/fixtures/hf
CMP=build/tools/cmplogits
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t00=$(date +%s.%N)

ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1: $2"; }
since() { awk -v a=$1 -v b=$(date +%s.%N) 'BEGIN { printf "%.1f", b - a }'; }

for f in build/simtcuda/libcuda.so.1 build/simtcuda/libnccl.so.2 build/simtcuda/libcublasLt.so.13 build/tools/simtsrc \
	bin/glmc bin/glmrun $CMP; do
	[ -f $f ] || { bad "simt tensor-parallel doubles built" "$f missing (make all)"; exit 1; }
done

# gpu NDEV SO [ENV=VAL...] -- glmrun ARGS: glmrun on NDEV simt GPUs with the NCCL double, running SO's kernels.
gpu() {
	local ndev=$1 so=$2
	shift 2
	local envs=()
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	env LD_LIBRARY_PATH=build/simtcuda SIMTCUDA_NDEV=$ndev GLMRUN_NCCL=build/simtcuda/libnccl.so.2 GLM_SIMT_SO=$so \
		"${envs[@]}" bin/glmrun "$@" --device cuda --timeout 120
}

declare -A args=([llama-tp2]="models/llama.lua --weights $FIX/llama --tp 2"
	[llama-tp4]="models/llama.lua --weights $FIX/llama --tp 4"
	[qwen3_moe-tp2]="models/qwen3_moe.lua --weights $FIX/qwen3_moe --tp 2"
	[llama-bf16-tp2]="models/llama.lua --weights $FIX/llama --dtype bf16 --tp 2"
	[llama-persist-tp2]="models/llama.lua --weights $FIX/llama --tp 2 --decode persistent --sms 3 --blocks-per-sm 1"
	[llama-persist-tp4]="models/llama.lua --weights $FIX/llama --tp 4 --decode persistent --sms 2 --blocks-per-sm 1"
	[llama-q8_0-tp2]="models/llama.lua --weights $tmp/llama-q8_0.gguf --tp 2"
	[llama-rand-tp2]="models/llama.lua --config $FIX/llama/config.json --random-weights f32 --tp 2")
cases="llama-persist-tp2 llama-persist-tp4 qwen3_moe-tp2 llama-tp4 llama-tp2 llama-bf16-tp2 llama-q8_0-tp2 llama-rand-tp2"
build/tools/mkgguf $FIX/llama $tmp/llama-q8_0.gguf --type q8_0 >/dev/null 2>$tmp/err ||
	bad "the llama fixture as Q8_0 GGUF" "$(head -c 300 $tmp/err)"

# build NAME [G++ FLAGS]: $tmp/NAME.plan and its kernels for the CPU, $tmp/NAME.so (a private copy per GPU
# needs -fno-gnu-unique); errors in $tmp/NAME.err.
build() {
	local name=$1
	shift
	bin/glmc compile ${args[$name]} -o $tmp/$name.plan 2>$tmp/$name.err &&
		build/tools/simtsrc $tmp/$name.plan >$tmp/$name.cc 2>>$tmp/$name.err &&
		${CXX:-c++} -std=c++17 -O1 -w -fPIC -shared "$@" -Itests/simt -Iops $tmp/$name.cc tests/simt/simt.cc \
			-o $tmp/$name.so 2>>$tmp/$name.err || return 1
	# a plan with a persistent decode schedule: its persistent kernel too (GLM_SIMT_PSO)
	if [ "${name#*persist}" != "$name" ]; then
		build/tools/simtsrc --persist $tmp/$name.plan >$tmp/$name.p.cc 2>>$tmp/$name.err &&
			${CXX:-c++} -std=c++17 -O1 -w -fPIC -shared "$@" -Itests/simt -Iops $tmp/$name.p.cc tests/simt/simt.cc \
				-o $tmp/$name.p.so 2>>$tmp/$name.err || return 1
	fi
	touch $tmp/$name.built
}

# two at a time (CI has two cores)
for name in $cases; do
	while [ "$(jobs -r | wc -l)" -ge 2 ]; do wait -n; done
	build $name -fno-gnu-unique &
done
wait
echo "# plans and kernels built in $(since $t00) s"

# case NAME NDEV LABEL [ENV=VAL...]: the checks above; the --stats collective line left in $tmp/NAME.ranks.
case_run() {
	local name=$1 ndev=$2 label=$3
	shift 3
	local m=${name%-*} n=12 t0=$(date +%s.%N)
	local prompt=$($CMP --prompt $FIX/$m) want=$($CMP --greedy $FIX/$m)
	local got cpu r
	got=$(gpu $ndev $tmp/$name.so "$@" -- $tmp/$name.plan --tokens "$prompt" -n $n --stats --dump-logits $tmp/$label.g \
		2>$tmp/$label.stats) || { bad "$label: glmrun --device cuda on $ndev simt GPUs" "$(grep -v stats: $tmp/$label.stats | head -c 400)"; return; }
	cpu=$(bin/glmrun $tmp/$name.plan --device cpu --tokens "$prompt" -n $n --dump-logits $tmp/$label.c 2>$tmp/err)
	[ "$got" = "$cpu" ] && [ "$got" = "$want" ] && ok "$label: greedy ids equal the CPU ranks' and the fixture's" ||
		bad "$label: greedy ids" "cuda '$got', cpu '$cpu', fixture '$want'"
	r=$($CMP --pair $tmp/$label.g $tmp/$label.c 1e-4 2>&1) && ok "$label: logits vs --device cpu: $r" ||
		bad "$label: logits vs --device cpu" "$r"
	r=$($CMP $tmp/$label.g $FIX/$m 1e-4 2>&1) && ok "$label: logits vs the fixture: $r" || bad "$label: logits vs the fixture" "$r"
	grep -q "graph launches $((n - 1)) (1.00 per step)" $tmp/$label.stats &&
		ok "$label: one graph launch per decode step (its collectives captured, run at each replay)" ||
		bad "$label: one graph launch per decode step" "$(grep launches $tmp/$label.stats)"
	grep "stats: ranks" $tmp/$label.stats >$tmp/$label.ranks
	echo "# $label: $(since $t0) s"
}

# "rank 0 made N NCCL calls and M P2P collectives": N and M of LABEL's run.
calls() { sed -n 's/.*rank 0 made \([0-9]*\) NCCL calls and \([0-9]*\) P2P collectives.*/\1 \2/p' $tmp/$1.ranks; }

if [ -f $tmp/llama-tp2.built ]; then
	case_run llama-tp2 2 llama-tp2
	# 12 tokens: the prefill and the decode graph's capture each enqueue 4 allreduces (64 floats a token:
	# under GLMRUN_P2P_MAX's 256 KiB, so the P2P kernel) and the logits allgather (NCCL)
	c=$(calls llama-tp2)
	grep -q "ranks 2 (GPUs 0..1), NCCL 2.99.2 from build/simtcuda/libnccl.so.2, peer access 2 of 2 pairs" $tmp/llama-tp2.ranks &&
		[ "$c" = "2 8" ] && ok "llama-tp2: the allreduces by the P2P kernel, the allgather by the NCCL double" ||
		bad "llama-tp2: collective routing" "$(cat $tmp/llama-tp2.ranks)"
	# those 4 allreduces a step are fused into the next kernel (k_add_rmsnorm_ar does the exchange) for steps of
	# at most 64 rows; a 70-token prompt's go through the one-shot kernel itself (k_p2p_allreduce, 3 blocks)
	t0=$(date +%s.%N) p=$(for i in $(seq 1 70); do echo $((i * 37 % 512)); done | paste -sd,) # the vocabulary is 512
	r=
	if gpu 2 $tmp/llama-tp2.so -- $tmp/llama-tp2.plan --tokens $p -n 3 --stats --dump-logits $tmp/p70g >$tmp/p70g.ids \
		2>$tmp/p70.stats && bin/glmrun $tmp/llama-tp2.plan --device cpu --tokens $p -n 3 --dump-logits $tmp/p70c \
		>$tmp/p70c.ids 2>$tmp/err && cmp -s $tmp/p70g.ids $tmp/p70c.ids && r=$($CMP --pair $tmp/p70g $tmp/p70c 1e-4 2>&1) &&
		grep -q "rank 0 made 2 NCCL calls and 8 P2P collectives" $tmp/p70.stats; then
		ok "llama-tp2: a 70-token prompt (its allreduces by the unfused P2P kernel): ids equal the CPU's, logits $r"
	else
		bad "llama-tp2: a 70-token prompt" "$(grep -v stats: $tmp/p70.stats | head -c 300) ids $(cat $tmp/p70g.ids) vs $(cat $tmp/p70c.ids) $r $(grep 'rank 0 made' $tmp/p70.stats)"
	fi
	echo "# llama-tp2, 70 tokens: $(since $t0) s"
	case_run llama-tp2 2 llama-tp2-nccl GLMRUN_P2P_MAX=0
	c=$(calls llama-tp2-nccl)
	[ "$c" = "10 0" ] && ok "llama-tp2-nccl: GLMRUN_P2P_MAX=0: every collective by the NCCL double" ||
		bad "llama-tp2-nccl: collective routing" "$(cat $tmp/llama-tp2-nccl.ranks)"
	# the same plan's kernels built without -fno-gnu-unique: GPU 1's copy would share their statics
	t0=$(date +%s.%N)
	if ${CXX:-c++} -std=c++17 -O1 -w -fPIC -shared -Itests/simt -Iops $tmp/llama-tp2.cc tests/simt/simt.cc -o $tmp/uniq.so \
		2>$tmp/err; then
		gpu 2 $tmp/uniq.so -- $tmp/llama-tp2.plan --tokens 1,2 -n 2 >/dev/null 2>$tmp/err &&
			bad "STB_GNU_UNIQUE kernels refused for a second GPU" "status 0" ||
			{ grep -q "simtcuda: .*uniq.so: has STB_GNU_UNIQUE symbols, shared by every copy; GPU 1 needs its own copy of it (build it with g++ -fno-gnu-unique)" $tmp/err &&
				ok "STB_GNU_UNIQUE kernels refused for a second GPU" || bad "STB_GNU_UNIQUE kernels refused for a second GPU" "$(cat $tmp/err)"; }
	else
		bad "the kernels built without -fno-gnu-unique" "$(head -c 300 $tmp/err)"
	fi
	echo "# the refusal: $(since $t0) s"
else
	bad "llama-tp2: plan and kernels built" "$(grep -v '^glmc: wrote' $tmp/llama-tp2.err | head -c 400)"
fi

if [ -f $tmp/qwen3_moe-tp2.built ]; then
	case_run qwen3_moe-tp2 2 qwen3_moe-tp2
	c=$(calls qwen3_moe-tp2)
	[ "${c#* }" -gt 0 ] 2>/dev/null && [ "${c% *}" -gt 0 ] && ok "qwen3_moe-tp2: collectives by both the P2P kernel and NCCL ($c)" ||
		bad "qwen3_moe-tp2: collective routing" "$(cat $tmp/qwen3_moe-tp2.ranks)"
else
	bad "qwen3_moe-tp2: plan and kernels built" "$(grep -v '^glmc: wrote' $tmp/qwen3_moe-tp2.err | head -c 400)"
fi

if [ -f $tmp/llama-tp4.built ]; then
	case_run llama-tp4 4 llama-tp4
	grep -q "ranks 4 (GPUs 0..3), NCCL 2.99.2 from build/simtcuda/libnccl.so.2, peer access 12 of 12 pairs" $tmp/llama-tp4.ranks &&
		ok "llama-tp4: four ranks, peer access between every pair" || bad "llama-tp4: ranks" "$(cat $tmp/llama-tp4.ranks)"
else
	bad "llama-tp4: plan and kernels built" "$(grep -v '^glmc: wrote' $tmp/llama-tp4.err | head -c 400)"
fi
# bf16 with every collective through the NCCL double (its bf16 sums: in float, rounded once), fed the tokens the
# CPU's --round-bf16 run picked (a near-tie may flip either way, as in tests/simt_gpu.sh): logits within 2e-2.
if [ -f $tmp/llama-bf16-tp2.built ]; then
	t0=$(date +%s.%N) prompt=$($CMP --prompt $FIX/llama)
	cpu=$(bin/glmrun $tmp/llama-bf16-tp2.plan --device cpu --round-bf16 --tokens "$prompt" -n 12 --dump-logits $tmp/bf.c 2>$tmp/err)
	if gpu 2 $tmp/llama-bf16-tp2.so GLMRUN_P2P_MAX=0 -- $tmp/llama-bf16-tp2.plan --tokens "$prompt" --force "$(echo $cpu | tr ' ' ,)" 		--stats --dump-logits $tmp/bf.g >/dev/null 2>$tmp/bf.stats; then
		r=$($CMP --pair $tmp/bf.g $tmp/bf.c 2e-2 2>&1) && grep -q "rank 0 made 10 NCCL calls and 0 P2P" $tmp/bf.stats &&
			ok "llama-bf16-tp2: GLMRUN_P2P_MAX=0, logits vs --device cpu --round-bf16 (its tokens forced): $r" ||
			bad "llama-bf16-tp2: logits vs --device cpu --round-bf16" "$r $(grep 'rank 0 made' $tmp/bf.stats)"
	else
		bad "llama-bf16-tp2: glmrun --device cuda on 2 simt GPUs" "$(grep -v stats: $tmp/bf.stats | head -c 400)"
	fi
	echo "# llama-bf16-tp2: $(since $t0) s"
else
	bad "llama-bf16-tp2: plan and kernels built" "$(grep -v '^glmc: wrote' $tmp/llama-bf16-tp2.err | head -c 400)"
fi
# The persistent decode kernel at tp 2 (glmc --decode persistent, 3 workers). With the P2P exchange the
# whole step is one launch of it, its 4 allreduces done inside the residual norms' tasks and the logits'
# allgather a task (runtime/core/sched.c): ids and logits against the CPU ranks, and logits equal to
# --decode kernels' bit for bit (the kernel path does the same allreduces inside the same norm kernel, and
# its NCCL allgather moves the same bytes). With every collective by NCCL (GLMRUN_P2P_MAX=0) the kernel is
# launched a segment at a time around them, and again equals --decode kernels bit for bit.
if [ -f $tmp/llama-persist-tp2.built ]; then
	t0=$(date +%s.%N) prompt=$($CMP --prompt $FIX/llama) pl=$tmp/llama-persist-tp2.plan
	pgpu() { gpu 2 $tmp/llama-persist-tp2.so GLM_SIMT_PSO=$tmp/llama-persist-tp2.p.so "$@"; }
	cpu=$(bin/glmrun $pl --device cpu --tokens "$prompt" -n 5 --dump-logits $tmp/pp.c 2>$tmp/err)
	if got=$(pgpu -- $pl --decode persistent --tokens "$prompt" -n 5 --stats --dump-logits $tmp/pp.g 2>$tmp/pp.stats); then
		r=$($CMP --pair $tmp/pp.g $tmp/pp.c 1e-4 2>&1) && [ "$got" = "$cpu" ] &&
			grep -q "decode_path: persistent (3 workers: .*; 5 collectives as P2P tasks inside it)" $tmp/pp.stats &&
			grep -q "graph launches 4 (1.00 per step), kernels per step 2" $tmp/pp.stats &&
			grep -q "rank 0 made 1 NCCL calls and 9 P2P" $tmp/pp.stats &&
			ok "llama-persist-tp2: --decode persistent, one launch a step with its 5 collectives as P2P tasks: ids equal the CPU's, logits $r" ||
			bad "llama-persist-tp2: --decode persistent" "ids '$got' vs '$cpu' $r $(grep -hE 'decode_path|launches|made' $tmp/pp.stats)"
		pgpu -- $pl --decode kernels --tokens "$prompt" -n 5 --dump-logits $tmp/pp.k >/dev/null 2>$tmp/pp.k.stats &&
			cmp -s $tmp/pp.g $tmp/pp.k && ok "llama-persist-tp2: P2P tasks: logits equal --decode kernels' bit for bit" ||
			bad "llama-persist-tp2: P2P tasks vs --decode kernels" "$($CMP --pair $tmp/pp.g $tmp/pp.k 0 2>&1) $(grep -v stats: $tmp/pp.k.stats | head -c 300)"
		# GLMRUN_P2P_MAX below the logits' 2048 bytes: the mailbox is still sized for the step's tasks (the
		# prefill's larger allreduces go through NCCL, so the logits are held to the CPU's, not to the run above)
		got=$(pgpu GLMRUN_P2P_MAX=1000 -- $pl --decode persistent --tokens "$prompt" -n 5 --stats --dump-logits $tmp/pp.m \
			2>$tmp/pp.m.stats) && [ "$got" = "$cpu" ] && r=$($CMP --pair $tmp/pp.m $tmp/pp.c 1e-4 2>&1) &&
			grep -q "decode_path: persistent (.*; 5 collectives as P2P tasks inside it)" $tmp/pp.m.stats &&
			ok "llama-persist-tp2: GLMRUN_P2P_MAX=1000: the mailbox holds the 2048-byte allgather task, one launch, logits $r" ||
			bad "llama-persist-tp2: GLMRUN_P2P_MAX=1000" "ids '$got' vs '$cpu' $r $(grep -hv 'stats: [^d]' $tmp/pp.m.stats | head -c 400)"
	else
		bad "llama-persist-tp2: --decode persistent on 2 simt GPUs" "$(grep -v stats: $tmp/pp.stats | head -c 400)"
	fi
	for d in persistent kernels; do
		pgpu GLMRUN_P2P_MAX=0 -- $pl --decode $d --tokens "$prompt" -n 5 --stats --dump-logits $tmp/pp.$d >/dev/null 2>$tmp/pp.$d.stats ||
			bad "llama-persist-tp2: --decode $d, GLMRUN_P2P_MAX=0" "$(grep -v stats: $tmp/pp.$d.stats | head -c 400)"
	done
	cmp -s $tmp/pp.persistent $tmp/pp.kernels && grep -q "decode_path: persistent" $tmp/pp.persistent.stats &&
		ok "llama-persist-tp2: GLMRUN_P2P_MAX=0: logits equal --decode kernels' bit for bit" ||
		bad "llama-persist-tp2: GLMRUN_P2P_MAX=0, persistent vs kernels" "$($CMP --pair $tmp/pp.persistent $tmp/pp.kernels 0 2>&1)"
	grep -q "decode_path: persistent (.*; 6 launches a step around 5 collectives)" $tmp/pp.persistent.stats &&
		ok "llama-persist-tp2: GLMRUN_P2P_MAX=0: 6 launches a step around the collectives" ||
		bad "llama-persist-tp2: GLMRUN_P2P_MAX=0: segments" "$(grep decode_path $tmp/pp.persistent.stats)"
	echo "# llama-persist-tp2: $(since $t0) s"
else
	bad "llama-persist-tp2: plan and kernels built" "$(grep -v '^glmc: wrote' $tmp/llama-persist-tp2.err | head -c 400)"
fi
# At tp 4 the fixture's allreduces are not all fused into a norm (k_add_rmsnorm_ar keeps whole rows): the others
# run as k_p2p_allreduce tasks (kernels.cuh glm_p_allreduce), the kernel path launching the same kernel.
if [ -f $tmp/llama-persist-tp4.built ]; then
	t0=$(date +%s.%N) prompt=$($CMP --prompt $FIX/llama) pl=$tmp/llama-persist-tp4.plan
	pgpu() { gpu 4 $tmp/llama-persist-tp4.so GLM_SIMT_PSO=$tmp/llama-persist-tp4.p.so "$@"; }
	cpu=$(bin/glmrun $pl --device cpu --tokens "$prompt" -n 4 2>$tmp/err)
	n=$(bin/glmc explain $pl | sed -n 's/.* \([0-9]*\) collectives, as tasks where P2P.*/\1/p')
	if got=$(pgpu -- $pl --decode persistent --tokens "$prompt" -n 4 --stats --dump-logits $tmp/p4.g 2>$tmp/p4.stats) &&
		pgpu -- $pl --decode kernels --tokens "$prompt" -n 4 --dump-logits $tmp/p4.k >/dev/null 2>$tmp/p4.k.stats; then
		[ "$got" = "$cpu" ] && cmp -s $tmp/p4.g $tmp/p4.k && [ -n "$n" ] &&
			grep -q "decode_path: persistent (2 workers: .*; $n collectives as P2P tasks inside it)" $tmp/p4.stats &&
			ok "llama-persist-tp4: one launch a step, $n collectives as P2P tasks: ids equal the CPU's, logits equal --decode kernels' bit for bit" ||
			bad "llama-persist-tp4" "ids '$got' vs '$cpu' $($CMP --pair $tmp/p4.g $tmp/p4.k 0 2>&1) $(grep -h decode_path $tmp/p4.stats)"
	else
		bad "llama-persist-tp4: on 4 simt GPUs" "$(grep -hv stats: $tmp/p4.stats $tmp/p4.k.stats | head -c 400)"
	fi
	echo "# llama-persist-tp4: $(since $t0) s"
else
	bad "llama-persist-tp4: plan and kernels built" "$(grep -v '^glmc: wrote' $tmp/llama-persist-tp4.err | head -c 400)"
fi
echo "# tests/simt_tp.sh: $(since $t00) s"

# Each rank's own part of the weights that stay as generated or GGUF blocks on the GPU: Q8_0 blocks kept
# (read through weights_load_raw) and random weights generated in place, at tp 2. Until 2026-12-07 glmrun
# gave every rank the first part of each such tensor (rank 0 of 1), so a quantized GGUF on several GPUs
# produced garbage with status 0. Ids equal the CPU ranks' (whose loader splits by rank), logits within 1e-4.
for name in llama-q8_0-tp2 llama-rand-tp2; do
	[ -f $tmp/$name.built ] || { bad "$name: plan and kernels built" "$(head -c 300 $tmp/$name.err)"; continue; }
	p=$(for i in $(seq 1 9); do echo $((i * 37 % 512)); done | paste -sd,)
	if gpu 2 $tmp/$name.so -- $tmp/$name.plan --tokens $p -n 6 --dump-logits $tmp/$name.g >$tmp/$name.gids 2>$tmp/$name.stats &&
		bin/glmrun $tmp/$name.plan --device cpu --tokens $p -n 6 --dump-logits $tmp/$name.c >$tmp/$name.cids 2>$tmp/err &&
		cmp -s $tmp/$name.gids $tmp/$name.cids && r=$($CMP --pair $tmp/$name.g $tmp/$name.c 1e-4 2>&1); then
		ok "$name: each rank's part of the weights: ids equal the CPU ranks', logits $r"
	else
		bad "$name: each rank's part of the weights" "$(grep -v 'stats:\|RANDOM' $tmp/$name.stats | head -c 300) ids $(cat $tmp/$name.gids) vs $(cat $tmp/$name.cids) ${r:-}"
	fi
done
