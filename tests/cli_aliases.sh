#!/usr/bin/env bash
# tests/cli_aliases.sh — glmrun as a llama.cpp or vLLM user types it. -m WEIGHTS: weights (a Hugging Face
# directory or a GGUF file) where the plan goes are compiled once by the glmc beside glmrun into
# $GLMC_CACHE/plans and the plan reused; the tokens equal those of a plan compiled by hand; a changed config
# compiles anew; a missing path is one error line. -ub N: the prompt in prefill steps of N tokens gives the
# logits of one step (1e-5). The aliases and --opt=value give what the canonical flags give. CPU only.
# Prints "ok - NAME" / "FAIL - NAME: why" lines for tests/run.sh to count.
set -u
cd "$(dirname "$0")/.."
FIX=../shared/fixtures/hf
CMP=build/tools/cmplogits
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1: $2"; }
export GLMC_CACHE=$tmp/cache

p=$($CMP --prompt $FIX/llama)
cp -r $FIX/llama $tmp/llama
bin/glmc compile models/llama.lua --weights $tmp/llama -o $tmp/hand.plan 2>/dev/null
want=$(bin/glmrun $tmp/hand.plan --device cpu --tokens "$p" -n 6 2>/dev/null)

got=$(bin/glmrun -m $tmp/llama --device cpu --tokens "$p" -n 6 2>$tmp/err)
n=$(ls $tmp/cache/plans/*.plan 2>/dev/null | wc -l)
[ -n "$want" ] && [ "$got" = "$want" ] && grep -q "compiling $tmp/llama into $tmp/cache/plans/llama-" $tmp/err && [ "$n" = 1 ] &&
	ok "-m DIR compiles into the cache and gives the hand-compiled plan's tokens" ||
	bad "-m DIR" "got '$got' want '$want'; $n plans; $(head -c 300 $tmp/err)"

got=$(bin/glmrun --device cpu -m $tmp/llama --tokens "$p" -n 6 2>$tmp/err)
[ "$got" = "$want" ] && ! grep -q compiling $tmp/err && [ "$(ls $tmp/cache/plans/*.plan | wc -l)" = 1 ] &&
	ok "a second -m run reuses the cached plan" || bad "-m reuse" "got '$got'; $(head -c 300 $tmp/err)"

touch -d '2001-01-01' $tmp/llama/config.json
bin/glmrun $tmp/llama --device cpu --tokens "$p" -n 2 >/dev/null 2>$tmp/err
[ "$(ls $tmp/cache/plans/*.plan | wc -l)" = 2 ] && grep -q compiling $tmp/err &&
	ok "a changed config.json compiles anew (the weights given as PLAN, without -m, too)" ||
	bad "-m after a change" "$(ls $tmp/cache/plans) $(head -c 300 $tmp/err)"

if build/tools/mkgguf $FIX/llama $tmp/l.gguf >/dev/null 2>&1; then
	got=$(bin/glmrun -m $tmp/l.gguf --device cpu --tokens "$p" -n 6 2>$tmp/err)
	[ "$got" = "$want" ] && grep -q "compiling $tmp/l.gguf" $tmp/err && ok "-m model.gguf: the GGUF conversion's plan, the same tokens" ||
		bad "-m model.gguf" "got '$got' want '$want'; $(head -c 300 $tmp/err)"
else
	bad "-m model.gguf" "mkgguf failed"
fi

bin/glmrun -m $tmp/nonexistent --device cpu --tokens 1 >$tmp/out 2>$tmp/err
rc=$?
[ $rc = 1 ] && [ "$(wc -l <$tmp/err)" = 1 ] && grep -q "nonexistent" $tmp/err && ok "-m with a missing path: one error line" ||
	bad "-m missing path" "rc $rc: $(cat $tmp/err)"

# -ub 3 (--ubatch-size): a 20-token prompt in 7 prefill steps against the cache, logits of every row as one step.
bin/glmrun $tmp/hand.plan --device cpu --tokens "$p" -n 4 --dump-logits $tmp/one.f32 >$tmp/one.ids 2>/dev/null
bin/glmrun $tmp/hand.plan --device cpu --tokens "$p" -n 4 -ub 3 --dump-logits $tmp/ub.f32 >$tmp/ub.ids 2>/dev/null
r=$($CMP --pair $tmp/ub.f32 $tmp/one.f32 1e-5 2>&1)
[ $? = 0 ] && cmp -s $tmp/one.ids $tmp/ub.ids && ok "-ub 3: a prompt in prefill steps of 3 tokens gives one step's logits ($r)" ||
	bad "-ub 3" "$r; $(cat $tmp/ub.ids) vs $(cat $tmp/one.ids)"

# llama.cpp / vLLM spellings and --opt=value against the canonical flags (sampled, so every value matters).
want=$(bin/glmrun $tmp/hand.plan --device cpu --tokens "$p" -n 5 --temp 0.9 --top-k 20 --seed 7 --max-seq 40 2>/dev/null)
got=$(bin/glmrun --device=cpu -m $tmp/hand.plan --tokens="$p" --max-tokens 5 --temperature=0.9 --top-k=20 -s 7 -c 40 2>/dev/null)
got2=$(bin/glmrun $tmp/hand.plan --device cpu --tokens "$p" --n-predict=5 --temp 0.9 --top-k 20 --seed=7 --ctx-size=40 2>/dev/null)
[ -n "$want" ] && [ "$got" = "$want" ] && [ "$got2" = "$want" ] && ok "-m, --max-tokens, --n-predict, --temperature, -s, -c, --ctx-size and --opt=value as the canonical flags" ||
	bad "aliases" "'$got' / '$got2' vs '$want'"

# -f FILE: a FIFO is refused in one line instead of blocking (the fixture has no tokenizer, so -f's text path is
# checked by hand only: it is -p -'s read_all).
mkfifo $tmp/fifo
timeout 10 bin/glmrun $tmp/hand.plan --device cpu -f $tmp/fifo -n 2 >/dev/null 2>$tmp/err
rc=$?
[ $rc = 1 ] && [ "$(wc -l <$tmp/err)" = 1 ] && grep -q "fifo: not a regular file" $tmp/err && ok "-f with a FIFO: one error line, no wait" ||
	bad "-f FIFO" "rc $rc: $(cat $tmp/err)"
