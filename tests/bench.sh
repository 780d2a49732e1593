#!/usr/bin/env bash
# tests/bench.sh — glmrun --bench/--profile and glmc --random-weights q4_k_m without a GPU: argument
# errors, the benchmark block on the CPU reference (random and checkpoint weights), and the Q4_K_M mix on
# the GLM-5 slice the GPU benchmark uses. The numbers themselves belong to bench/, never to a test.
set -u
cd "$(dirname "$0")/.."
FIX=../shared/fixtures/hf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1: $2"; }

# expect_fail NAME SUBSTRING CMD...: non-zero exit, no crash, one stderr line containing SUBSTRING.
expect_fail() {
	local name=$1 want=$2
	shift 2
	"$@" >"$tmp/out" 2>"$tmp/err"
	local rc=$?
	if [ $rc -eq 0 ]; then
		bad "$name" "succeeded, expected an error containing '$want'"
	elif [ $rc -ge 128 ]; then
		bad "$name" "crashed (status $rc)"
	elif ! grep -qF -- "$want" "$tmp/err" || [ "$(wc -l <"$tmp/err")" -ne 1 ]; then
		bad "$name" "stderr: $(head -c 300 "$tmp/err")"
	else
		ok "$name"
	fi
}

# value KEY FILE: the value of a "key: value" line.
value() { sed -n "s/^$1: \([^ ]*\).*/\1/p" "$2" | head -1; }

bin/glmc compile models/llama.lua --weights $FIX/llama -o $tmp/ll.plan 2>/dev/null || bad "compile the llama fixture" "failed"
P=$tmp/ll.plan
expect_fail "--bench with --tokens" "make their own random prompt" bin/glmrun $P --bench --tokens 1,2
expect_fail "--bench with -p" "make their own random prompt" bin/glmrun $P --profile -p hi
expect_fail "--bench-prompt without --bench" "go with --bench or --profile" bin/glmrun $P --bench-prompt 8 --tokens 1
expect_fail "--bw without --bench" "go with --bench or --profile" bin/glmrun $P --bw 4000 --tokens 1
expect_fail "--bench-prompt 0" "--bench-prompt must be an integer in [1," bin/glmrun $P --bench --bench-prompt 0
expect_fail "--bench-prompt without a value" "missing value after --bench-prompt" bin/glmrun $P --bench --bench-prompt
expect_fail "--bw negative" "--bw must be a number" bin/glmrun $P --bench --bw -1
expect_fail "--profile-top x" "--profile-top must be an integer" bin/glmrun $P --profile --profile-top x
expect_fail "--profile on the CPU" "--profile times the GPU's kernels" bin/glmrun $P --profile --device cpu
expect_fail "--bench with --verify" "do not combine with --verify" bin/glmrun $P --bench --verify
expect_fail "--bench with --dump-logits" "do not combine" bin/glmrun $P --bench --dump-logits $tmp/x.f32
expect_fail "--bench past the context" "more than the model's context" bin/glmrun $P --bench --device cpu --bench-prompt 500 -n 64

# The block on the CPU reference, random weights: a MoE + MLA + DSA plan (the GLM-5 fixture's shape).
bin/glmc compile models/glm5.lua --config $FIX/glm_moe_dsa/config.json --random-weights bf16 -o $tmp/rnd.plan 2>/dev/null
if bin/glmrun $tmp/rnd.plan --device cpu --bench --bench-prompt 12 -n 6 --bw 50 >$tmp/b.txt 2>$tmp/err; then
	miss=""
	for k in weights device batch prompt_tokens decode_steps ms_per_step_median ms_per_step_mean tok_s bytes_per_step \
		bytes_per_step_weights bytes_per_step_experts bytes_per_step_cache achieved_gb_s pct_of_bw \
		graph_launches_per_step prefill_tok_s; do
		grep -q "^$k: " $tmp/b.txt || miss="$miss $k"
	done
	[ -z "$miss" ] && ok "--bench prints the block on the CPU" || bad "--bench prints the block on the CPU" "missing:$miss"
	grep -q "^weights: random (bf16)" $tmp/b.txt && ok "--bench flags random weights" ||
		bad "--bench flags random weights" "$(grep weights: $tmp/b.txt)"
	[ "$(value prompt_tokens $tmp/b.txt)" = 12 ] && [ "$(value decode_steps $tmp/b.txt)" = 6 ] &&
		ok "--bench-prompt and -n set the run" || bad "--bench-prompt and -n set the run" "$(head -12 $tmp/b.txt)"
	awk -v t="$(value tok_s $tmp/b.txt)" -v m="$(value ms_per_step_median $tmp/b.txt)" -v p="$(value prefill_tok_s $tmp/b.txt)" \
		'BEGIN { exit !(t > 0 && m > 0 && p > 0 && (t * m / 1000 - 1)^2 < 1e-4) }' &&
		ok "--bench: tok/s > 0 and tok/s = 1000 / median ms" || bad "--bench tok/s" "$(grep -E 'tok_s|ms_per' $tmp/b.txt)"
	# Only the selected experts count: a positive share, below the resident expert bytes.
	awk -v e="$(value bytes_per_step_experts $tmp/b.txt)" -v w="$(value bytes_per_step_weights $tmp/b.txt)" \
		-v c="$(value bytes_per_step_cache $tmp/b.txt)" -v t="$(value bytes_per_step $tmp/b.txt)" \
		'BEGIN { exit !(e > 0 && w > 0 && c > 0 && t == e + w + c) }' &&
		ok "--bench bytes per step: weights + selected experts + cache" || bad "--bench bytes per step" "$(grep bytes $tmp/b.txt)"
