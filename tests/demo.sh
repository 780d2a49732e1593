#!/usr/bin/env bash
# tests/demo.sh — the whole path in one command: compile the Llama description against a small model,
# run it (on the GPU when there is one, else on the CPU), and show the generated ids next to the ones
# Hugging Face transformers produced.
set -eu
cd "$(dirname "$0")/.."
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
