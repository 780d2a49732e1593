#!/usr/bin/env bash
# tests/ranks.sh — glmrun's multi-GPU orchestration (runtime/exec/ranks.c, crew.c, the collective launches of
# cuda.c) on CI, through test doubles of the driver and NCCL (tests/fake/: they run no kernels, so no
# number computed here means anything; the GPU half is tests/gpu/tp.sh). Checked: a tp 2 plan runs on two
# "GPUs" in lockstep with one graph launch per step; the collectives are enqueued in step order and each
# allreduce takes the P2P kernel or NCCL as GLMRUN_P2P_MAX and peer access decide; refusals (too few GPUs,
# no NCCL for tp > 1) are one line; tp 1 runs with or without NCCL; the watchdog turns a stalled rank
# (the GLMRUN_TEST_STALL_RANK hook) into a non-zero exit that names it, within the timeout; too little GPU
# memory (FAKECUDA_FREE_KIB) is one line naming how many positions fit, and that -c then runs; --chat on
# the GPU takes the model's window, or the most positions that fit (said once); a tp 2 plan's persistent decode
# kernel runs as one launch a segment with the collectives between them.
# Prints "ok - NAME" / "FAIL - NAME: why" lines for tests/run.sh to count.
set -u
cd "$(dirname "$0")/.."
FIX=../shared/fixtures/hf
CMP=build/tools/cmplogits
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1: $2"; }

# fake [ENV=VAL...] -- glmrun ARGS: glmrun on the test doubles.
fake() {
	env LD_LIBRARY_PATH=build/fake GLMRUN_NCCL=build/fake/libnccl.so.2 "$@"
}

for f in build/fake/libcuda.so.1 build/fake/libnccl.so.2; do
	[ -f $f ] || { bad "test doubles built" "$f missing (make all)"; exit 1; }
done
bin/glmc compile models/llama.lua --weights $FIX/llama --tp 2 -o $tmp/tp2.plan 2>/dev/null &&
	bin/glmc compile models/llama.lua --weights $FIX/llama -o $tmp/tp1.plan 2>/dev/null ||
	{ bad "compile the llama plans" "glmc failed"; exit 1; }
prompt=$($CMP --prompt $FIX/llama)
np=$(echo "$prompt" | tr ',' ' ' | wc -w)

# tp 2 on two GPUs: 12 tokens, one graph launch per step; per step 4 allreduces (hidden 64 floats a
# token, far under 256 KiB: the P2P kernel) and the logits allgather (NCCL), enqueued once by the
# prefill and once by the decode graph's capture.
out=$(fake bin/glmrun $tmp/tp2.plan --device cuda --tokens "$prompt" -n 12 --stats --dump-logits $tmp/l.f32 2>$tmp/err)
rc=$?
[ $rc = 0 ] && [ "$(echo $out | wc -w)" = 12 ] && ok "tp 2 runs on two GPUs (12 tokens)" || bad "tp 2 runs on two GPUs" "status $rc: $(head -c 300 $tmp/err)"
grep -q "stats: ranks 2 (GPUs 0..1), NCCL 2.99.1 from build/fake/libnccl.so.2, peer access 2 of 2 pairs, 5 collectives per step; rank 0 made 2 NCCL calls and 8 P2P collectives" $tmp/err &&
	ok "tp 2: allreduces through the P2P kernel, the allgather through NCCL" || bad "tp 2: collective routing" "$(grep ranks $tmp/err)"
grep -q "graph launches 11 (1.00 per step)" $tmp/err && ok "tp 2: one graph launch per decode step" ||
	bad "tp 2: one graph launch per decode step" "$(grep launches $tmp/err)"
sz=$(stat -c %s $tmp/l.f32)
[ "$sz" = $(((np + 11) * 512 * 4)) ] && ok "tp 2: --dump-logits writes every row (ranks' logits compared each step)" ||
	bad "tp 2: --dump-logits" "$sz bytes"
fake GLMRUN_P2P_MAX=0 bin/glmrun $tmp/tp2.plan --device cuda --tokens "$prompt" -n 4 --stats >/dev/null 2>$tmp/err
grep -q "rank 0 made 10 NCCL calls and 0 P2P collectives (up to 0 bytes)" $tmp/err && ok "GLMRUN_P2P_MAX=0: every collective through NCCL" ||
	bad "GLMRUN_P2P_MAX=0" "$(grep ranks $tmp/err)"