else
	bad "--bench on the CPU" "$(cat $tmp/err)"
fi
# --batch: the prompts share prefill steps of up to -ub tokens, as glmrun --batch and serve prefill them.
for ub in 2048 24; do
	bin/glmrun $tmp/rnd.plan --device cpu --bench --bench-prompt 12 --batch 4 -n 4 -ub $ub >$tmp/bb$ub.txt 2>$tmp/err ||
		bad "--bench --batch 4 -ub $ub" "$(cat $tmp/err)"
done
[ "$(value prefill_prompts_per_step $tmp/bb2048.txt)" = 4 ] && [ "$(value prefill_prompts_per_step $tmp/bb24.txt)" = 2 ] &&
	[ "$(value prefill_steps $tmp/bb2048.txt)" = 1 ] && [ "$(value prefill_steps $tmp/bb24.txt)" = 2 ] &&
	awk -v a="$(value tok_s $tmp/bb2048.txt)" -v b="$(value tok_s $tmp/bb24.txt)" 'BEGIN { exit !(a > 0 && b > 0) }' &&
	ok "--bench --batch 4: 4 prompts a prefill step, 2 with -ub 24, then decode" ||
	bad "--bench --batch prefill steps" "$(grep -h prefill_prompts $tmp/bb*.txt | tr '\n' ' ')"
# A prompt longer than -ub prefills in steps of -ub, as a run's does (a --batch change once made it one pass:
# bench/NOTES.md 74): 40 tokens at -ub 16 take 3 steps of at most 16.
bin/glmrun $tmp/rnd.plan --device cpu --bench --bench-prompt 40 -ub 16 -n 2 >$tmp/bc.txt 2>$tmp/err &&
	[ "$(value prefill_steps $tmp/bc.txt)" = 3 ] && [ "$(value prefill_chunk $tmp/bc.txt)" = 16 ] &&
	ok "--bench: a 40-token prompt at -ub 16 prefills in 3 steps of 16" ||
	bad "--bench prefill steps of -ub" "$(grep -h '^prefill_' $tmp/bc.txt $tmp/err | tr '\n' ' ')"
# --json: the same block as one JSON object (Python's json parses it; numbers are numbers, the keys are the
# lines' keys); not with --profile, not without --bench.
if bin/glmrun $tmp/rnd.plan --device cpu --bench --bench-prompt 12 -n 6 --bw 50 --json >$tmp/b.json 2>$tmp/err &&
	python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
keys = [l.split(': ')[0] for l in open(sys.argv[2])]
assert list(d) == keys, (list(d), keys)
assert d['prompt_tokens'] == 12 and d['decode_steps'] == 6 and isinstance(d['ms_per_step_median'], float)
assert abs(d['tok_s'] * d['ms_per_step_median'] / 1000 - 1) < 1e-2
" $tmp/b.json $tmp/b.txt 2>$tmp/py; then
	ok "--bench --json: the block's keys as one JSON object, numbers as numbers"
else
	bad "--bench --json" "$(tail -2 $tmp/py) $(head -c 200 $tmp/err)"
