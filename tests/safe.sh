#!/usr/bin/env bash
# tests/safe.sh — nothing lost, nothing hangs, nothing silently wrong (issue 44): NaN/Inf logits refused
# with the step named; plans written whole or not at all, outputs checked before compiling, inputs never
# overwritten (compared with cmp afterwards); write errors on stdout and output files reported; forged
# plans and special files refused at once; the Lua sandbox's limits. Every refusal is one line with a
# non-zero exit, and no command may take 10 s.
# Prints "ok - NAME" / "FAIL - NAME: why" lines for tests/run.sh to count.
set -u
cd "$(dirname "$0")/.." || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
FIX=../shared/fixtures/hf

# result NAME WHY: "ok - NAME" when WHY is empty, else "FAIL - NAME: WHY".
result() {
	if [ -z "$2" ]; then echo "ok - $1"; else echo "FAIL - $1: $2"; fi
}
ok() { result "$1" ""; }
bad() { result "$1" "$2"; }

# expect_fail NAME SUBSTRING CMD...: CMD must end within 10 s, non-zero and not by a signal, with one
# line on stderr containing SUBSTRING.
expect_fail() {
	local name=$1 want=$2 why=""
	shift 2
	timeout 10 "$@" >"$tmp/out" 2>"$tmp/err"
	local rc=$? msg
	msg=$(head -c 300 "$tmp/err")
	case $rc in
	0) why="succeeded, expected an error containing '$want'" ;;
	124) why="still running after 10 s" ;;
	*) [ $rc -gt 128 ] && why="killed by a signal (status $rc): $msg" ;;
	esac
	[ -z "$why" ] && ! grep -qF -- "$want" "$tmp/err" && why="error '$msg' does not contain '$want'"
	[ -z "$why" ] && [ "$(wc -l <"$tmp/err")" -ne 1 ] && why="error is not one line: $msg"
	result "$name" "$why"
}

# same NAME FILE COPY: FILE is byte-identical to its saved COPY.
same() {
	cmp -s "$2" "$3" && ok "$1" || bad "$1" "$2 changed"
}

cp -r $FIX/llama "$tmp/hf"
cp models/llama.lua "$tmp/m.lua"
cp $FIX/llama/config.json "$tmp/config.json"
LIB=models/lib
C="bin/glmc compile $tmp/m.lua --lib $LIB --weights $tmp/hf"

# ---- A: NaN/Inf logits are an error naming the step, greedy, sampled and batched (CPU) ----
if bin/glmc compile tests/models/nan_logits.lua --lib $LIB --weights $tmp/hf -o $tmp/nan.plan 2>$tmp/err; then
	expect_fail "NaN logits: greedy run refused at the prefill" "prefill: the logits hold NaN (token row 0 at position 0" \
		bin/glmrun $tmp/nan.plan --device cpu --tokens 1,2,3 -n 4
	expect_fail "NaN logits: sampled run refused" "prefill: the logits hold NaN" \
		bin/glmrun $tmp/nan.plan --device cpu --tokens 1,2,3 -n 4 --temp 1 --top-k 5 --seed 3
	expect_fail "NaN logits: batch refused" "the logits hold NaN" \
		bin/glmrun $tmp/nan.plan --device cpu --tokens 1,2 --tokens 3 -n 2
else
	bad "NaN model compiles" "$(head -c 300 $tmp/err)"
fi

# ---- B: -o checked before compiling; inputs never overwritten; plans replaced whole or not at all ----
for f in "$tmp/hf/model.safetensors" "$tmp/hf/config.json" "$tmp/m.lua"; do cp "$f" "$f.orig"; done
cp $LIB/nn.lua $tmp/nn.orig
expect_fail "-o onto the weights' safetensors refused" "that is the weights" $C -o $tmp/hf/model.safetensors
expect_fail "-o onto the HF config.json (another spelling) refused" "that is the weights" $C -o $tmp/hf/../hf/./config.json
expect_fail "-o onto the model refused" "that is the model" $C -o $tmp/m.lua
ln "$tmp/m.lua" "$tmp/hard.lua"
expect_fail "-o onto a hard link of the model refused" "that is the model" $C -o $tmp/hard.lua
ln -s "$tmp/hf/model.safetensors" "$tmp/link.plan"
expect_fail "-o onto a symlink to the weights refused" "that is the weights" $C -o $tmp/link.plan
expect_fail "-o onto the random-weights config refused" "that is the config" \
	bin/glmc compile $tmp/m.lua --lib $LIB --config $tmp/config.json --random-weights f32 -o $tmp/config.json
