#!/usr/bin/env bash
# tests/demo.sh — the whole path in one command. First a real model: fetch SmolLM2-135M-Instruct (GGUF
# Q4_1, 98 MB, once, into the cache: tests/tools/fetch_smollm2.sh), compile models/llama.lua against it
# and let it answer a question on the CPU. Then the small Llama checkpoint beside the repository, run on
# the GPU when there is one (else the CPU), its generated ids next to the ones Hugging Face transformers
# produced.
set -eu
cd "$(dirname "$0")/.."
gguf=$(tests/tools/fetch_smollm2.sh)
smol=build/demo-smol.plan
echo "+ bin/glmc compile models/llama.lua --weights $gguf -o $smol"
bin/glmc compile models/llama.lua --weights "$gguf" -o $smol
q="What is the capital of France?"
echo "+ printf '$q\\n' | bin/glmrun $smol --device cpu --chat"
printf '%s\n' "$q" | bin/glmrun $smol --device cpu --chat

fix=../shared/fixtures/hf/llama
if [ ! -d $fix ]; then
	echo "demo: the reference model $fix is missing (it ships beside the repository)" >&2
	exit 1
fi
plan=build/demo-llama.plan
echo "+ bin/glmc compile models/llama.lua --weights $fix -o $plan"
bin/glmc compile models/llama.lua --weights $fix -o $plan
prompt=$(build/tools/cmplogits --prompt $fix)
echo "+ bin/glmrun $plan --tokens $prompt -n 12 --stats"
out=$(bin/glmrun $plan --tokens "$prompt" -n 12 --stats 2>/tmp/glm-demo.$$)
grep -E "stats: (device|decode)" /tmp/glm-demo.$$ || true
rm -f /tmp/glm-demo.$$
echo "glmc:         $out"
echo "transformers: $(build/tools/cmplogits --greedy $fix)"