# The decode graph holds NCCL calls: it must be destroyed before the communicator (the real NCCL waits
# forever otherwise; an H200 pair showed a 60 s watchdog warning at every exit before this was fixed).
grep -qi "warning\|ncclCommDestroy" $tmp/err && bad "clean-up: graphs destroyed before the communicators" "$(grep -i 'warning\|destroy' $tmp/err)" ||
	ok "clean-up: graphs destroyed before the communicators (no warning at exit)"
fake GLMRUN_P2P_MAX=1000 bin/glmrun $tmp/tp2.plan --device cuda --tokens "$prompt" -n 4 --stats >/dev/null 2>$tmp/err
grep -q "rank 0 made 6 NCCL calls and 4 P2P collectives (up to 1000 bytes)" $tmp/err &&
	ok "GLMRUN_P2P_MAX=1000: the decode allreduces (256 bytes) by P2P, the prefill's ($((np * 256)) bytes) by NCCL" ||
	bad "GLMRUN_P2P_MAX=1000" "$(grep ranks $tmp/err)"
fake FAKECUDA_NO_PEER=1 bin/glmrun $tmp/tp2.plan --device cuda --tokens "$prompt" -n 4 --stats >/dev/null 2>$tmp/err
grep -q "note: no peer access between GPUs 0->1, 1->0" $tmp/err && grep -q "peer access 0 of 2 pairs.*0 P2P collectives" $tmp/err &&
	ok "no peer access: said once, and NCCL carries every collective" || bad "no peer access" "$(cat $tmp/err)"

# expect_fail NAME SUBSTRING CMD...: non-zero, one line on stderr containing SUBSTRING.
expect_fail() {
	local name=$1 want=$2
	shift 2
	"$@" >$tmp/out 2>$tmp/err
	local rc=$?
	if [ $rc = 0 ] || [ $rc -ge 128 ] || ! grep -qF -- "$want" $tmp/err || [ "$(wc -l <$tmp/err)" != 1 ]; then
		bad "$name" "status $rc: $(head -c 300 $tmp/err)"
	else
		ok "$name"
	fi
}
expect_fail "tp 2 on one GPU refused naming both numbers" "partitioned for 2 GPUs (tp 2) but 1 GPU is visible" \
	fake FAKECUDA_NDEV=1 bin/glmrun $tmp/tp2.plan --device cuda --tokens 1,2
expect_fail "tp 2 without NCCL refused" "the plan is partitioned for 2 GPUs and needs NCCL: NCCL: GLMRUN_NCCL=/nonexistent" \
	fake GLMRUN_NCCL=/nonexistent bin/glmrun $tmp/tp2.plan --device cuda --tokens 1,2

# tp 1 goes through the same workers: a communicator of one rank, or none when NCCL is missing.
fake bin/glmrun $tmp/tp1.plan --device cuda --tokens "$prompt" -n 4 --stats >/dev/null 2>$tmp/err &&
	grep -q "stats: ranks 1 (GPUs 0..0), NCCL 2.99.1" $tmp/err && ok "tp 1 through the worker path with a one-rank communicator" ||
	bad "tp 1 with NCCL" "$(cat $tmp/err)"
fake GLMRUN_NCCL=/nonexistent bin/glmrun $tmp/tp1.plan --device cuda --tokens "$prompt" -n 4 --stats >/dev/null 2>$tmp/err &&
	grep -q "stats: ranks 1, no NCCL (NCCL: GLMRUN_NCCL=/nonexistent cannot be loaded" $tmp/err && ok "tp 1 runs without NCCL and says so" ||
	bad "tp 1 without NCCL" "$(cat $tmp/err)"

# --force on the GPU path: each rank's decode step is fed the forced token (gpu_feed into the step
# buffer) before its graph launch; the doubles compute nothing, so only the path is checked here: the
# forced ids printed, one graph launch per step, on one and on two ranks.
for tp in 1 2; do
	out=$(fake bin/glmrun $tmp/tp$tp.plan --device cuda --tokens "$prompt" --force 5,6,7,8 --stats 2>$tmp/err)
	[ "$out" = "5 6 7 8" ] && grep -q "graph launches 3 (1.00 per step)" $tmp/err &&
		ok "--force on $tp GPU(s): the forced ids, one graph launch per decode step" ||
		bad "--force on $tp GPU(s)" "'$out' $(grep -v stats: $tmp/err | head -c 300) $(grep launches $tmp/err)"