expect_fail "-o onto a model library file refused" "that is the model library" $C -o $LIB/nn.lua
expect_fail "--dot onto the model refused" "--dot $tmp/m.lua: that is the model" \
	bin/glmc dump $tmp/m.lua --lib $LIB --weights $tmp/hf --dot $tmp/m.lua
expect_fail "-o in a missing directory refused at once" "the directory $tmp/nope: No such file or directory" $C -o $tmp/nope/x.plan
expect_fail "-o naming a directory refused" "is a directory" $C -o $tmp/hf
mkdir -p $tmp/split && touch $tmp/split/w-00001-of-00002.gguf $tmp/split/w-00002-of-00002.gguf
expect_fail "-o onto another part of a split GGUF refused" "that is the weights ($tmp/split/w-00002-of-00002.gguf)" \
	bin/glmc compile $tmp/m.lua --lib $LIB --weights $tmp/split/w-00001-of-00002.gguf -o $tmp/split/w-00002-of-00002.gguf
[ ! -s $tmp/split/w-00002-of-00002.gguf ] && ok "split GGUF part unchanged" || bad "split GGUF part unchanged" "written"
mkfifo $tmp/fifo.plan
expect_fail "-o onto a FIFO refused" "is not a regular file" $C -o $tmp/fifo.plan
same "weights safetensors unchanged" "$tmp/hf/model.safetensors" "$tmp/hf/model.safetensors.orig"
same "HF config.json unchanged" "$tmp/hf/config.json" "$tmp/hf/config.json.orig"
same "model unchanged" "$tmp/m.lua" "$tmp/m.lua.orig"
same "model library unchanged" "$LIB/nn.lua" "$tmp/nn.orig"
# a plan write that fails (here a file size limit, as a full disk) leaves the previous plan as it was
if $C -o $tmp/p.plan 2>$tmp/err; then
	cp $tmp/p.plan $tmp/p.orig
	(trap '' XFSZ; ulimit -f 8; exec $C -o $tmp/p.plan) 2>$tmp/err
	rc=$?
	[ $rc -ne 0 ] && grep -q "p.plan: write failed (the previous file, if any, is unchanged): File too large" $tmp/err &&
		[ "$(wc -l <$tmp/err)" = 1 ] && ok "failed plan write reported in one line" ||
		bad "failed plan write reported in one line" "rc $rc: $(head -c 300 $tmp/err)"
	same "previous plan unchanged after a failed write" $tmp/p.plan $tmp/p.orig
	ls $tmp | grep -q '\.tmp\.' && bad "no temporary left after a failed write" "$(ls $tmp)" ||
		ok "no temporary left after a failed write"
else
	bad "llama compiles" "$(head -c 300 $tmp/err)"
fi

# ---- C: write errors on stdout and output files: non-zero exit, one line ----
P=$tmp/p.plan
expect_fail "glmrun tokens to a full stdout" "standard output: write failed: No space left on device" \
	sh -c "exec bin/glmrun $P --device cpu --tokens 1,2 -n 3 >/dev/full"
expect_fail "glmrun one token to a full stdout" "standard output: write failed" \
	sh -c "exec bin/glmrun $P --device cpu --tokens 1,2 -n 1 >/dev/full"
expect_fail "glmrun with stdout closed" "standard output: write failed: Bad file descriptor" \
	sh -c "exec bin/glmrun $P --device cpu --tokens 1,2 -n 3 >&-"
expect_fail "glmrun --dump-logits to a full disk" "/dev/full: write failed: No space left on device" \
	bin/glmrun $P --device cpu --tokens 1,2 -n 3 --dump-logits /dev/full
expect_fail "glmrun --batch --dump-logits past a file size limit" "--dump-logits: write failed: File too large" \
	sh -c "trap '' XFSZ; ulimit -f 1; exec bin/glmrun $P --device cpu --tokens 1,2 --tokens 3 -n 3 --dump-logits $tmp/b.f32" 
expect_fail "glmc stats to a full stdout" "glmc: standard output: write failed" sh -c "exec bin/glmc stats $P >/dev/full"
expect_fail "glmc dump to a full stdout" "glmc: standard output: write failed" sh -c "exec bin/glmc dump $P >/dev/full"
# ---- D: special files refused at once (a FIFO would block the open for ever) ----
mkfifo $tmp/fifo.lua $tmp/fifo2.plan $tmp/fifo.json
expect_fail "FIFO as the model refused" "cannot open $tmp/fifo.lua: not a regular file" \
	bin/glmc compile $tmp/fifo.lua --lib $LIB --weights $tmp/hf -o $tmp/x.plan
expect_fail "FIFO as the model (glmc dump) refused" "not a regular file" bin/glmc dump $tmp/fifo.lua --lib $LIB --weights $tmp/hf
expect_fail "FIFO as the plan refused by glmrun" "cannot open the plan: $tmp/fifo2.plan: not a regular file" \
	bin/glmrun $tmp/fifo2.plan --tokens 1
