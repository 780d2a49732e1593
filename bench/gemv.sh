#!/usr/bin/env bash
# bench/gemv.sh — the decode GEMV micro-benchmark on the GPU machine: glmc's kernels (build/bench/gemv,
# built by `make gpu-bundle` or `make bench-gemv`) and the PyTorch peer (bench/gemv_peer.py), each with the
# read bandwidth measured in its own process. Run from the repository root; takes about two minutes.
#   bench/gemv.sh [--act bf16|f32]
set -eu
cd "$(dirname "$0")/.."
build/bench/gemv "$@"
echo
python3 bench/gemv_peer.py
