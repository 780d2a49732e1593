#!/usr/bin/env bash
# tests/tok.sh — `glmc tokenize` on llama.cpp's vocab test vectors (../shared/fixtures/vocab): each .inp
# string goes through stdin and must print exactly its .out ids; the ids must decode (--decode) back to the
# same bytes. Prints "ok - NAME" / "FAIL - NAME: why" lines; exits non-zero when anything failed.
# GLMC=path overrides bin/glmc. The .inp strings are separated by lines "__ggml_vocab_test__": the newline before such a line ends the
# marker, not the string (as llama.cpp's test-tokenizer-0 reads them).
set -u
cd "$(dirname "$0")/.."
glmc=${GLMC:-bin/glmc}
vocab=../shared/fixtures/vocab
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
. tests/vocab_strings.sh

fail() {
	echo "FAIL - $1"
	failed=1
}

# Is the command there at all? (glmc answers "unknown command" until tokenize is wired into main.)
probe=$("$glmc" tokenize "$vocab/ggml-vocab-gpt-2.gguf" </dev/null 2>&1)
if printf '%s' "$probe" | grep -q "unknown command"; then
	fail "glmc tokenize not wired"
	exit 1
fi

for name in gpt-2 deepseek-coder llama-spm; do
	gguf=$vocab/ggml-vocab-$name.gguf
	if [ ! -r "$gguf.inp" ] || [ ! -r "$gguf.out" ]; then
		fail "tok.sh $name: missing $gguf.inp/.out"
		continue
	fi
	vocab_strings "tok.sh $name" "$gguf" "$gguf.inp" "$gguf.out"
done

# flags and errors
gpt2=$vocab/ggml-vocab-gpt-2.gguf
out=$(printf 'Hello<|endoftext|>' | "$glmc" tokenize "$gpt2" --parse-special 2>&1 | tr '\n' ' ')
out=${out% }
[ "$out" = "15496 50256" ] && echo "ok - tok.sh --parse-special" || fail "tok.sh --parse-special: got '$out'"
out=$(printf 'Hello world' | "$glmc" tokenize $vocab/ggml-vocab-llama-spm.gguf --add-special 2>&1 | tr '\n' ' ')
out=${out% }
[ "$out" = "1 15043 3186" ] && echo "ok - tok.sh --add-special" || fail "tok.sh --add-special: got '$out'"
out=$(printf '1 2 x' | "$glmc" tokenize "$gpt2" --decode 2>&1)
rc=$?
[ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && printf '%s' "$out" | grep -q "not a token id" &&
	echo "ok - tok.sh bad id: one-line error" || fail "tok.sh bad id: rc $rc, '$(printf '%s' "$out" | tr '\n' ' ')'"
out=$("$glmc" tokenize "$tmp/nonexistent.gguf" </dev/null 2>&1)
rc=$?
[ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && echo "ok - tok.sh missing weights: one-line error" ||
	fail "tok.sh missing weights: rc $rc, '$(printf '%s' "$out" | tr '\n' ' ')'"
"$glmc" tokenize --bogus </dev/null >/dev/null 2>&1
[ $? -eq 2 ] && echo "ok - tok.sh bad option: exit 2" || fail "tok.sh bad option: not exit 2"
# a directory holding only a tokenizer.json, and the .json file itself
mkdir -p "$tmp/hf"
printf '%s' '{"added_tokens":[],"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},'\
'"model":{"type":"BPE","vocab":{"h":0,"i":1,"hi":2,"\u0120":3,"\u0120hi":4},"merges":["h i","\u0120 hi"]}}' >"$tmp/hf/tokenizer.json"
out=$(printf 'hi hi' | "$glmc" tokenize "$tmp/hf" 2>&1 | tr '\n' ' ')
out2=$(printf 'hi hi' | "$glmc" tokenize "$tmp/hf/tokenizer.json" 2>&1 | tr '\n' ' ')
[ "$out" = "2 4 " ] && [ "$out2" = "2 4 " ] && echo "ok - tok.sh tokenizer.json directory and file" ||
	fail "tok.sh tokenizer.json: got '$out' and '$out2'"
"$glmc" tokenize --help | grep -q "usage: glmc tokenize" && echo "ok - tok.sh --help" || fail "tok.sh --help"

exit $failed