expect_fail "FIFO as the plan refused by glmc stats" "not a regular file" bin/glmc stats $tmp/fifo2.plan
expect_fail "FIFO as the --config refused" "$tmp/fifo.json: not a regular file" \
	bin/glmc compile $tmp/m.lua --lib $LIB --config $tmp/fifo.json --random-weights f32 -o $tmp/x.plan
expect_fail "FIFO as the tokenizer refused" "$tmp/fifo.json: not a regular file" \
	bin/glmrun $P --device cpu -p hi --tokenizer $tmp/fifo.json
for f in model.safetensors config.json; do
	cp -r $tmp/hf $tmp/hff && rm $tmp/hff/$f && mkfifo $tmp/hff/$f
	expect_fail "FIFO as $f inside a weights directory refused" "$tmp/hff/$f: not a regular file" \
		bin/glmc compile $tmp/m.lua --lib $LIB --weights $tmp/hff -o $tmp/x.plan
	rm -rf $tmp/hff
done
mkfifo $tmp/w.gguf
expect_fail "FIFO as a GGUF refused" "not a regular file" bin/glmc compile $tmp/m.lua --lib $LIB --weights $tmp/w.gguf -o $tmp/x.plan
# missing files: the reason, and no "line -1"
expect_fail "missing --config named without a line number" "$tmp/nope.json: No such file or directory" \
	bin/glmc compile $tmp/m.lua --lib $LIB --config $tmp/nope.json --random-weights f32 -o $tmp/x.plan
grep -q "line -1" $tmp/err && bad "no 'line -1' for a missing config" "$(cat $tmp/err)" || ok "no 'line -1' for a missing config"
expect_fail "missing tokenizer named without a line number" "$tmp/nope.json: No such file or directory" \
	bin/glmrun $P --device cpu -p hi --tokenizer $tmp/nope.json
grep -q "line -1" $tmp/err && bad "no 'line -1' for a missing tokenizer" "$(cat $tmp/err)" || ok "no 'line -1' for a missing tokenizer"
# ---- F: the Lua sandbox's time limit covers finalizers and C calls; finalizers cannot touch the graph ----
M=tests/models
FAST="--lua-time 0.5"
expect_fail "endless loop stopped by the CPU-time limit, with its line" "endless.lua:2: the model ran more than 0.5 s of CPU time" \
	bin/glmc compile $M/endless.lua --weights $tmp/hf -o $tmp/x.plan $FAST
# finalizers run with the hook off, so none may be set; C calls the hook cannot interrupt are bounded
expect_fail "finalizer that never returns refused where it is set" "gc_endless.lua:2: setmetatable: a model may not set a __gc finalizer" \
	bin/glmc compile $M/gc_endless.lua --weights $tmp/hf -o $tmp/x.plan $FAST
expect_fail "backtracking string.find refused at its line" "pattern_blowup.lua:3: string.find: pattern '.-.-.-.-.-.-b' could backtrack too long on a subject of 100000 bytes" \
	bin/glmc compile $M/pattern_blowup.lua --weights $tmp/hf -o $tmp/x.plan $FAST
expect_fail "finalizer that would change the graph refused" "gc_graph.lua:2: setmetatable: a model may not set a __gc finalizer" \
	bin/glmc compile $M/gc_graph.lua --weights $tmp/hf -o $tmp/x.plan
expect_fail "a loop of expensive C calls stopped by the timer, with its line" "rep_loop.lua:2: the model ran more than 0.5 s of CPU time" \
	bin/glmc compile $M/rep_loop.lua --weights $tmp/hf -o $tmp/x.plan $FAST
expect_fail "string bomb refused before allocating" "rep_bomb.lua:2: string.rep: 1099511627776 copies of 1 bytes are more than the Lua memory limit (2048 MiB)" \
	bin/glmc compile $M/rep_bomb.lua --weights $tmp/hf -o $tmp/x.plan $FAST
expect_fail "table.move over 2^40 nils refused" "move_nils.lua:2: table.move: 1099511627775 elements, more than a model may handle" \
	bin/glmc compile $M/move_nils.lua --weights $tmp/hf -o $tmp/x.plan $FAST
expect_fail "table.sort of 4.7M elements refused" "sort_big.lua:4: table.sort: 4718592 elements, more than a model may handle" \
	bin/glmc compile $M/sort_big.lua --weights $tmp/hf -o $tmp/x.plan $FAST
expect_fail "endless __close stopped by the time limit" "close_endless.lua:2: the model ran more than 0.5 s of CPU time" \
	bin/glmc compile $M/close_endless.lua --weights $tmp/hf -o $tmp/x.plan $FAST
