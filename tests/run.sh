#!/usr/bin/env bash
# tests/run.sh — the CPU test suite (CI runs it through `make test`). Runs every build/tests/test_*
# program, build/simt/test_qgemv, test_gemv, test_moe, test_prefill, test_attn_split, test_indexer, test_moe_tc, test_persist and test_concurrent (the
# quantized and float decode kernels, the tensor-core prefill kernels and routed experts, the split decode attention,
# the residual sums and the MoE kernels on the CPU, under a minute each: one OS thread of fibers) and the CLI checks in
# tests/cli.sh, tests/archs.sh, tests/tok.sh, tests/gguf_moe.sh, tests/iq_gguf.sh, tests/batch.sh, tests/chat.sh, tests/serve.sh, tests/bench.sh, tests/ranks.sh,
# tests/simt_gpu.sh (the GPU path on the CPU through a driver double that runs the kernels), tests/simt_persist.sh
# (glmrun --decode persistent on that double), tests/simt_tp.sh (tensor-parallel plans on several of its GPUs,
# with an NCCL double that sums),
# tests/bf16_cpu.sh, tests/llama3_rope.sh, tests/smol.sh (a real model: `make fetch-model` first), tests/safe.sh,
# tests/cli_aliases.sh, tests/chunks.sh (prefill in steps against one pass, every architecture) and
# tests/layers.sh (the include check),
# counts "ok"/"FAIL" lines, ends with "N passed, N failed".
# A program that crashes or exits non-zero without reporting a FAIL counts as one failure.
set -u
cd "$(dirname "$0")/.."
log=$(mktemp)
one=$(mktemp)
trap 'rm -f "$log" "$one"' EXIT
for t in build/tests/test_* build/simt/test_qgemv build/simt/test_gemv build/simt/test_moe build/simt/test_prefill build/simt/test_attn_split build/simt/test_indexer build/simt/test_moe_tc build/simt/test_persist build/simt/test_concurrent tests/cli.sh tests/archs.sh tests/tok.sh tests/gguf_moe.sh tests/iq_gguf.sh tests/batch.sh tests/chat.sh tests/serve.sh tests/bench.sh tests/ranks.sh tests/simt_gpu.sh tests/simt_persist.sh tests/simt_tp.sh tests/bf16_cpu.sh tests/llama3_rope.sh tests/smol.sh tests/safe.sh tests/cli_aliases.sh tests/chunks.sh tests/layers.sh; do
	[ -x "$t" ] || continue
	echo "== $t"
	"$t" >"$one" 2>&1
	rc=$?
	grep -v '^ok - ' "$one"
	cat "$one" >>"$log"
	if [ "$rc" -ne 0 ] && ! grep -q '^FAIL - ' "$one"; then
		echo "FAIL - $t exited with status $rc" | tee -a "$log"
	fi
done
pass=$(grep -c '^ok - ' "$log")
fail=$(grep -c '^FAIL - ' "$log")
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
