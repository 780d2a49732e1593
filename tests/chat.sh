#!/usr/bin/env bash
# tests/chat.sh — glmrun --chat and the chat templates end to end on the CPU. The llama fixture gets GPT-2's
# first 512 tokens as its vocabulary with its top ids turned into each family's special tokens and the real
# chat template of a model of that family (tests/data/templates; build/tools/addvocab); the tiny random
# model babbles, so the checks are about mechanics: each turn's prompt is exactly the template's text (the
# later turns: what the template puts after the previous answer), an answer cut short by -n has its last
# token fed before the next turn's text (so the cache holds what was shown), the second turn is appended at
# the next free position of the KV cache and gives the same tokens as prefilling the whole conversation at
# once (also on the GLM-5 fixture: MLA and DSA), a message may span lines, seeds repeat, -p takes one
# templated turn, --chat-template takes a file or a built-in name, a full context and Ctrl-C end the chat
# cleanly, and bad templates and options are refused in one line. Prints "ok - NAME" / "FAIL - NAME: why";
# exits non-zero when anything failed.
set -u
cd "$(dirname "$0")/.."
FIX=../shared/fixtures/hf
VOCAB=../shared/fixtures/vocab/ggml-vocab-gpt-2.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

ok() { echo "ok - chat.sh $1"; }
bad() {
	echo "FAIL - chat.sh $1: $2"
	failed=1
}

# expect_fail NAME SUBSTRING CMD...: CMD (stdin: two lines) must exit 1 with one line on stderr holding
# SUBSTRING.
expect_fail() {
	local name=$1 want=$2
	shift 2
	printf 'Hello\nAgain\n' | "$@" >"$tmp/out" 2>"$tmp/err"
	local rc=$?
	if [ $rc -ne 1 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -qF -- "$want" "$tmp/err"; then
		bad "$name" "rc $rc, stderr '$(head -c 300 "$tmp/err" | tr '\n' '|')', want one line with '$want'"
	else
		ok "$name"
	fi
}

# mkvocab NAME TEMPLATE SPECIAL... [--bos TEXT] [--eos TEXT]: $tmp/NAME.gguf, the llama fixture with a chat
# vocabulary.
mkvocab() {
	local name=$1 tmpl=$2 args=()
	shift 2
	while [ $# -gt 0 ]; do
		case $1 in
		--bos | --eos) args+=("$1" "$2") && shift ;;
		*) args+=(--special "$1") ;;
		esac
		shift
	done
	[ -n "$tmpl" ] && args+=(--chat-template "$tmpl")
	build/tools/addvocab "$tmp/llama.gguf" $VOCAB 512 "$tmp/$name.gguf" "${args[@]}" >/dev/null
}
T=tests/data/templates

# The stats lines of a chat run ($1: stderr file): prompt ids of turn $2, answer ids of turn $2, the positions
# the cache holds after turn $2, the first position of turn $2.
prompt_ids() { sed -n "s/^stats: chat turn $2: prompt [0-9]* tokens at positions [0-9]*-[0-9]*: ids //p" "$1"; }
answer_ids() { sed -n "s/^stats: chat turn $2: answer [0-9]* tokens ([^)]*): ids \(.*\); the cache holds .*/\1/p" "$1"; }
held() { sed -n "s/^stats: chat turn $2: answer .*; the cache holds \([0-9]*\) positions$/\1/p" "$1"; }
first_pos() { sed -n "s/^stats: chat turn $2: prompt [0-9]* tokens at positions \([0-9]*\)-.*/\1/p" "$1"; }
reason() { sed -n "s/^stats: chat turn $2: answer [0-9]* tokens (\([^)]*\)).*/\1/p" "$1"; }
tokenize() { printf '%s' "$2" | bin/glmc tokenize "$1" --parse-special; }

