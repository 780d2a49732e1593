#!/usr/bin/env bash
# bench/sass.sh — instruction counts of the one-token quantized GEMV loops (bench/NOTES.md entry 15):
# compiles bench/gemv.cu to an sm_90 cubin and disassembles it with nvdisasm (no GPU needed; PyPI's
# nvidia-cuda-nvdisasm provides it: `pip install nvidia-cuda-nvdisasm`), then prints each loop of the
# g_qgemv<bf16, TYPE, WPR=1> instances: its length and instruction mix. The innermost loop's length over
# the values it covers a lane is the figure NOTES quotes (Q4_K/Q5_K: 2 units x 2 rows, 128 values;
# Q6_K and Q8_0: 1 unit x 2 rows, 64 values).
#
#   bench/sass.sh [TYPE...]     TYPE: ggml ids 8 (Q8_0), 12 (Q4_K), 13 (Q5_K), 14 (Q6_K) (the default), or
#                               a general type's (2 Q4_0 .. 40 NVFP4: 1 unit x 2 rows, 64 values, bench/NOTES.md 63)
#
# Env: NVDISASM (the binary; default: on PATH, else the PyPI package's), OUT (work files).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/glm-sass}
mkdir -p "$OUT"
nvd=${NVDISASM:-$(command -v nvdisasm)}
if [ -z "$nvd" ]; then
	site=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null)
	nvd=$(ls "$site"/nvidia/cu*/bin/nvdisasm "$site"/nvidia/cuda_nvdisasm/bin/nvdisasm 2>/dev/null | head -1)
fi
[ -x "$nvd" ] || { echo "sass.sh: no nvdisasm (pip install nvidia-cuda-nvdisasm, or set NVDISASM)"; exit 2; }
[ $# -gt 0 ] || set -- 8 12 13 14
nvcc -std=c++17 -O2 -cubin -arch=sm_90 -Xptxas -v bench/gemv.cu -o "$OUT/gemv.cubin" 2>"$OUT/ptxas.txt" ||
	{ echo "sass.sh: nvcc failed: $(tail -3 "$OUT/ptxas.txt")"; exit 1; }
"$nvd" -c "$OUT/gemv.cubin" >"$OUT/gemv.sass" || { echo "sass.sh: nvdisasm failed"; exit 1; }
for t in "$@"; do
	fn="_Z7g_qgemvI4bf16Li${t}ELi1EEvPT_PKS1_PKhiii"
	echo "== g_qgemv<bf16, $t, 1>: $(grep -A1 "$fn" "$OUT/ptxas.txt" | grep -o '[0-9]* bytes spill stores' | head -1)"
	python3 bench/sass_loops.py "$OUT/gemv.sass" "$fn"
done
