#!/usr/bin/env bash
# bench/serve.sh — issue 49's benchmark in one command, run on the device machine (one H200) from the
# repository root with bin/ and build/ carried (`make bench`). For each shape (random weights, plans
# compiled here by bin/glmc as bench/decode.sh compiles them):
#   1. glmrun PLAN --bench: decode ms/step at batch 1, the per-token figure the 1-client row is held to;
#   2. glmrun serve PLAN on the GPU, and bench/serve_load.py against it: N concurrent clients (closed loop
#      unless RATE is set) at each of CLIENTS, the same seeded requests every run;
#   3. the peer, bench/serve_peer.py: transformers' continuous batching in-process (or the best batched
#      generate its version has; it prints which) on the same shape and the same requests;
# then one table per shape (requests/s, output tok/s, TTFT p50/p99, TPOT p50/p99 for both, the tok/s
# ratio) and the issue's goals checked: 1 client TPOT within 5% of --bench's ms/step, 32+ clients at
# least 3x the peer's tok/s, TTFT p99 under 2x p50 at 32 clients.
#
# Environment: OUT (results; default /tmp/glm-serve-bench), WORK (plans; /tmp/glm-serve-work), SHAPES
# (default "llama3_8b:bf16 glm4_7_flash:bf16"), CLIENTS (1,8,32,64), RPC (requests per client per level, 2),
# PROMPT_LEN (uniform:64:256), OUTPUT_LEN (uniform:64:128), RATE (inf: closed loop; or requests/s), SEED
# (0), BATCH_TOKENS (the server's --max-num-batched-tokens, 2048), SERVE_ARGS (more glmrun serve flags, e.g.
# "--prefill-alone off"), PEER (1/0), BUDGET (seconds for everything; default 470, under the device's 10-minute limit),
# DEVICE (cuda; cpu with the shape "tiny", the llama fixture's config, checks this script without a GPU).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/glm-serve-bench}
WORK=${WORK:-/tmp/glm-serve-work}
SHAPES=${SHAPES:-"llama3_8b:bf16 glm4_7_flash:bf16"}
CLIENTS=${CLIENTS:-1,8,32,64}
RPC=${RPC:-2}
PROMPT_LEN=${PROMPT_LEN:-uniform:64:256}
OUTPUT_LEN=${OUTPUT_LEN:-uniform:64:128}
RATE=${RATE:-inf}
SEED=${SEED:-0}
PEER=${PEER:-1}
BUDGET=${BUDGET:-470}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT" "$WORK"
rm -f "$OUT"/*.jsonl
T0=$(date +%s)
now() { echo $(($(date +%s) - T0)); }
say() { echo "[$(printf '%4d' "$(now)")s] $*"; }
left() { echo $((BUDGET - $(now))); }
value() { sed -n "s/^$1: \([^ ]*\).*/\1/p" "$2" 2>/dev/null | head -1; }
model_of() { case $1 in llama3_8b | tiny) echo llama ;; glm4_7_flash) echo glm4_moe_lite ;; esac; }
config_of() {
	case $1 in
	llama3_8b | glm4_7_flash) echo models/configs/$1.json ;;
	tiny) ls ../shared/fixtures/hf/llama/config.json build/fixtures/llama/config.json 2>/dev/null | head -1 ;;
	esac
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
MAXC=$(echo "$CLIENTS" | tr ',' '\n' | sort -n | tail -1)
# the longest prompt plus the longest output, rounded up: every request fits its slot
maxlen() { echo "$1" | awk -F: '{print $NF}'; }
MAXSEQ=$(($(maxlen "$PROMPT_LEN") + $(maxlen "$OUTPUT_LEN") + 64))
VOCAB=32000
[ "$DEVICE" = cpu ] && VOCAB=256

say "bench/serve.sh: OUT=$OUT SHAPES='$SHAPES' CLIENTS=$CLIENTS RPC=$RPC PROMPT_LEN=$PROMPT_LEN OUTPUT_LEN=$OUTPUT_LEN RATE=$RATE BUDGET=${BUDGET}s"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; } | sed 's/^/gpu: /'
for f in bin/glmc bin/glmrun; do
	[ -x $f ] || { echo "serve.sh: $f is missing: build with 'make bench' and carry bin and build"; exit 1; }
done
LOADARGS="--clients $CLIENTS --requests-per-client $RPC --prompt $PROMPT_LEN --output $OUTPUT_LEN --vocab $VOCAB --rate $RATE --seed $SEED"

