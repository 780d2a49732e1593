#!/usr/bin/env bash
# tests/serve.sh — glmrun serve end to end on the CPU, loopback only. The llama fixture gets GPT-2's first 512
# tokens and Qwen3's chat template (as tests/chat.sh makes it); the server runs it with 4 slots of 96
# positions, 8 prompt tokens per step and a 5 ms pause after each decode step (GLMRUN_TEST_STEP_DELAY_MS, so
# the tiny model's requests really overlap), and tests/serve_client.py drives it with the openai package:
# answers equal glmrun alone (--tokens, -p, --chat -p), streaming, stop strings, usage, 32 concurrent
# clients, the metrics, every error status, cancellation, per-request sampling (each request's temperature,
# top_p, top_k and seed, alone and batched, equal glmrun run with those flags). A second server checks
# --api-key, a full queue (503) and a sampling server (--temp: the same tokens as glmrun with that seed; a
# request's own fields replace the server's). A third serves the tp 2 plan on the CPU ranks: its answers
# equal the tp 1 plan's; a fourth the same plan on two GPUs of the simt driver double (real kernels on the CPU):
# its answers equal the tp 1 plan's too. Each must stop cleanly on SIGTERM. Prints "ok - NAME" / "FAIL - NAME: why".
set -u
cd "$(dirname "$0")/.."
FIX=../shared/fixtures/hf
VOCAB=../shared/fixtures/vocab/ggml-vocab-gpt-2.gguf
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
failed=0
ok() { echo "ok - serve.sh $1"; }
bad() {
	echo "FAIL - serve.sh $1: $2"
	failed=1
}

if ! python3 -c "import openai" 2>/dev/null; then
	bad setup "the openai Python package is missing (python3 -m pip install openai; .ci/run installs it)"
	exit 1
fi
build/tools/mkgguf $FIX/llama "$tmp/llama.gguf" >/dev/null &&
	build/tools/addvocab "$tmp/llama.gguf" $VOCAB 512 "$tmp/chatml.gguf" --special "<|im_start|>" --special "<|im_end|>" \
		--special "<|endoftext|>" --chat-template "$(cat tests/data/templates/qwen3.jinja)" --eos "<|im_end|>" >/dev/null &&
	bin/glmc compile models/llama.lua --weights "$tmp/chatml.gguf" -o "$tmp/tiny.plan" 2>/dev/null || {
	bad setup "fixture plan"
	exit 1
}
P=$tmp/tiny.plan

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start NAME ARGS...: glmrun serve in the background (log $tmp/NAME.log); waits for /health. Sets $url, $pid.
start() {
	local name=$1
	shift
	local port
	port=$(free_port)
	GLMRUN_TEST_STEP_DELAY_MS=5 bin/glmrun serve "$P" --port "$port" "$@" 2>"$tmp/$name.log" &
	pid=$!
	pids+=("$pid")
	url=http://127.0.0.1:$port
	for _ in $(seq 100); do
		python3 -c "import urllib.request; urllib.request.urlopen('$url/health', timeout=1)" 2>/dev/null && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	bad "$name: start" "no /health: $(head -c 300 "$tmp/$name.log")"
	return 1
}

# stop NAME: SIGTERM; the server must exit 0 within 10 s and say it stopped.
stop() {
	kill -TERM "$pid"
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		bad "$1: SIGTERM" "still running after 10 s"
		return
	fi
	wait "$pid"
	local rc=$?
	[ $rc -eq 0 ] && grep -q "^glmrun serve: SIGTERM: shutting down" "$tmp/$1.log" && grep -q "^glmrun serve: stopped after" "$tmp/$1.log" &&
		ok "$1: SIGTERM stops the server cleanly (exit 0)" || bad "$1: SIGTERM" "rc $rc: $(tail -c 300 "$tmp/$1.log")"
}

if start main --device cpu --model-name tiny --max-seqs 4 --max-seq 96 --max-num-batched-tokens 8; then
	python3 tests/serve_client.py main "$url" "$P" "$tmp/main.log" "$tmp/chatml.gguf" || failed=1
	stop main
fi
if start alone --device cpu --model-name tiny --max-seqs 4 --max-seq 96 --max-num-batched-tokens 8 --prefill-alone on; then
	python3 tests/serve_client.py alone "$url" "$P" "$tmp/alone.log" "$tmp/chatml.gguf" || failed=1
	stop alone
fi
if start auth --device cpu --api-key sekrit --max-seqs 1 --max-queue 1 --max-seq 96 --temp 0.8 --top-k 40 --seed 5; then
	python3 tests/serve_client.py auth "$url" "$P" "$tmp/auth.log" "$tmp/chatml.gguf" || failed=1
	stop auth
fi