done

# The watchdog: a stalled rank ends glmrun within the timeout, by name; the others are not blamed.
stall() { # NAME WANT PLAN STALL_RANK STALL_STEP
	local start=$(date +%s%N)
	fake GLMRUN_TEST_STALL_RANK=$4 GLMRUN_TEST_STALL_STEP=$5 timeout 30 bin/glmrun $3 --device cuda --tokens "$prompt" -n 4 \
		--timeout 0.5 >$tmp/out 2>$tmp/err
	local rc=$? ms=$((($(date +%s%N) - start) / 1000000))
	if [ $rc = 1 ] && grep -qF -- "$2" $tmp/err && [ "$(wc -l <$tmp/err)" = 1 ] && [ $ms -lt 15000 ]; then
		ok "$1 (exit 1 after $ms ms)"
	else
		bad "$1" "status $rc after $ms ms: $(head -c 300 $tmp/err)"
	fi
}
stall "tp 2: rank 1 stalled at decode step 1 is named" \
	"watchdog: decode step 1 did not finish within 0.5 s on 1 of 2 ranks: rank 1 (stalled on purpose by the test hook GLMRUN_TEST_STALL_RANK)" \
	$tmp/tp2.plan 1 1
stall "tp 2: rank 0 stalled before the prefill is named" "watchdog: prefill did not finish within 0.5 s on 1 of 2 ranks: rank 0 (stalled" \
	$tmp/tp2.plan 0 0
stall "tp 2: rank 1 stalled at decode step 3 is named" "watchdog: decode step 3 did not finish within 0.5 s on 1 of 2 ranks: rank 1 (stalled" \
	$tmp/tp2.plan 1 3
stall "tp 1: the only rank stalled is named" "watchdog: decode step 1 did not finish within 0.5 s on 1 of 1 rank: rank 0 (stalled" \
	$tmp/tp1.plan 0 1
fake GLMRUN_TEST_STALL_RANK=1 GLMRUN_TEST_STALL_STEP=3 timeout 30 bin/glmrun $tmp/tp2.plan --device cuda --tokens "$prompt" -n 6 \
	--timeout 0.5 >$tmp/out 2>/dev/null
[ "$(wc -w <$tmp/out)" = 3 ] && ok "the tokens before the stall are printed (3 of 6)" || bad "tokens before the stall" "'$(cat $tmp/out)'"

# --bench on a tp 2 plan drives the two ranks (the doubles run no kernels, so only the path and the
# block are checked, not the times); --profile times every rank's step, collectives included (a row per
# allreduce, issue 10's share of the step); --batch is refused there in one line.
if fake bin/glmrun $tmp/tp2.plan --device cuda --bench -n 4 --bench-prompt 8 >$tmp/bench 2>$tmp/err &&
	grep -q "^tp: 2 GPUs" $tmp/bench && grep -q "^graph_launches_per_step: 1.00" $tmp/bench; then
	ok "--bench on a tp 2 plan runs both ranks (tp line, 1.00 launches per step)"
else
	bad "--bench on a tp 2 plan" "$(head -c 300 $tmp/err) $(grep -E '^(tp|graph)' $tmp/bench)"
fi
if fake timeout 60 bin/glmrun $tmp/tp2.plan --device cuda --profile -n 4 --bench-prompt 8 >$tmp/prof 2>$tmp/err &&
	[ "$(grep -cE ' allreduce +allreduce %' $tmp/prof)" -ge 4 ] && grep -qE '^  allreduce +[0-9]+ ' $tmp/prof &&
	grep -qE '^  \([0-9]+ allreduces are done inside the next kernel' $tmp/prof && ! grep -q nan $tmp/prof; then
	ok "--profile on a tp 2 plan times both ranks' steps, a row per allreduce (and says which the sums do)"
else
	bad "--profile on a tp 2 plan" "$(head -c 300 $tmp/err) $(grep -E '^profile|allreduce' $tmp/prof | head -5)"
