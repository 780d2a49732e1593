#!/usr/bin/env bash
# tests/fuzz/serve.sh [SECONDS] — fuzz glmrun serve's request bodies (default 600 s; not part of `make test`):
# build glmrun with AddressSanitizer and UBSan (build/fuzz/glmrun-asan), serve the llama fixture on the
# CPU, run tests/fuzz/serve_fuzz.py against it, then SIGTERM. Fails on a bad answer, a dead server, an
# unclean exit or any sanitizer report in the server's log (build/fuzz/serve.log).
set -u
secs=${1:-600}
cd "$(dirname "$0")/../.."
out=build/fuzz
mkdir -p "$out"
make -s build/gen/kernels_cuh.c bin/glmc build/tools/mkgguf build/tools/addvocab || exit 1
LIB=$(ls compiler/passes/*.c compiler/cli/*.c ops/*.c runtime/*/*.c | grep -v 'compiler/cli/main\.c$')
L=/usr/lib/x86_64-linux-gnu
if [ ! -x "$out/glmrun-asan" ] || [ -n "$(find runtime compiler ops -newer "$out/glmrun-asan" -name '*.[ch]' | head -1)" ]; then
	echo "serve.sh: building $out/glmrun-asan" >&2
	cc -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
		-Iops -Iruntime/core -Iruntime/formats -Iruntime/gpu -Iruntime/exec -Icompiler/passes -Iruntime/cli -Icompiler/cli -I/usr/include/lua5.4 -I/usr/local/cuda/include $LIB build/gen/kernels_cuh.c \
		$L/libmicrohttpd.a -lgnutls $L/liblua5.4.a $L/libjansson.a $L/libpcre2-8.a $L/libz.a -lm -ldl -lpthread \
		-o "$out/glmrun-asan" || exit 1
fi
tmp=$(mktemp -d)
trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
build/tools/mkgguf ../shared/fixtures/hf/llama "$tmp/llama.gguf" >/dev/null &&
	build/tools/addvocab "$tmp/llama.gguf" ../shared/fixtures/vocab/ggml-vocab-gpt-2.gguf 512 "$tmp/chatml.gguf" \
		--special "<|im_start|>" --special "<|im_end|>" --chat-template "$(cat tests/data/templates/qwen3.jinja)" \
		--eos "<|im_end|>" >/dev/null &&
	bin/glmc compile models/llama.lua --weights "$tmp/chatml.gguf" -o "$tmp/p.plan" 2>/dev/null || exit 1
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ASAN_OPTIONS=detect_leaks=0 "$out/glmrun-asan" serve "$tmp/p.plan" --device cpu --port "$port" --max-seq 64 --max-seqs 4 \
	--max-num-batched-tokens 16 --max-queue 16 2>"$out/serve.log" &
pid=$!
for _ in $(seq 200); do
	python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1)" 2>/dev/null && break
	sleep 0.1
done
python3 tests/fuzz/serve_fuzz.py "http://127.0.0.1:$port" "$secs"
rc=$?
kill -TERM $pid
wait $pid
src=$?
if grep -q "Sanitizer\|runtime error" "$out/serve.log"; then
	grep -m5 "Sanitizer\|runtime error" "$out/serve.log"
	rc=1
fi
[ $src -eq 0 ] || { echo "serve.sh: the server exited with status $src" && rc=1; }
[ $rc -eq 0 ] && echo "serve.sh: no crash, no sanitizer report, clean exit"
exit $rc
