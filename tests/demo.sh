#!/usr/bin/env bash
# tests/demo.sh — the whole path in one command: compile the Llama description against a small model,
# run it on the CPU, and show the generated ids next to the ones Hugging Face transformers produced.
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
echo "+ bin/glmrun $plan --device cpu --tokens $prompt -n 12"
out=$(bin/glmrun $plan --device cpu --tokens "$prompt" -n 12)
echo "glmc:         $out"
echo "transformers: $(build/tools/cmplogits --greedy $fix)"
