#!/usr/bin/env bash
# tests/gpu/build_kernels_test.sh — builds build/gpu/test_kernels and build/gpu/test_fused, the GPU tests of
# ops/kernels.cuh and ops/fused.cuh against the CPU references (ops/ref.c). Run from anywhere; it works from
# the repo root. Needs gcc and nvcc (CUDA 12+, sm_90). Run the results on the GPU machine:
# build/gpu/test_kernels and build/gpu/test_fused (CI never does).
set -eu
cd "$(dirname "$0")/../.."
mkdir -p build/gpu
gcc -O2 -c ops/ref.c -Iops -o build/gpu/ref.o
nvcc -std=c++17 -O2 -arch=sm_90 -Iops tests/gpu/test_kernels.cu build/gpu/ref.o -o build/gpu/test_kernels
nvcc -std=c++17 -O2 -arch=sm_90 -Iops tests/gpu/test_fused.cu build/gpu/ref.o -o build/gpu/test_fused
echo "built build/gpu/test_kernels and build/gpu/test_fused"