# check_chat NAME PLAN TOKENIZER SYSTEM TURN1_TEXT TURN2_TEXT [glmrun options...]: two turns ("Hello",
# "Again") with greedy answers of 6 tokens; each turn's prompt ids are the tokenized template text, turn 2
# starts where turn 1 left the cache, and its answer equals a single prefill of the whole conversation.
check_chat() {
	local name=$1 plan=$2 tk=$3 sys=$4 t1=$5 t2=$6
	shift 6
	printf 'Hello\nAgain\n' | bin/glmrun "$plan" --tokenizer "$tk" --device cpu --chat -n 6 --system "$sys" --stats "$@" \
		>"$tmp/$name.out" 2>"$tmp/$name.err"
	local rc=$?
	if [ $rc -ne 0 ]; then
		bad "$name: two turns" "rc $rc: $(grep -v '^stats:' "$tmp/$name.err" | head -c 300)"
		return
	fi
	local e=$tmp/$name.err
	[ -n "$(answer_ids "$e" 1)" ] && [ -n "$(answer_ids "$e" 2)" ] && grep -q "^glmrun: chat of 2 turns: prefill" "$e" &&
		[ -s "$tmp/$name.out" ] && ok "$name: answers two turns" || bad "$name: answers two turns" "$(head -c 300 "$e")"
	local w1 w2
	w1=$(tokenize "$tk" "$t1")
	w2=$(tokenize "$tk" "$t2")
	[ "$(prompt_ids "$e" 1)" = "$w1" ] && ok "$name: turn 1 is the template's text" ||
		bad "$name: turn 1 is the template's text" "ids '$(prompt_ids "$e" 1)', want '$w1'"
	local p2 why last
	p2=$(prompt_ids "$e" 2)
	why=$(reason "$e" 1)
	if [ "$why" != "end of turn" ]; then
		# answer 1 was cut short: the token the user saw last is fed first, then the template's text
		last=$(answer_ids "$e" 1 | awk '{ print $NF }')
		[ -n "$last" ] && [ "${p2%% *}" = "$last" ] && ok "$name: turn 2 feeds answer 1's last token first (answer cut by $why)" ||
			bad "$name: turn 2 feeds answer 1's last token first" "turn 2 ids '$p2', answer 1 ends with '$last' ($why)"
		p2=${p2#* }
	fi
	[ "$p2" = "$w2" ] && ok "$name: turn 2 closes the answer and adds the user turn" ||
		bad "$name: turn 2 closes the answer and adds the user turn" "ids '$p2', want '$w2'"
	local h s
	h=$(held "$e" 1)
	s=$(first_pos "$e" 2)
	[ -n "$s" ] && [ "$s" -gt 0 ] && [ "$s" = "$h" ] && ok "$name: turn 2 is appended at position $s, where turn 1 left the cache" ||
		bad "$name: turn 2 is appended where turn 1 left the cache" "turn 1 holds '$h', turn 2 starts at '$s'"
	# the cache holds turn 1's prompt and answer, then turn 2's ids (which start with the answer's last token
	# when it was cut short; an end-of-turn token is never fed, turn 2's text starts with it)
	local a1 all want got
	a1=$(answer_ids "$e" 1)
	all="$(prompt_ids "$e" 1) $(echo $a1 | awk '{ NF--; print }') $(prompt_ids "$e" 2)"
	want=$(answer_ids "$e" 2)
	got=$(bin/glmrun "$plan" --device cpu --tokens "$(echo $all | tr ' ' ',')" -n "$(echo $want | wc -w)" 2>&1)
	[ -n "$want" ] && [ "$got" = "$want" ] && ok "$name: the appended turn answers as a prefill of the whole conversation" ||
		bad "$name: the appended turn answers as a prefill of the whole conversation" "chat '$want', prefill '$got'"
}

build/tools/mkgguf $FIX/llama "$tmp/llama.gguf" >/dev/null || {
	bad setup "mkgguf failed"
	exit 1
}
GLM=("[gMASK]" "<sop>" "<|system|>" "<|user|>" "<|assistant|>" "<|observation|>" "<think>" "</think>" "<|endoftext|>")
mkvocab chatml "$(cat $T/qwen3.jinja)" "<|im_start|>" "<|im_end|>" "<|endoftext|>" "<think>" "</think>" --eos "<|im_end|>"
mkvocab glm5 "$(cat $T/glm-4.7.jinja)" "${GLM[@]}" --eos "<|endoftext|>"
mkvocab glm4 "$(cat $T/glm-4.6.jinja)" "${GLM[@]}" --eos "<|endoftext|>"
mkvocab deepseek3 "$(cat $T/deepseek-v3.jinja)" "<｜begin▁of▁sentence｜>" "<｜end▁of▁sentence｜>" "<｜User｜>" "<｜Assistant｜>" \
	--bos "<｜begin▁of▁sentence｜>" --eos "<｜end▁of▁sentence｜>"
mkvocab llama3 "$(cat $T/llama-3.3.jinja)" "<|begin_of_text|>" "<|start_header_id|>" "<|end_header_id|>" "<|eot_id|>" \
	--bos "<|begin_of_text|>" --eos "<|eot_id|>"
mkvocab plain ""
mkvocab broken $'{% for m in messages %}\n{{ raise_exception("no " ~ m.role ~ " messages here") }}{% endfor %}'
P=$tmp/chat.plan
bin/glmc compile models/llama.lua --weights "$tmp/chatml.gguf" -o "$P" 2>/dev/null || {
	bad setup "compile failed"
	exit 1
}

# Every family: the exact template text of both turns, the appended turn, the prefill equivalence.
check_chat chatml "$P" "$tmp/chatml.gguf" "Be brief." \
	$'<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n' \
	$'<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n'
check_chat chatml-nothink "$P" "$tmp/chatml.gguf" "Be brief." \
	$'<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' \
	$'<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' --no-think
check_chat glm5 "$P" "$tmp/glm5.gguf" "Be brief." \
	'[gMASK]<sop><|system|>Be brief.<|user|>Hello<|assistant|><think>' '<|user|>Again<|assistant|><think>'
check_chat glm4 "$P" "$tmp/glm4.gguf" "Be brief." \
	$'[gMASK]<sop><|system|>\nBe brief.<|user|>\nHello<|assistant|>' $'<|user|>\nAgain<|assistant|>'
check_chat deepseek3 "$P" "$tmp/deepseek3.gguf" "Be brief." \
	'<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hello<｜Assistant｜>' '<｜end▁of▁sentence｜><｜User｜>Again<｜Assistant｜>'
check_chat llama3 "$P" "$tmp/llama3.gguf" "Be brief." \
	$'<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n' \
	$'<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAgain<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n'
# --chat-template overrides what the weights say: a built-in format by name, or a template file
check_chat override "$P" "$tmp/glm5.gguf" "Be brief." \
	$'[gMASK]<sop><|system|>\nBe brief.<|user|>\nHello<|assistant|>' $'<|user|>\nAgain<|assistant|>' --chat-template glm4
check_chat override-file "$P" "$tmp/glm5.gguf" "Be brief." \
	$'[gMASK]<sop><|system|>\nBe brief.<|user|>\nHello<|assistant|>' $'<|user|>\nAgain<|assistant|>' --chat-template $T/glm-4.6.jinja

# A message of several lines, between lines of """; the one-line messages around it still work.
printf 'Hi\n"""\nline one\n\nline three\n"""\n"""one """ line"""\n' |
	bin/glmrun "$P" --device cpu --chat -n 2 --stats >"$tmp/ml.out" 2>"$tmp/ml.err"
w1=$(tokenize "$tmp/chatml.gguf" $'<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n')
w2=$(tokenize "$tmp/chatml.gguf" $'<|im_end|>\n<|im_start|>user\nline one\n\nline three<|im_end|>\n<|im_start|>assistant\n')
w3=$(tokenize "$tmp/chatml.gguf" $'<|im_end|>\n<|im_start|>user\none """ line<|im_end|>\n<|im_start|>assistant\n')
p2=$(prompt_ids "$tmp/ml.err" 2)
p3=$(prompt_ids "$tmp/ml.err" 3)
[ "$(prompt_ids "$tmp/ml.err" 1)" = "$w1" ] && [ "${p2#* }" = "$w2" ] && [ "${p3#* }" = "$w3" ] &&
	grep -q "^glmrun: chat of 3 turns" "$tmp/ml.err" && ok 'a message between lines of """ spans lines' ||
	bad 'a message between lines of """ spans lines' "$(grep -v '^stats' "$tmp/ml.err" | head -c 300) turn 2 '$p2' want '$w2'"

# The GLM-5 fixture (MLA over a latent cache, DeepSeek sparse attention) in the glm5 format: appending a
# turn at positions 20+ equals one prefill there too.
if bin/glmc compile models/glm5.lua --weights $FIX/glm_moe_dsa -o "$tmp/glm5.plan" 2>/dev/null; then
	check_chat glm5-model "$tmp/glm5.plan" "$tmp/glm5.gguf" "Be brief." \
		'[gMASK]<sop><|system|>Be brief.<|user|>Hello<|assistant|><think>' '<|user|>Again<|assistant|><think>'
else
	bad "glm5-model compile" "models/glm5.lua on $FIX/glm_moe_dsa"
fi

# Seeds: the same seed gives the same conversation, another seed another one.
run_seed() { printf 'Hello\nAgain\n' | bin/glmrun "$P" --device cpu --chat -n 12 --temp 1.2 --seed "$1" 2>/dev/null | tr -d '\000'; }
s1=$(run_seed 7)
s2=$(run_seed 7)
s3=$(run_seed 8)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && ok "same seed, same conversation" || bad "same seed, same conversation" "'$s1' vs '$s2'"
[ "$s1" != "$s3" ] && ok "another seed, another conversation" || bad "another seed, another conversation" "both '$s1'"

# -p with a chat format: one templated turn, the same answer as -p given the template's text itself;
# --chat -p detects the format like --chat does.
want=$(bin/glmrun "$P" --device cpu -n 8 --ignore-eos 2>/dev/null \
	-p $'<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n')
p1=$(bin/glmrun "$P" --device cpu -p Hello --system "Be brief." --chat-template chatml -n 8 --ignore-eos 2>/dev/null)
p2=$(bin/glmrun "$P" --device cpu -p Hello --system "Be brief." --chat -n 8 --ignore-eos 2>/dev/null)
[ -n "$p1" ] && [ "$p1" = "$want" ] && ok "-p --chat-template answers the templated turn" || bad "-p --chat-template" "'$p1' vs '$want'"
[ "$p1" = "$p2" ] && ok "-p --chat detects the format" || bad "-p --chat detects the format" "'$p2' vs '$p1'"

# A full context ends the chat cleanly, after the turns that fit.
printf 'Hello there\nHow are you\nAnd then\nMore\n' | bin/glmrun "$P" --device cpu --chat -n 16 --max-seq 56 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && grep -q "^glmrun: the context is full" "$tmp/err" && grep -q "^glmrun: chat of [12] turns*:" "$tmp/err" &&
	ok "a full context ends the chat in one line ($(grep -o 'chat of [0-9]* turns*' "$tmp/err"))" ||
	bad "a full context ends the chat" "rc $rc: $(head -c 300 "$tmp/err")"
# ... but a first turn that cannot fit at all is an error (nothing was answered).
expect_fail "a first turn past the context is an error" "the context is full: turn 1 needs" bin/glmrun "$P" --device cpu --chat -n 4 --max-seq 4

# Ctrl-C while the chat waits for the next line ends it (exit 0, the turns so far counted).
mkfifo "$tmp/in"
bin/glmrun "$P" --device cpu --chat -n 4 --stats <"$tmp/in" >"$tmp/out" 2>"$tmp/err" &
pid=$!
exec 3>"$tmp/in"
echo Hello >&3
for _ in $(seq 300); do
	grep -q "^stats: chat turn 1: answer" "$tmp/err" && break
	sleep 0.1
done
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
exec 3>&-
[ $rc -eq 0 ] && grep -q "^glmrun: chat of 1 turn:" "$tmp/err" && ok "Ctrl-C at the prompt ends the chat" ||
	bad "Ctrl-C at the prompt ends the chat" "rc $rc: $(head -c 300 "$tmp/err")"

# Refusals, each in one line.
expect_fail "unknown --chat-template" "--chat-template: 'vicuna' is neither a chat format (glm4, glm5, deepseek3, chatml, llama3) nor a readable template file" \
	bin/glmrun "$P" --device cpu --chat --chat-template vicuna
expect_fail "a vocabulary without the format's tokens" "the llama3 chat format (from the architecture) needs the special token '<|begin_of_text|>', which this vocabulary lacks" \
	bin/glmrun "$P" --device cpu --chat --tokenizer "$tmp/plain.gguf"
expect_fail "a template's raise_exception ends the chat in one line with its line" "broken.gguf chat template:2: no user messages here" \
	bin/glmrun "$P" --device cpu --chat --tokenizer "$tmp/broken.gguf"
expect_fail "--chat-template neither a name nor a file" "--chat-template: 'vicuna.jinja' is neither a chat format" \
	bin/glmrun "$P" --device cpu --chat --chat-template vicuna.jinja
expect_fail "--chat-template with missing tokens" "the deepseek3 chat format (from the --chat-template) needs the special token" \
	bin/glmrun "$P" --device cpu -p Hi --chat-template deepseek3
expect_fail "--no-think without a switch" "--no-think: the template's chat format (from the chat template) has no thinking switch" \
	bin/glmrun "$P" --device cpu --chat --no-think --tokenizer "$tmp/llama3.gguf"
expect_fail "--chat with --tokens" "--tokens takes token ids" bin/glmrun "$P" --chat --tokens 1,2
expect_fail "--system without -p or --chat" "chat options need -p or --chat" bin/glmrun "$P" --system hi
expect_fail "--chat with --dump-logits" "--chat does not take --dump-logits" bin/glmrun "$P" --chat --dump-logits "$tmp/x"
bin/glmrun --help | grep -q -- "--chat-template FILE|NAME" && bin/glmrun --help | grep -q 'a message of several lines' &&
	ok "--help lists the chat options" || bad "--help" "no --chat-template FILE|NAME or multi-line messages"

exit $failed