fi
expect_fail "--json with --profile" "--profile's tables are text" bin/glmrun $P --profile --json
expect_fail "--json without --bench" "go with --bench or --profile" bin/glmrun $P --json --tokens 1
# Checkpoint weights are not flagged.
bin/glmrun $P --device cpu --bench --bench-prompt 4 -n 3 >$tmp/c.txt 2>$tmp/err && ! grep -q "random" $tmp/c.txt &&
	grep -q "^weights: .*fixtures/hf/llama (hf)" $tmp/c.txt && ok "--bench on checkpoint weights names them" ||
	bad "--bench on checkpoint weights names them" "$(grep weights $tmp/c.txt) $(cat $tmp/err)"
# The llama fixture by hand (float32 on the CPU): per layer q 64x64, k and v 32x64, o 64x64, MLP 3 x 128x64,
# two norms of 64 = 36992 values; 2 layers, the final norm (64), the head (512x64) and one embedding row
# (64): 106880 values = 427520 bytes. Caches: 2 layers x (K 32 + V 32) floats = 512 bytes a position, at
# the mean context 4 + 3 warm-up + (3 + 1) / 2 = 9 positions: 4608. Total 432128.
[ "$(value bytes_per_step $tmp/c.txt)" = 432128 ] && [ "$(value context_mean $tmp/c.txt)" = 9.0 ] &&
	ok "--bench bytes per step of the llama fixture: 427520 weights + 4608 cache" ||
	bad "--bench bytes per step of the llama fixture" "$(grep -E 'bytes_per_step|context' $tmp/c.txt)"

# The GLM-5 slice of the benchmark: 3 dense + 5 MoE layers with the Q4_K_M mix, bigger than plain Q4_K
# by the Q6_K tensors (output, ffn_down of layers 0-7: all use_more_bits for 79 layers' first eighth).
if bin/glmc compile models/glm5.lua --config models/configs/glm5.json --random-weights q4_k_m --layers 8 -o $tmp/m.plan 2>$tmp/err &&
	bin/glmc compile models/glm5.lua --config models/configs/glm5.json --random-weights q4_k --layers 8 -o $tmp/k.plan 2>>$tmp/err; then
	m=$(bin/glmc stats $tmp/m.plan | sed -n 's/^weight_bytes_total: //p')
	k=$(bin/glmc stats $tmp/k.plan | sed -n 's/^weight_bytes_total: //p')
	# Q6_K is 210 bytes per 256 values against Q4_K's 144: output (154880 x 6144) and the ffn_down of the
	# 8 layers (3 dense 6144 x 12288; 5 x (256 experts + 1 shared) x 6144 x 2048) gain 66/256 byte per value;
	# the router (256 x 6144 per MoE layer) goes from Q4_K to F32: 4 - 144/256 bytes per value.
	want=$(awk 'BEGIN { v = 154880*6144 + 3*6144*12288 + 5*257*6144*2048; r = 5*256*6144;
		printf "%.0f", v * 66 / 256 + r * (4 - 144/256) }')
	[ "$((m - k))" = "$want" ] && ok "q4_k_m GLM-5 slice: $m bytes, Q4_K + $want for the Q6_K tensors and the f32 router" ||
		bad "q4_k_m GLM-5 slice bytes" "$m - $k = $((m - k)), expected $want"
else
	bad "q4_k_m GLM-5 slice compiles" "$(tail -1 $tmp/err)"
fi
# The benchmark's dense shape: Llama-3-8B has 8,030,261,248 parameters; as bf16 matrices with f32 norm
# vectors (65 of 4096) that is 2 * 8030261248 + 2 * 65 * 4096 bytes. GLM-4.7-Flash is "30B-A3B", listed at
# 29.9B parameters (its GGUF's parameter count): within 1% of that at 2 bytes each.
if bin/glmc compile models/llama.lua --config models/configs/llama3_8b.json --random-weights bf16 --dtype bf16 -o $tmp/l8.plan 2>$tmp/err &&
	bin/glmc compile models/glm4_moe_lite.lua --config models/configs/glm4_7_flash.json --random-weights q8_0 --dtype bf16 -o $tmp/f.plan 2>>$tmp/err &&
	bin/glmc compile models/glm4_moe_lite.lua --config models/configs/glm4_7_flash.json --random-weights bf16 --dtype bf16 -o $tmp/fb.plan 2>>$tmp/err; then
	l=$(bin/glmc stats $tmp/l8.plan | sed -n 's/^weight_bytes_total: //p')
	[ "$l" = $((2 * 8030261248 + 2 * 65 * 4096)) ] && ok "Llama-3-8B config: 8.03B parameters ($l bytes in bf16)" ||
		bad "Llama-3-8B config parameter count" "$l bytes"
	f=$(bin/glmc stats $tmp/fb.plan | sed -n 's/^weight_bytes_total: //p')
	awk -v f="$f" 'BEGIN { exit !(f / 2 > 29.9e9 * 0.99 && f / 2 < 29.9e9 * 1.01) }' &&
		ok "GLM-4.7-Flash config: $((f / 2)) parameters (30B-A3B)" || bad "GLM-4.7-Flash config parameter count" "$f bytes"