fi
# Batches on tp 2 (the engine's rows on every rank): --bench --batch and --batch with three prompts of
# different lengths, one sequence clipped by -n; each step one graph launch of its bucket.
fake bin/glmrun $tmp/tp2.plan --device cuda --bench --batch 2 -n 4 >$tmp/out 2>$tmp/err
[ $? = 0 ] && grep -q "^batch: 2" $tmp/out && grep -q "^tp: 2 GPUs" $tmp/out && grep -q "^graph_launches_per_step: 1.00" $tmp/out &&
	ok "--bench --batch 2 on a tp 2 plan" || bad "--bench --batch 2 on a tp 2 plan" "$(head -c 300 $tmp/err)"
fake bin/glmrun $tmp/tp2.plan --device cuda --tokens 1,2,3 --tokens 4,5,6,7,8 --tokens 9 -n 5 --stats >$tmp/out 2>$tmp/err
rc=$?
[ $rc = 0 ] && [ "$(wc -l <$tmp/out)" = 3 ] && [ "$(awk '{print NF}' $tmp/out | tr '\n' ' ')" = "5 5 5 " ] &&
	grep -q "graph launches 4 (1.00 per step)" $tmp/err && ok "--batch 3 on a tp 2 plan: three answers, one launch a step" ||
	bad "--batch 3 on a tp 2 plan" "status $rc: $(head -c 300 $tmp/err) $(cat $tmp/out)"
# Out of GPU memory (the driver double's free memory set by FAKECUDA_FREE_KIB): with nothing to spare the
# message says the cache has no room; with a little more it names how many positions fit, and that -c runs.
fake FAKECUDA_FREE_KIB=262144 bin/glmrun $tmp/tp1.plan --device cuda --tokens "$prompt" -n 2 -c 512 >/dev/null 2>$tmp/err
rc=$?
[ $rc != 0 ] && [ "$(wc -l <$tmp/err)" = 1 ] && grep -q "not enough GPU memory: .* leave no room for a KV cache" $tmp/err &&
	ok "out of GPU memory: one line, no room for a cache" || bad "out of GPU memory, no room" "status $rc: $(head -c 300 $tmp/err)"
fit=
for kib in $(seq 262144 16 270336); do
	fake FAKECUDA_FREE_KIB=$kib bin/glmrun $tmp/tp1.plan --device cuda --tokens "$prompt" -n 2 -c 512 >/dev/null 2>$tmp/err && break
	fit=$(sed -n 's/.*at most \([0-9]*\) positions fit (-c \1).*/\1/p' $tmp/err)
	[ -n "$fit" ] && [ "$fit" -ge $((np + 2)) ] && [ "$fit" -lt 512 ] && break
	fit=
done
if [ -n "$fit" ] && fake FAKECUDA_FREE_KIB=$kib bin/glmrun $tmp/tp1.plan --device cuda --tokens "$prompt" -n 2 -c $fit >/dev/null 2>$tmp/err; then
	ok "out of GPU memory at -c 512: 'at most $fit positions fit (-c $fit)', and -c $fit runs with that memory"
else
	bad "out of GPU memory names what fits" "fit '$fit' at $kib KiB: $(head -c 300 $tmp/err)"
fi
# --chat on the GPU takes the model's window (4096 positions here: the llama fixture with a chat vocabulary
# and max_position_embeddings 4096) when it fits, else the most positions that fit (at least 512), said once.
mkdir -p $tmp/w4k && cp $FIX/llama/* $tmp/w4k/ &&
	python3 -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['max_position_embeddings']=4096; json.dump(c, open(p, 'w'))" $tmp/w4k/config.json &&
	build/tools/mkgguf $tmp/w4k $tmp/w4k.gguf >/dev/null &&
	build/tools/addvocab $tmp/w4k.gguf ../shared/fixtures/vocab/ggml-vocab-gpt-2.gguf 512 $tmp/w4kc.gguf --special "<|im_start|>" \
		--special "<|im_end|>" --chat-template "$(cat tests/data/templates/qwen3.jinja)" --eos "<|im_end|>" >/dev/null &&
	bin/glmc compile models/llama.lua --weights $tmp/w4kc.gguf -o $tmp/w4k.plan 2>/dev/null || bad "the 4096-position chat model" "setup failed"
echo hi | fake bin/glmrun $tmp/w4k.plan --chat --device cuda -n 2 --stats >/dev/null 2>$tmp/err
[ $? = 0 ] && ! grep -q "chat context" $tmp/err && grep -q "chat turn 1: answer" $tmp/err &&
	ok "--chat on the GPU: the whole window when it fits" || bad "--chat on the GPU, window fits" "$(head -c 300 $tmp/err)"
# free memory for half the window's cache: what the message says the plan needs, less half its KV cache
need=$(echo hi | fake FAKECUDA_FREE_KIB=262144 bin/glmrun $tmp/w4k.plan --chat --device cuda -n 2 2>&1 >/dev/null |
	sed -n 's/.*the plan needs \([0-9.]*\) MiB (.*KV cache \([0-9.]*\) MiB for 1 sequence of 4096 positions).*/\1 \2/p')