expect_fail "unbounded recursion stopped" "recursion.lua:2: stack overflow" \
	bin/glmc compile $M/recursion.lua --weights $tmp/hf -o $tmp/x.plan $FAST
bin/glmc compile $M/rep_check.lua --weights $tmp/hf -o $tmp/x.plan 2>$tmp/err &&
	ok "string.rep by doubling equals repetition by concatenation; patterns within the bound work" ||
	bad "string.rep by doubling equals repetition by concatenation; patterns within the bound work" "$(tail -1 $tmp/err)"
bin/glmc compile $M/gc_graph.lua --weights $tmp/hf -o $tmp/x.plan --lua-time 0 2>$tmp/err
rc=$?
[ $rc = 2 ] && grep -q "^glmc: --lua-time must be a number of seconds in \[0.01, 86400\], got 0$" $tmp/err &&
	ok "--lua-time 0 refused as a usage error" || bad "--lua-time 0 refused as a usage error" "rc $rc: $(cat $tmp/err)"

# ---- E: errors name file:line ----
expect_fail "error() names its line" "error_nil.lua:2: the model raised an error whose value is nil, not a message" \
	bin/glmc compile $M/error_nil.lua --weights $tmp/hf -o $tmp/x.plan
expect_fail "error({}) names its line" "error_table.lua:3: the model raised an error whose value is table, not a message" \
	bin/glmc compile $M/error_table.lua --weights $tmp/hf -o $tmp/x.plan
# config.json values of the wrong type or range: the file and the key, at compile time
for kv in '"num_hidden_layers": 0' '"num_hidden_layers": -2' '"max_position_embeddings": -1' '"hidden_size": "64"' '"rms_norm_eps": "x"'; do
	key=${kv%%:*}
	sed "s/^\( *\)$key: [^,]*/\1$kv/" $FIX/llama/config.json >$tmp/bad.json
	expect_fail "config.json with $kv refused naming the key" "$tmp/bad.json: key '${key//\"/}' (hyperparameter" \
		bin/glmc compile models/llama.lua --config $tmp/bad.json --random-weights f32 -o $tmp/x.plan
done
# ---- G: a missing tensor fails as the graph is built; compile time linear in layers ----
mkdir -p $tmp/huge
cp $FIX/llama/model.safetensors $tmp/huge/
sed 's/"num_hidden_layers": [0-9]*/"num_hidden_layers": 1000000/' $FIX/llama/config.json >$tmp/huge/config.json
start=$(date +%s%N)
expect_fail "1,000,000 layers of a 2-layer checkpoint fail at the first missing tensor" \
	"llama.lua:10: parameter 'blk.2.attn_norm.weight': tensor 'model.layers.2.input_layernorm.weight' not found" \
	bin/glmc compile models/llama.lua --weights $tmp/huge -o $tmp/x.plan
ms=$((($(date +%s%N) - start) / 1000000))
[ $ms -lt 2000 ] && ok "... in ${ms} ms" || bad "the missing tensor found in under 2 s" "${ms} ms"
# 5,000 layers (130,000 nodes, 45,000 parameters) through every pass but NVRTC: seconds, not minutes
sed 's/"num_hidden_layers": [0-9]*/"num_hidden_layers": 5000/' $FIX/llama/config.json >$tmp/l5k.json
TIMEFORMAT=%U
cpu=$( { time timeout 30 bin/glmc dump models/llama.lua --config $tmp/l5k.json --random-weights f32 --after memplan \
	>/dev/null 2>$tmp/err; } 2>&1)
rc=$?
[ $rc = 0 ] && awk -v c="$cpu" 'BEGIN { exit !(c < 8) }' && ok "5,000 layers planned in ${cpu} s of CPU" ||
	bad "5,000 layers planned in under 8 s of CPU" "rc $rc, ${cpu} s: $(head -c 300 $tmp/err)"

# control bytes in names from a checkpoint are printed escaped (here a renamed safetensors tensor)
cp -r $tmp/hf $tmp/hfc
python3 - "$tmp/hfc/model.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
h['evil\x1b[31m\nname'] = h.pop('model.norm.weight')
s = json.dumps(h).encode()
s += b' ' * (-len(s) % 8)
open(sys.argv[1], 'wb').write(struct.pack('<Q', len(s)) + s + b[8 + n:])
PY
bin/glmc inspect $tmp/hfc >$tmp/out 2>&1
grep -qF 'evil\x1b[31m\x0aname' $tmp/out && ! grep -q $'\x1b' $tmp/out &&
	ok "glmc inspect escapes control bytes in tensor names" || bad "glmc inspect escapes control bytes" "$(grep -a evil $tmp/out)"
exit 0