# The same model as a tp 2 plan on the CPU (two rank executors in lockstep): answers equal the tp 1 plan's.
if bin/glmc compile models/llama.lua --weights "$tmp/chatml.gguf" --tp 2 -o "$tmp/tp2cpu.plan" 2>/dev/null; then
	P0=$P
	P=$tmp/tp2cpu.plan
	if start tp2cpu --device cpu --model-name tiny --max-seqs 4 --max-seq 96 --max-num-batched-tokens 8; then
		python3 tests/serve_client.py tp2 "$url" "$P0" "$tmp/tp2cpu.log" "$tmp/chatml.gguf" || failed=1
		stop tp2cpu
	fi
	P=$P0
else
	bad "tp2cpu: compile" "the tp 2 plan of the chat fixture"
fi

# The GPU scheduling path (buckets of rows, the padding slot, prefill on the ranks) through the test doubles
# of the driver and NCCL, on a tp 2 plan (ids as prompts: the fixture directory has no tokenizer).
if bin/glmc compile models/llama.lua --weights $FIX/llama --tp 2 -o "$tmp/tp2.plan" 2>/dev/null; then
	P0=$P
	P=$tmp/tp2.plan
	if LD_LIBRARY_PATH=build/fake GLMRUN_NCCL=build/fake/libnccl.so.2 start fake --device cuda --max-seqs 3 --max-seq 64 \
		--max-num-batched-tokens 8; then
		python3 tests/serve_client.py fake "$url" "$P" "$tmp/fake.log" "" || failed=1
		stop fake
	fi
	P=$P0
else
	bad "fake: compile" "the tp 2 plan"
fi

# The same tp 2 plan computing real logits on two GPUs of the simt driver double (tests/simt_tp.sh: each rank's
# kernels on the CPU on its own thread, the NCCL double summing): the GPU path's answers, greedy and sampled,
# equal the tp 1 plan's glmrun on the CPU, concurrent requests batched into graph buckets.
if bin/glmc compile models/llama.lua --weights "$tmp/chatml.gguf" --tp 2 -o "$tmp/tp2simt.plan" 2>/dev/null &&
	build/tools/simtsrc "$tmp/tp2simt.plan" >"$tmp/tp2simt.cc" 2>"$tmp/tp2simt.err" &&
	${CXX:-c++} -std=c++17 -O1 -w -fPIC -shared -fno-gnu-unique -Itests/simt -Iops "$tmp/tp2simt.cc" tests/simt/simt.cc \
		-o "$tmp/tp2simt.so" 2>>"$tmp/tp2simt.err"; then
	P0=$P
	P=$tmp/tp2simt.plan
	if LD_LIBRARY_PATH=build/simtcuda SIMTCUDA_NDEV=2 GLMRUN_NCCL=build/simtcuda/libnccl.so.2 GLM_SIMT_SO=$tmp/tp2simt.so \
		start tp2simt --device cuda --model-name tiny --max-seqs 4 --max-seq 96 --max-num-batched-tokens 8; then
		python3 tests/serve_client.py tp2gpu "$url" "$P0" "$tmp/tp2simt.log" "$tmp/chatml.gguf" || failed=1
		stop tp2simt
	fi
	P=$P0
else
	bad "tp2simt: plan and its kernels for the simt double" "$(head -c 300 "$tmp/tp2simt.err")"
fi

# The command line: refusals in one line, a port in use, --help.
expect_fail() {
	local name=$1 want=$2
	shift 2
	"$@" >"$tmp/out" 2>"$tmp/err" </dev/null
	local rc=$?
	[ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF -- "$want" "$tmp/err" && ok "$name" ||
		bad "$name" "rc $rc, stderr '$(head -c 300 "$tmp/err")', want one line with '$want'"
}
expect_fail "serve takes no -p" "glmrun serve takes its prompts over HTTP" bin/glmrun serve "$P" -p hi
expect_fail "--port without serve" "go with 'glmrun serve PLAN'" bin/glmrun "$P" --tokens 1 --port 8080
expect_fail "--prefill-alone takes auto, on or off" "--prefill-alone takes auto, on or off, not 'maybe'" bin/glmrun serve "$P" --prefill-alone maybe
expect_fail "--max-seqs out of range" "--max-seqs must be an integer in [1, 255]" bin/glmrun serve "$P" --max-seqs 0
python3 -c 'import socket, time; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(30)' >"$tmp/busy" &
busy=$!
pids+=("$busy")
for _ in $(seq 50); do [ -s "$tmp/busy" ] && break; sleep 0.1; done
expect_fail "a port in use is an error" "serve: cannot listen on 127.0.0.1:$(cat "$tmp/busy")" bin/glmrun serve "$P" --device cpu --port "$(cat "$tmp/busy")"
kill $busy 2>/dev/null
bin/glmrun --help | grep -q -- "--max-num-seqs, llama-server's --parallel" && bin/glmrun --help | grep -q -- "--api-key KEY" &&
	ok "--help lists the serve flags and their vLLM / llama-server names" || bad "--help" "no serve flags"

exit $failed