kib=$(echo "$need" | awk '{ printf "%d", (256 + $1 - $2 / 2) * 1024 }')
echo hi | fake FAKECUDA_FREE_KIB=$kib bin/glmrun $tmp/w4k.plan --chat --device cuda -n 2 --stats >/dev/null 2>$tmp/err
rc=$?
got=$(sed -n "s/^glmrun: chat context \([0-9]*\) positions: the model's window of 4096 does not fit in GPU memory$/\1/p" $tmp/err)
[ $rc = 0 ] && [ -n "$got" ] && [ "$got" -ge 512 ] && [ "$got" -lt 4096 ] && grep -q "chat turn 1: answer" $tmp/err &&
	ok "--chat on the GPU: $got of the window's 4096 positions fit in $kib KiB, said once, the chat runs" ||
	bad "--chat on the GPU, window too large" "need '$need' kib $kib status $rc: $(head -c 300 $tmp/err)"

# The persistent decode kernel at tp 2 (issue 47), a plan for the fake's one SM: with the P2P exchange the
# step is one launch of it, its collectives tasks inside (runtime/core/sched.c); with GLMRUN_P2P_MAX=0 the
# kernel is launched a segment at a time, the NCCL calls between them in the same decode graph, the same
# calls as the kernel path's. One graph launch a step either way, the ranks in lockstep.
if bin/glmc compile models/llama.lua --weights $FIX/llama --tp 2 --decode persistent --sms 1 -o $tmp/tp2p.plan 2>$tmp/err; then
	for d in persistent kernels persistent.nccl kernels.nccl; do
		fake $([ "${d#*.}" = nccl ] && echo GLMRUN_P2P_MAX=0) bin/glmrun $tmp/tp2p.plan --device cuda \
			--tokens "$prompt" -n 12 --stats --decode ${d%.nccl} >$tmp/$d.ids 2>$tmp/$d.err
		echo "rc=$?" >>$tmp/$d.ids
	done
	calls() { sed -n 's/.*rank 0 made \([0-9]*\) NCCL calls and \([0-9]*\) P2P collectives.*/\1 \2/p' $1; }
	grep -q "rc=0" $tmp/persistent.ids && grep -q "rc=0" $tmp/kernels.ids &&
		grep -q "decode_path: persistent (1 workers: .*; 5 collectives as P2P tasks inside it)" $tmp/persistent.err &&
		grep -q "graph launches 11 (1.00 per step), kernels per step 2," $tmp/persistent.err &&
		ok "tp 2 --decode persistent: one kernel launch a step, its 5 collectives P2P tasks inside it" ||
		bad "tp 2 --decode persistent" "$(grep -hE 'rc=|decode_path|graph launches|made' $tmp/persistent.ids $tmp/persistent.err | head -c 600)"
	grep -q "rc=0" $tmp/persistent.nccl.ids && grep -q "rc=0" $tmp/kernels.nccl.ids &&
		grep -q "decode_path: persistent (1 workers: .*; 6 launches a step around 5 collectives)" $tmp/persistent.nccl.err &&
		grep -q "graph launches 11 (1.00 per step), kernels per step 7," $tmp/persistent.nccl.err &&
		[ -n "$(calls $tmp/persistent.nccl.err)" ] && [ "$(calls $tmp/persistent.nccl.err)" = "$(calls $tmp/kernels.nccl.err)" ] &&
		ok "tp 2 --decode persistent, GLMRUN_P2P_MAX=0: 6 kernel launches around 5 NCCL calls in one graph launch a step, the kernel path's calls" ||
		bad "tp 2 --decode persistent, GLMRUN_P2P_MAX=0" "$(grep -hE 'rc=|decode_path|graph launches|made' $tmp/persistent.nccl.ids $tmp/persistent.nccl.err $tmp/kernels.nccl.err | head -c 600)"
else
	bad "tp 2 --decode persistent compiles" "$(head -c 300 $tmp/err)"
fi
