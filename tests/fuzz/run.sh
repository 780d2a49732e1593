#!/usr/bin/env bash
# tests/fuzz/run.sh SECONDS — build the libFuzzer targets (GGUF and safetensors readers, plan loading
# through weight binding, the Lua front end with model source as input, glmrun serve's request bodies
# through parsing and validation) with clang,
# AddressSanitizer and UBSan against the sources directly, then run each for SECONDS seconds (one
# after the other; FUZZ_JOBS=parallel runs them side by side; FUZZ_ONLY=NAME runs one) and print the exec counts.
# Corpora live in build/fuzz/corpus_*; crashes are written to build/fuzz/ and fail the script.
set -u
secs=${1:-60}
cd "$(dirname "$0")/../.."
out=build/fuzz
mkdir -p "$out"

if ! command -v clang >/dev/null; then
	echo "run.sh: installing clang" >&2
	apt-get install -y clang libclang-rt-14-dev >/dev/null || exit 1
fi

CFLAGS="-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
	-fno-sanitize-recover=undefined -Iops -Iruntime -Icompiler"
build() {
	clang $CFLAGS "$@" /usr/lib/x86_64-linux-gnu/libjansson.a -lm -o "$out/$name" || exit 1
}
name=fuzz_gguf; build tests/fuzz/fuzz_gguf.c runtime/gguf.c ops/quant.c compiler/arena.c # arena.c: seterr
name=fuzz_st; build tests/fuzz/fuzz_st.c runtime/st.c runtime/rfile.c compiler/arena.c
# Plans through weight binding, and model sources through the front end: the whole library (the
# verifier and the CPU executor included), compiled once into an archive both targets link.
make -s build/gen/kernels_cuh.c || exit 1
mkdir -p "$out/lib"
LIBOBJ=
for f in $(ls compiler/*.c ops/*.c runtime/*.c | grep -v '/main\.c$') build/gen/kernels_cuh.c; do
	o=$out/lib/$(echo "$f" | tr / _).o
	LIBOBJ="$LIBOBJ $o"
	[ "$o" -nt "$f" ] && [ "$o" -nt "$0" ] && [ -z "$(find compiler ops runtime -name '*.h' -newer "$o")" ] && continue
	rm -f "$o" # a failed compile leaves none, and ar below fails
	clang ${CFLAGS/fuzzer,/fuzzer-no-link,} -I/usr/include/lua5.4 -I/usr/local/cuda/include -c "$f" -o "$o" &
	[ "$(jobs -r | wc -l)" -ge 2 ] && wait -n
done
wait
rm -f "$out/libglm_fuzz.a" && ar rcs "$out/libglm_fuzz.a" $LIBOBJ || exit 1
LUALIBS="/usr/lib/x86_64-linux-gnu/liblua5.4.a /usr/lib/x86_64-linux-gnu/libpcre2-8.a /usr/lib/x86_64-linux-gnu/libz.a -ldl -lpthread"
name=fuzz_plan; build tests/fuzz/fuzz_plan.c "$out/libglm_fuzz.a" $LUALIBS
name=fuzz_lua; build tests/fuzz/fuzz_lua.c "$out/libglm_fuzz.a" $LUALIBS
name=fuzz_serve; build tests/fuzz/fuzz_serve.c "$out/libglm_fuzz.a" $LUALIBS /usr/lib/x86_64-linux-gnu/libmicrohttpd.a -lgnutls

# Seeds: a few real files cut down to their first 64 KiB (headers), and generated small files.
seed() {
	local dir=$out/corpus_$1
	mkdir -p "$dir"
	shift
	for f in "$@"; do
		[ -f "$f" ] && head -c 65536 "$f" >"$dir/seed_$(basename "$f")"
	done
}
# Small valid GGUF files (every value type, every supported tensor type) and a small safetensors
# file come from mkseed.
seed gguf ../shared/fixtures/gguf/quants.gguf ../shared/fixtures/vocab/ggml-vocab-llama-spm.gguf
seed st ../shared/fixtures/hf/llama/model.safetensors ../shared/fixtures/hf/qwen3/model.safetensors
# Lua: the real model files and the library, and the hostile models of tests/models (endless loops,
# finalizers, backtracking patterns, string bombs, errors that are not strings).
mkdir -p "$out/corpus_lua"
for f in models/*.lua models/lib/*.lua tests/models/*.lua; do
	cp "$f" "$out/corpus_lua/seed_$(echo "$f" | tr / _)"
done
mkdir -p "$out/corpus_plan"
make -s bin/glmc || exit 1
bin/glmc compile models/llama.lua --weights ../shared/fixtures/hf/llama -o "$out/corpus_plan/llama.plan" 2>/dev/null
bin/glmc compile models/llama.lua --weights ../shared/fixtures/hf/llama -O0 -o "$out/corpus_plan/llama-O0.plan" 2>/dev/null
bin/glmc compile models/llama.lua --weights ../shared/fixtures/hf/llama --tp 2 -o "$out/corpus_plan/llama-tp2.plan" 2>/dev/null
# Request bodies: the shapes tests/serve_client.py sends; the server's vocabulary is GPT-2's first 512
# tokens with ChatML's special tokens and Qwen3's chat template (as tests/serve.sh builds it).
mkdir -p "$out/corpus_serve"
i=0
for b in '{"prompt": "Hello world", "max_tokens": 5}' '{"prompt": [1, 2, 3], "temperature": 0.8, "seed": 5, "top_k": 40}' \
	'{"prompt": [[7, 8]], "stop": ["a", "b"], "stream": true, "top_p": 0.9}' \
	'{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], "max_completion_tokens": 3}' \
	'{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, {"role": "assistant", "content": null}], "n": 1, "logprobs": false}'; do
	# the first byte (fuzz_serve.c): bit 0 chat, bit 1 a sampling server, bits 2-3 the context (1, 8, 96, 4096)
	c=0
	case $b in *messages*) c=1 ;; esac
	for sel in $((c + 8)) $((c + 14)) $((c + 4)); do
		printf "\\$(printf %03o $sel)%s" "$b" >"$out/corpus_serve/seed_${i}_$sel"
	done
	i=$((i + 1))
done
make -s build/tools/mkgguf build/tools/addvocab || exit 1
build/tools/mkgguf ../shared/fixtures/hf/llama "$out/serve_base.gguf" >/dev/null &&
	build/tools/addvocab "$out/serve_base.gguf" ../shared/fixtures/vocab/ggml-vocab-gpt-2.gguf 512 "$out/serve_tok.gguf" \
		--special "<|im_start|>" --special "<|im_end|>" --special "<|endoftext|>" \
		--chat-template "$(cat tests/data/templates/qwen3.jinja)" --eos "<|im_end|>" >/dev/null || exit 1
export GLM_FUZZ_SERVE_TOK=$out/serve_tok.gguf
clang -std=c11 -D_GNU_SOURCE -O1 -Iops -Iruntime -Icompiler tests/fuzz/mkseed.c runtime/gguf.c ops/quant.c runtime/st.c runtime/rfile.c compiler/arena.c \
	/usr/lib/x86_64-linux-gnu/libjansson.a -lm -o "$out/mkseed" &&
	"$out/mkseed" "$out/corpus_gguf" "$out/corpus_st" || exit 1

run() {
	local t=$1
	[ -n "${FUZZ_ONLY:-}" ] && [ "$FUZZ_ONLY" != "$t" ] && return 0 # FUZZ_ONLY=fuzz_serve: that target alone
	local log=$out/$t.log ml=65536
	[ $t = fuzz_plan ] && ml=1048576 # plans carry their CUDA source and cubin
	# fuzz_lua: leaks checked after each input (LeakSanitizer); its Lua state is capped at 64 MiB.
	"$out/$t" -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2048 -max_len=$ml -detect_leaks=1 \
		-dict="tests/fuzz/${t#fuzz_}.dict" -artifact_prefix="$out/$t-" "$out/corpus_${t#fuzz_}" >"$log" 2>&1
	local rc=$?
	local execs
	execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
	echo "$t: ${secs}s, ${execs:-?} execs, exit $rc"
	[ $rc -eq 0 ] || { tail -40 "$log"; ls "$out"/fuzz_lua-current-*.lua 2>/dev/null | sed 's/^/last Lua input: /'; return 1; }
}
rm -f "$out"/fuzz_lua-current-*.lua # a hard-limit exit leaves its input here
fail=0
if [ "${FUZZ_JOBS:-}" = parallel ]; then
	run fuzz_gguf & p1=$!
	run fuzz_st & p2=$!
	run fuzz_plan & p3=$!
	run fuzz_lua & p4=$!
	run fuzz_serve & p5=$!
	wait $p1 || fail=1
	wait $p2 || fail=1
	wait $p3 || fail=1
	wait $p4 || fail=1
	wait $p5 || fail=1
else
	run fuzz_gguf || fail=1
	run fuzz_st || fail=1
	run fuzz_plan || fail=1
	run fuzz_lua || fail=1
	run fuzz_serve || fail=1
fi
exit $fail