else
	bad "the benchmark shapes compile" "$(tail -1 $tmp/err)"
fi
# bench/decode.sh end to end on the CPU (the tiny shape; no bandwidth probe, no peer): one table row with
# numbers for batch 1 and batch 4 (four sequences per step).
if DEVICE=cpu SHAPES=tiny:bf16 BATCHES="1 4" PEER=0 PROMPT=8 STEPS=4 BUDGET=120 OUT=$tmp/dec WORK=$tmp/decw \
	bench/decode.sh >$tmp/dec.log 2>&1; then
	row=$(grep -E '^tiny +bf16 +1 ' $tmp/dec/table.txt)
	echo "$row" | awk '{ exit !($4 > 0 && $5 > 0 && $6 > 0) }' && grep -E '^tiny +bf16 +4 ' $tmp/dec/table.txt | awk '{ exit !($4 > 0 && $5 > 0 && $6 > 0) }' &&
		ok "bench/decode.sh on the CPU prints the table ($row)" || bad "bench/decode.sh table" "$(tail -8 $tmp/dec.log)"
else
	bad "bench/decode.sh on the CPU" "$(tail -5 $tmp/dec.log)"
fi
# bench/long.sh on the CPU (the tiny shape at two prompt lengths, no peer): a row for each length whose
# model FLOPs per token grow with the context (the attention term) and whose times are positive.
if DEVICE=cpu SHAPES=tiny:f32 LENGTHS="16 100" STEPS=4 PEER=0 BUDGET=120 OUT=$tmp/long WORK=$tmp/longw \
	bench/long.sh >$tmp/long.log 2>&1; then
	r16=$(grep -E '^\| tiny-f32 \| 16 \|' $tmp/long.log) r100=$(grep -E '^\| tiny-f32 \| 100 \|' $tmp/long.log)
	f16=$(echo "$r16" | awk -F'|' '{ print $6 + 0 }') f100=$(echo "$r100" | awk -F'|' '{ print $6 + 0 }')
	echo "$r100" | awk -F'|' '{ exit !($4 > 0 && $5 > 0 && $7 > 0 && $9 > 0) }' && awk -v a="$f16" -v b="$f100" 'BEGIN { exit !(b > a && a > 0) }' &&
		ok "bench/long.sh on the CPU prints the table (FLOPs/token $f16 at 16, $f100 at 100)" || bad "bench/long.sh table" "$(tail -5 $tmp/long.log)"
else
	bad "bench/long.sh on the CPU" "$(tail -5 $tmp/long.log)"
fi
# bench/fallback.sh on the CPU (the llama fixture with and without --fallback): its table, with
# identical greedy ids (the CPU reference does not depend on the kernels chosen).
if DEVICE=cpu KERNELS="attn_split" PROMPTS=16 CONTEXTS=16 OUT=$tmp/exp bench/fallback.sh >$tmp/exp.log 2>&1 &&
	grep -q "^| attn_split | correctness | greedy ids same | logits rel-L2 0 |" $tmp/exp.log &&
	grep -qE "^\| attn_split \| L=16 \| old prefill [0-9.]+ ms, decode [0-9.]+ ms \| new prefill [0-9.]+ ms" $tmp/exp.log; then
	ok "bench/fallback.sh on the CPU prints its table"
else
	bad "bench/fallback.sh on the CPU" "$(tail -5 $tmp/exp.log)"