set -- $SHAPES
nshapes=$#
i=0
for sd in $SHAPES; do
	s=${sd%%:*} d=${sd##*:} tag=${sd%%:*}-${sd##*:}
	i=$((i + 1))
	share=$(($(left) / (nshapes - i + 1))) # this shape's part of what is left
	end=$(($(now) + share))
	plan=$WORK/$tag.plan
	if [ "$share" -lt 40 ]; then
		say "$tag: skipped (time budget)"
		continue
	fi
	say "$tag: compile plan (random weights $d; ${share}s for this shape)"
	if ! timeout $((share / 3)) bin/glmc compile models/$(model_of $s).lua --config "$(config_of $s)" --random-weights $d \
		--dtype bf16 -o "$plan" >"$OUT/$tag.compile.txt" 2>&1; then
		say "$tag: compile failed: $(tail -1 "$OUT/$tag.compile.txt")"
		continue
	fi
	timeout $((end - $(now))) bin/glmrun "$plan" --device "$DEVICE" --bench >"$OUT/$tag.bench.txt" 2>&1 &&
		say "$tag: glmrun --bench batch 1: $(value ms_per_step_median "$OUT/$tag.bench.txt") ms/step (setup $(value setup_s "$OUT/$tag.bench.txt")s)" ||
		say "$tag: glmrun --bench failed: $(tail -1 "$OUT/$tag.bench.txt")"

	port=$(free_port)
	bin/glmrun serve "$plan" --device "$DEVICE" --port "$port" --max-seqs "$MAXC" --max-seq "$MAXSEQ" \
		--max-num-batched-tokens "${BATCH_TOKENS:-2048}" --max-queue 1024 --model-name "$tag" ${SERVE_ARGS:-} 2>"$OUT/$tag.serve.log" &
	spid=$!
	up=0
	while [ "$(now)" -lt "$end" ] && kill -0 $spid 2>/dev/null; do
		python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1)" 2>/dev/null && { up=1; break; }
		sleep 0.5
	done
	if [ $up = 1 ]; then
		say "$tag: glmrun serve up on port $port (--max-seqs $MAXC --max-seq $MAXSEQ); load: $LOADARGS"
		lim=$((end - $(now)))
		[ "$PEER" = 1 ] && lim=$((lim / 3)) # the peer is slower: it gets two thirds
		timeout -k 5 $lim python3 bench/serve_load.py --url "http://127.0.0.1:$port" $LOADARGS --json "$OUT/$tag.glmrun.jsonl" |
			tee "$OUT/$tag.load.txt" || say "$tag: serve_load.py failed or ran out of time (${lim}s)"
		# the server's own counters after the load (the scheduler's steps, among them --prefill-alone's)
		python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$port/metrics', timeout=5).read().decode())" \
			>"$OUT/$tag.metrics.txt" 2>&1
	else
		say "$tag: glmrun serve did not come up: $(tail -2 "$OUT/$tag.serve.log")"
	fi
	kill -TERM $spid 2>/dev/null
	wait $spid 2>/dev/null
	grep -q "stopped after" "$OUT/$tag.serve.log" && say "$tag: $(grep "stopped after" "$OUT/$tag.serve.log" | tail -1)"

	if [ "$PEER" = 1 ]; then
		lim=$((end - $(now)))
		if [ $lim -lt 20 ]; then
			say "$tag: peer skipped (time budget)"
		else
			say "$tag: peer (transformers, ${lim}s)"
			timeout -k 5 $lim python3 bench/serve_peer.py --config "$(config_of $s)" --device "$DEVICE" $LOADARGS \
				--json "$OUT/$tag.peer.jsonl" 2>"$OUT/$tag.peer.err" | tee "$OUT/$tag.peer.txt" ||
				say "$tag: the peer failed or ran out of time: $(grep -v Warning "$OUT/$tag.peer.err" | tail -2)"
		fi
	fi
	rm -f "$plan"

	# The table and the goals.
	python3 - "$tag" "$OUT" "$(value ms_per_step_median "$OUT/$tag.bench.txt")" <<'EOF' | tee "$OUT/$tag.table.txt"
import json, os, sys
tag, out, bench_ms = sys.argv[1], sys.argv[2], sys.argv[3]
def load(name):
    p = os.path.join(out, f"{tag}.{name}.jsonl")
    return {r["clients"]: r for r in map(json.loads, open(p))} if os.path.exists(p) else {}
g, p = load("glmrun"), load("peer")
print(f"\n{tag}: glmrun serve against the peer ({next(iter(p.values()))['system'] if p else 'no peer'}); times in ms")
print(f"{'clients':>7} | {'req/s':>8} {'tok/s':>9} {'TTFT50':>8} {'TTFT99':>8} {'TPOT50':>7} {'TPOT99':>7} | "
      f"{'peer req/s':>10} {'tok/s':>9} {'TTFT50':>8} {'TTFT99':>8} {'TPOT50':>7} {'TPOT99':>7} | {'x peer':>6}")
row = lambda r: (f"{r['req_per_s']:8.2f} {r['out_tok_per_s']:9.1f} {r['ttft_p50_ms']:8.1f} {r['ttft_p99_ms']:8.1f} "
                 f"{r['tpot_p50_ms']:7.2f} {r['tpot_p99_ms']:7.2f}") if r else f"{'-':>8} {'-':>9} {'-':>8} {'-':>8} {'-':>7} {'-':>7}"
for c in sorted(set(g) | set(p)):
    a, b = g.get(c), p.get(c)
    x = f"{a['out_tok_per_s'] / b['out_tok_per_s']:6.2f}" if a and b and b["out_tok_per_s"] else f"{'-':>6}"
    print(f"{c:>7} | {row(a)} | {'':>2}{row(b)} | {x}")
goals = []
if 1 in g and bench_ms:
    r = g[1]["tpot_p50_ms"] / float(bench_ms)
    goals.append((f"1 client: TPOT p50 {g[1]['tpot_p50_ms']:.3f} ms within 5% of glmrun --bench's {float(bench_ms):.3f} ms/step", r <= 1.05))
for c in sorted(g):
    if c >= 32 and c in p and p[c]["out_tok_per_s"]:
        goals.append((f"{c} clients: output tok/s {g[c]['out_tok_per_s']:.0f} at least 3x the peer's {p[c]['out_tok_per_s']:.0f}",
                      g[c]["out_tok_per_s"] >= 3 * p[c]["out_tok_per_s"]))
if 32 in g:
    goals.append((f"32 clients: TTFT p99 {g[32]['ttft_p99_ms']:.1f} ms under 2x p50 {g[32]['ttft_p50_ms']:.1f} ms",
                  g[32]["ttft_p99_ms"] < 2 * g[32]["ttft_p50_ms"]))
for text, ok in goals:
    print(f"goal {'met' if ok else 'MISSED'}: {text}")
EOF
done
say "done; results in $OUT"