fi
# bench/persist.sh on the CPU (the llama fixture's config at 2 layers, --decode persistent plans for 1 and 2
# workers an SM): its table, each row with the persistent kernel's registers and stack, both paths' ids and
# logits identical (the CPU ignores --decode).
if DEVICE=cpu SHAPES=llama3_8b BPS="1 2" OUT=$tmp/pers bench/persist.sh >$tmp/pers.log 2>&1 &&
	grep -qE "^\| llama3_8b \| 1 \([0-9]+ regs, [0-9]+ B stack\) \| [0-9.]+ ms, - \(cpu\) \| [0-9.]+ ms, - \(cpu\) \| ids same, logits bit-identical \|$" $tmp/pers.log &&
	grep -qE "^\| llama3_8b \| 2 \([0-9]+ regs, [0-9]+ B stack\) \| \(as at 1\) \| [0-9.]+ ms, - \(cpu\) \| ids same, logits bit-identical \|$" $tmp/pers.log &&
	grep -q "^compute-sanitizer memcheck (llama fixture, --decode persistent): not run" $tmp/pers.log; then
	ok "bench/persist.sh on the CPU prints its table"
else
	bad "bench/persist.sh on the CPU" "$(tail -5 $tmp/pers.log)"
fi
# bench/tp_scaling.sh on the CPU (tp 1 and 2 of the tiny shape, ranks in one process): a row for each tp
# with its ms/step and the scaling against tp 1.
if DEVICE=cpu TPS="1 2" SHAPES=tiny:bf16 PROMPT=8 STEPS=4 BUDGET=120 OUT=$tmp/tps bench/tp_scaling.sh >$tmp/tps.log 2>&1 &&
	grep -E '^tiny +bf16 +1 ' $tmp/tps/table.txt | awk '{ exit !($4 > 0 && $6 == "1.00x") }' &&
	grep -E '^tiny +bf16 +2 ' $tmp/tps/table.txt | awk '{ exit !($4 > 0 && $6 + 0 > 0) }'; then
	ok "bench/tp_scaling.sh on the CPU prints tp 1 and 2 with the scaling ($(grep -E '^tiny +bf16 +2 ' $tmp/tps/table.txt | tr -s ' '))"
else
	bad "bench/tp_scaling.sh on the CPU" "$(tail -6 $tmp/tps.log)"
fi
# bench/trace.py (the in-graph timeline's reader) on a made-up trace: node 1's replays are the decode
# graph (graph 7, three kernels; graph 9 ran once), the first two replays are dropped, and each later one
# spans 10 µs with 1 µs of gaps (0.5 before b, 0.5 before c).
python3 - "$tmp/trace.tsv" <<'PYEOF'
import sys
with open(sys.argv[1], "w") as f:
    f.write("prefill 0 500 9 1 4 128\n")
    for r in range(5):
        t = 1000 + r * 20000
        f.write(f"glm_ka {t} {t + 4000} 7 11 8 256\n")
        f.write(f"glm_kb {t + 4500} {t + 7000} 7 12 8 256\n")
        f.write(f"glm_kc {t + 7500} {t + 10000} 7 13 1 32\n")
PYEOF
if python3 bench/trace.py "$tmp/trace.tsv" >$tmp/trace.out 2>&1 && grep -q '^trace: 3 decode replays of 3 kernels' $tmp/trace.out &&
	grep -q '^trace_step_us: 10.00' $tmp/trace.out && grep -q '^trace_kernel_busy_us: 9.00' $tmp/trace.out &&
	grep -q '^trace_gap_us: 1.00 (10.0% of the step' $tmp/trace.out && grep -qE '^  glm_ka +1 +4.00' $tmp/trace.out; then
	ok "bench/trace.py splits a made-up timeline into kernel time and gaps"
else
	bad "bench/trace.py on a made-up timeline" "$(head -c 400 $tmp/trace.out)"
fi
echo "glm_ka 1 2 3" >$tmp/bad.tsv
if ! python3 bench/trace.py $tmp/bad.tsv >$tmp/trace.out 2>&1 && grep -q "bad.tsv:1: expected 7 fields, got 4" $tmp/trace.out; then
	ok "bench/trace.py names the malformed line"
else
	bad "bench/trace.py on a malformed line" "$(head -c 300 $tmp/trace.out)"
fi
bin/glmc --help | grep -q "q4_k_m is llama.cpp's Q4_K_M mix" && ok "glmc --help documents q4_k_m" || bad "glmc --help documents q4_k_m" "missing"
bin/glmrun --help | grep -q -- "--bench " && bin/glmrun --help | grep -q -- "--profile " && ok "glmrun --help documents --bench and --profile" ||
	bad "glmrun --help documents --bench and --profile" "missing"
exit 0
